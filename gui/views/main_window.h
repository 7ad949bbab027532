// The main window: File menu (new from zoo, open, save, recent, export), Plan, Run (launch, stop,
// kill, compare), Profile and View menus, the docks (nodes, summary, cluster, stage balance,
// plans, timeline, monitor) with a remembered layout, and drag-and-drop of project files. Long
// loads and the CPU measurement run as BackgroundJobs; the window stays responsive meanwhile.
#pragma once

#include <QMainWindow>
#include <QStringList>

#include <functional>

class QDockWidget;
class QLabel;
class QMenu;

namespace ps {
struct ModelConfig;
struct OnnxImportOptions;
} // namespace ps

namespace ps::gui {

class BackgroundJob;
struct JobOutcome;
struct LoadedProject;

class ClusterDock;
class LaunchDialog;
class MonitorDock;
class RunLauncher;
class RunMonitorModel;
class RunsModel;
class ProfileDock;
class RunCompareView;
class NodeTableModel;
class NodeTableView;
class PartitionEditorPlot;
class PlanSession;
class PlansModel;
class PlansPanel;
class ProjectSession;
class StageBalanceModel;
class StageBalancePlot;
class SummaryModel;
class SummaryPanel;
class TimelinePlot;

class MainWindow : public QMainWindow
{
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    // Synchronous loads (scripts, screenshots, tests).
    bool openProject(const QString& path);
    // batch, sequence 0: the sizes a fixed-shape export has, 1 and 128 for dynamic dimensions.
    bool importOnnx(const QString& path, std::int64_t batch = 0, std::int64_t sequence = 0);
    // What the menus, drops and start-up use: the file is read (or the model built) by a
    // BackgroundJob while the window shows a busy state, and the project is adopted on the GUI
    // thread; loadFinished reports the end. False when another load is going.
    bool openProjectInBackground(const QString& path);
    bool importOnnxInBackground(const QString& path, std::int64_t batch = 0, std::int64_t sequence = 0,
        const QString& loss = {}, bool keepWeights = true);
    bool importOnnxInBackground(const QString& path, const OnnxImportOptions& options, const QString& loss);
    bool newFromZooInBackground(const ModelConfig& config);
    // First start: the example project (gpt2-tiny with a 2-stage CPU plan), created in the app
    // data folder when missing, opened with its plan in the editor.
    bool openExampleInBackground();
    // `pipestudio [gui] [project] [--model name]`: the project, else the zoo model, else (first
    // start: no recent project) the example. False when it starts no load.
    bool openOnStart(const QString& project, const QString& model);
    [[nodiscard]] bool isLoading() const;
    [[nodiscard]] ProjectSession* session() const
    {
        return m_session;
    }
    [[nodiscard]] NodeTableView* nodeTable() const
    {
        return m_nodeTable;
    }
    [[nodiscard]] SummaryPanel* summaryPanel() const
    {
        return m_summaryPanel;
    }
    [[nodiscard]] QStringList recentFiles() const;
    [[nodiscard]] PlanSession* planSession() const
    {
        return m_planSession;
    }
    [[nodiscard]] PartitionEditorPlot* editor() const
    {
        return m_editor;
    }
    [[nodiscard]] StageBalanceModel* stageBalance() const
    {
        return m_balanceModel;
    }
    [[nodiscard]] TimelinePlot* timeline() const
    {
        return m_timeline;
    }
    [[nodiscard]] StageBalancePlot* balancePlot() const
    {
        return m_balancePlot;
    }
    [[nodiscard]] PlansPanel* plansPanel() const
    {
        return m_plansPanel;
    }
    [[nodiscard]] ClusterDock* clusterDock() const
    {
        return m_clusterDock;
    }
    void openAutoSearch();
    void openScaleOut();

