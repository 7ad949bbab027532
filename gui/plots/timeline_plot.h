// The schedule timeline: a Gantt chart per device of the simulated iteration (F, B, W, recompute,
// swap and send blocks colored by micro-batch), with memory over time per device below it. Zoom
// and pan on the time axis; a tooltip names the block under the mouse.
#pragma once

#include <QWidget>

class QCustomPlot;
class QCPAxisRect;
class QMouseEvent;

namespace ps::gui {

class PlanSession;

class TimelinePlot : public QWidget
{
    Q_OBJECT
public:
    explicit TimelinePlot(PlanSession* session, QWidget* parent = nullptr);

    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }
    [[nodiscard]] int blockCount() const
    {
        return m_blocks;
    }

private:
    void rebuild();
    void drawEvents();
    void drawMemory();
    void onMove(QMouseEvent* event);

    PlanSession* m_session;
    QCustomPlot* m_plot;
    QCPAxisRect* m_gantt;
    QCPAxisRect* m_memory;
    int m_blocks = 0;
};

} // namespace ps::gui
