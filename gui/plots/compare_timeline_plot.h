// Predicted against measured timeline, stacked per device: for each device a row of the
// simulated iteration ("cpu:0 predicted", "cuda:0.1 predicted") above the measured one, on one time
// axis, so each action's predicted and measured place line up. Zoom and pan in time.
#pragma once

#include <QWidget>

#include <vector>

class QCustomPlot;

namespace ps {
struct SimEvent;
}

namespace ps::engine {
struct RunComparison;
}

namespace ps::gui {

using engine::RunComparison;

class CompareTimelinePlot : public QWidget
{
    Q_OBJECT
public:
    explicit CompareTimelinePlot(QWidget* parent = nullptr);

    void setComparison(const RunComparison& comparison);
    void clear();
    [[nodiscard]] QCustomPlot* plot() const
    {
        return m_plot;
    }
    [[nodiscard]] int predictedBlocks() const
    {
        return m_predictedBlocks;
    }
    [[nodiscard]] int measuredBlocks() const
    {
        return m_measuredBlocks;
    }

private:
    int drawRow(const std::vector<SimEvent>& events, int microBatches, int rowOfDevice0, int rowsPerDevice);

    QCustomPlot* m_plot;
    int m_predictedBlocks = 0;
    int m_measuredBlocks = 0;
};

} // namespace ps::gui
