// The scale-out curve (models/scale_out.h): the best configuration's TFLOP/s per GPU (left axis)
// and memory per GPU (right axis) against the GPU count (log 2).
#pragma once

#include "models/scale_out.h"

#include <QWidget>

class QCustomPlot;

namespace ps::gui {

class ScaleOutPlot : public QWidget
{
    Q_OBJECT
public:
    explicit ScaleOutPlot(QWidget* parent = nullptr);
    void setCurve(const std::vector<ScaleOutPoint>& curve);
    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }

private:
    QCustomPlot* m_plot;
};

} // namespace ps::gui
