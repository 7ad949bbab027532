// The Monitor dock: the live run (status, progress with ETA, Stop and Kill, the charts, the log
// tail) and the project's runs history; opening a finished run shows its curves against its
// prediction.
#pragma once

#include <QElapsedTimer>
#include <QWidget>

class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QTableView;

namespace ps::gui {

class RunLauncher;
class RunMonitorModel;
class RunMonitorPlot;
class RunsModel;
struct RunOutcome;

class MonitorDock : public QWidget
{
    Q_OBJECT
public:
    MonitorDock(RunLauncher* launcher, RunMonitorModel* model, RunsModel* runs, QWidget* parent = nullptr);

    // Shows a stored run of the project: its steps, peaks and status, with its prediction.
    bool openRun(std::int64_t runId);
    // "step 12 / 20 · ETA 3 s" while running, the status otherwise.
    [[nodiscard]] QString progressText() const;
    // "Run 3: failed · no step measured yet, 35.0 ms predicted" (rich text).
    [[nodiscard]] QString statusText() const;

    [[nodiscard]] RunMonitorPlot* plot() const
    {
        return m_plot;
    }
    [[nodiscard]] QProgressBar* progressBar() const
    {
        return m_progress;
    }
    [[nodiscard]] QPlainTextEdit* log() const
    {
        return m_log;
    }
    [[nodiscard]] QTableView* runsTable() const
    {
        return m_runsTable;
    }
    [[nodiscard]] QPushButton* stopButton() const
    {
        return m_stop;
    }
    [[nodiscard]] QPushButton* killButton() const
    {
        return m_kill;
    }

Q_SIGNALS:
    void message(const QString& text);
    void failed(const QString& text);

private:
    void setupHeader();
    void setupTabs();
    void refresh();
    void onFinished(const RunOutcome& outcome);

    RunLauncher* m_launcher;
    RunMonitorModel* m_model;
    RunsModel* m_runs;
    QLabel* m_status = nullptr;
    QProgressBar* m_progress = nullptr;
    QPushButton* m_stop = nullptr;
    QPushButton* m_kill = nullptr;
    RunMonitorPlot* m_plot = nullptr;
    QPlainTextEdit* m_log = nullptr;
    QTableView* m_runsTable = nullptr;
    QElapsedTimer m_runsRefreshed; // the runs table follows a going run every few seconds
};

} // namespace ps::gui
