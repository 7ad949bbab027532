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

private:
    void rebuild();
    void addStack(QCPAxisRect* rect, const QList<int>& columns, const QStringList& names, const QList<QColor>& colors,
        double scale);

    StageBalanceModel* m_model;
    QCustomPlot* m_plot;
    QCPAxisRect* m_compute;
    QCPAxisRect* m_memory;
};

} // namespace ps::gui
