// The schedule timeline: a Gantt chart per device of the simulated iteration (F, B, W, recompute,
// swap and send blocks colored by micro-batch), with memory over time per device below it and a
// legend of the block shades under both; time and memory in units that fit the iteration (us, ms
// or s; B to GiB). Zoom and pan on the time axis; a tooltip names the block under the mouse.
#pragma once

#include <QWidget>

class QCustomPlot;
class QCPAxisRect;
class QCPLegend;
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
    // The memory strip's unit and how much of its axis the highest curve fills; the time unit.
    [[nodiscard]] QString memoryAxisLabel() const;
    [[nodiscard]] double memoryAxisFill() const
    {
        return m_memoryFill;
    }
    [[nodiscard]] QString timeAxisLabel() const;
    [[nodiscard]] int legendEntries() const;

private:
    void rebuild();
    void drawEvents();
    void drawMemory();
    void drawLegend();
    void onMove(QMouseEvent* event);

    PlanSession* m_session;
    QCustomPlot* m_plot;
    QCPAxisRect* m_gantt;
    QCPAxisRect* m_memory;
    QCPLegend* m_legend;
    double m_nsPerUnit = 1e6; // the time axis's unit
    double m_memoryFill = 0;
    int m_blocks = 0;
};

} // namespace ps::gui
