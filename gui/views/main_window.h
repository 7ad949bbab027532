// The main window: File menu (new from zoo, open, save, recent), node table, summary panel and
// drag-and-drop of project files.
#pragma once

#include <QMainWindow>
#include <QStringList>

class QMenu;

namespace ps::gui {

class ClusterDock;
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

    bool openProject(const QString& path);
    // Imports an ONNX model (File > Import ONNX, or a dropped .onnx file).
    bool importOnnx(const QString& path, std::int64_t batch = 1, std::int64_t sequence = 128);
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
    [[nodiscard]] PlansPanel* plansPanel() const
    {
        return m_plansPanel;
    }
    [[nodiscard]] ClusterDock* clusterDock() const
    {
        return m_clusterDock;
    }
    void openAutoSearch();

    static bool isProjectFile(const QString& path);
    static bool isOnnxFile(const QString& path);

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
    void connectSession();

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
};

} // namespace ps::gui
