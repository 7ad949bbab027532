// Stage balance: per stage, compute (forward / backward / recompute / swap stall) and memory
// (parameters / gradients / optimizer / activations / workspace) against the device capacity;
// stages over capacity are labelled in red with the overflow. Draws StageBalanceModel's values.
#pragma once

#include <QWidget>

class QCustomPlot;
class QCPAxisRect;

namespace ps::gui {

class StageBalanceModel;

class StageBalancePlot : public QWidget
{
    Q_OBJECT
public:
    explicit StageBalancePlot(StageBalanceModel* model, QWidget* parent = nullptr);

    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }
    // The memory axis's label ("MiB at the peak") and how much of it the highest peak fills.
    [[nodiscard]] QString memoryAxisLabel() const;
    [[nodiscard]] double memoryAxisFill() const
    {
        return m_memoryFill;
    }

private:
    void rebuild();
    void addStack(QCPAxisRect* rect, const QList<int>& columns, const QStringList& names, const QList<QColor>& colors,
        double scale);
    // Stage s's device capacity on the memory axis (values / scale, the axis ending at `top`): a
    // dashed line over its bar, unless it is off the axis (false; the legend names it); and the
    // overflow where the stage does not fit.
    bool drawCapacity(int s, double scale, double top);

    StageBalanceModel* m_model;
    QCustomPlot* m_plot;
    QCPAxisRect* m_compute;
    QCPAxisRect* m_memory;
    double m_memoryFill = 0;
};

} // namespace ps::gui
