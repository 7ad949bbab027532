// Predicted vs measured: pick a run and one of its stored iterations; the measured timeline is
// drawn under the simulated one per device, with the largest per-action differences and the
// per-device peak memory (predicted against measured) in tables beside it.
#pragma once

#include <QWidget>

#include <memory>

class QComboBox;
class QLabel;
class QTableWidget;

namespace ps::engine {
struct RunComparison;
}

namespace ps::gui {

class CompareTimelinePlot;
class RunsModel;
using engine::RunComparison;

class RunCompareView : public QWidget
{
    Q_OBJECT
public:
    explicit RunCompareView(RunsModel* runs, QWidget* parent = nullptr);
    ~RunCompareView() override;

    // Shows run `runId` at `iteration` (0: its last stored); false (and `failed`) when it cannot.
    bool showRun(std::int64_t runId, std::int64_t iteration = 0);
    [[nodiscard]] const RunComparison* comparison() const
    {
        return m_comparison.get();
    }
    [[nodiscard]] CompareTimelinePlot* plot() const
    {
        return m_plot;
    }
    [[nodiscard]] QTableWidget* actionsTable() const
    {
        return m_actions;
    }
    [[nodiscard]] QTableWidget* peaksTable() const
    {
        return m_peaks;
    }

Q_SIGNALS:
    void failed(const QString& message);

private:
    void fillRuns();
    void fillTables();

    RunsModel* m_runs;
    std::unique_ptr<RunComparison> m_comparison;
    QComboBox* m_run = nullptr;
    QComboBox* m_iteration = nullptr;
    QLabel* m_summary = nullptr;
    CompareTimelinePlot* m_plot = nullptr;
    QTableWidget* m_actions = nullptr;
    QTableWidget* m_peaks = nullptr;
};

} // namespace ps::gui
