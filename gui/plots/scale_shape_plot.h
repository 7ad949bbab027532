// The scale-out search by shape (models/scale_out.h): for every tensor x pipeline x data split of
// the GPUs searched, the best configuration's TFLOP/s per GPU (bars, left axis; hollow where none
// fits, the least memory's then) and memory per GPU (points, right axis) against the GPU's memory.
#pragma once

#include "scale/scale_model.h"

#include <QStringList>
#include <QWidget>

class QCustomPlot;

namespace ps::gui {

class ScaleShapePlot : public QWidget
{
    Q_OBJECT
public:
    explicit ScaleShapePlot(QWidget* parent = nullptr);
    // `capacityBytes`: one GPU's memory (a line on the memory axis).
    void setShapes(const std::vector<ScaleEstimate>& shapes, double capacityBytes);
    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }
    // The tick labels, one per shape: "t8 p4 d2".
    [[nodiscard]] const QStringList& labels() const
    {
        return m_labels;
    }

private:
    QCustomPlot* m_plot;
    QStringList m_labels;
};

} // namespace ps::gui