    // Run > Launch: saves an unsaved project first, then shows the launch dialog.
    void openLaunchDialog();
    // Starts what the dialog chose (the current edit is stored as a plan first); false when it
    // refuses or cannot start.
    bool launch(const LaunchDialog& dialog);
    [[nodiscard]] RunLauncher* launcher() const
    {
        return m_launcher;
    }
    [[nodiscard]] MonitorDock* monitor() const
    {
        return m_monitor;
    }
    [[nodiscard]] RunMonitorModel* monitorModel() const
    {
        return m_monitorModel;
    }
    [[nodiscard]] RunsModel* runsModel() const
    {
        return m_runsModel;
    }
    [[nodiscard]] RunCompareView* compareView() const
    {
        return m_compare;
    }
    [[nodiscard]] ProfileDock* profileDock() const
    {
        return m_profileDock;
    }
    // A child process works on the project file: save it first (Save As when it has none); false
    // when the user cancelled or the save failed.
    bool ensureSavedForChild();
    // Profile > On this machine: measures the project on this CPU in a child process; when it is
    // stored, the editor and balance views plan with it.
    void profileThisMachine();
    // Profile > Import profiler trace: a PyTorch profiler or Nsight Systems trace of the user's run,
    // previewed with its coverage report, stored as the imported profile and a measured run.
    void importProfilerTrace();
    // Every dock, by its object name ("Nodes", "Monitor", ...).
    [[nodiscard]] QDockWidget* dock(const QString& name) const;
    [[nodiscard]] QMenu* viewMenu() const
    {
        return m_viewMenu;
    }
    // Every dock back where it started, visible.
    void resetLayout();
    // File > Export; each returns false and shows why when it cannot write.
    bool exportSimulatedTrace(const QString& path);
    bool exportMeasuredTrace(const QString& path, std::int64_t runId = 0);
    bool exportScheduleCsv(const QString& path);

    static bool isProjectFile(const QString& path);
    static bool isOnnxFile(const QString& path);

Q_SIGNALS:
    void loadFinished(bool ok);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    void setupCentralWidget();
    void setupDocks();
    void setupPlanMenu();
    void connectSelection();
    void setupFileMenu();
    void setupHelpMenu();
    void setupRunDocks();
    void setupRunMenu();
    void setupProfileMenu();
    void setupViewMenu();
    void setupExportMenu(QMenu* file);
    void restoreLayout();
    void useMeasuredProfile();
    void connectSession();
    void setupBackgroundWork();
    bool loadInBackground(const QString& what, std::function<LoadedProject()> load, std::function<void()> then = {});
    void onLoadFinished(const JobOutcome& outcome);
    void setBusy(const QString& what);

    void newFromZoo();
    void openWithDialog();
    void importWithDialog();
    void saveAs();
    void refreshViews();
    void updateTitle();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void showError(const QString& message);

    ProjectSession* m_session;
    NodeTableModel* m_nodeModel;
    SummaryModel* m_summaryModel;
    PlanSession* m_planSession;
    StageBalanceModel* m_balanceModel;
    PlansModel* m_plansModel;
    NodeTableView* m_nodeTable = nullptr;
    SummaryPanel* m_summaryPanel = nullptr;
    PartitionEditorPlot* m_editor = nullptr;
    StageBalancePlot* m_balancePlot = nullptr;
    TimelinePlot* m_timeline = nullptr;
    PlansPanel* m_plansPanel = nullptr;
    ClusterDock* m_clusterDock = nullptr;
    QMenu* m_recentMenu = nullptr;
    QMenu* m_viewMenu = nullptr;
    RunLauncher* m_launcher = nullptr;
    RunMonitorModel* m_monitorModel = nullptr;
    RunsModel* m_runsModel = nullptr;
    MonitorDock* m_monitor = nullptr;
    RunCompareView* m_compare = nullptr;
    ProfileDock* m_profileDock = nullptr;
    QByteArray m_defaultLayout;
    BackgroundJob* m_loadJob = nullptr;
    BackgroundJob* m_cpuJob = nullptr;
    std::function<void()> m_afterLoad;
    QLabel* m_busyLabel = nullptr;
};

} // namespace ps::gui
