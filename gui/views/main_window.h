// The main window: File menu (new from zoo, open, save, recent), node table, summary panel and
// drag-and-drop of project files.
#pragma once

#include <QMainWindow>
#include <QStringList>

class QMenu;

namespace ps::gui {

class NodeTableModel;
class NodeTableView;
class ProjectSession;
class SummaryModel;
class SummaryPanel;

class MainWindow : public QMainWindow
{
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    bool openProject(const QString& path);
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

    static bool isProjectFile(const QString& path);

protected:
    void dragEnterEvent(QDragEnterEvent* event) override;
    void dropEvent(QDropEvent* event) override;
    void closeEvent(QCloseEvent* event) override;

private:
    void setupCentralWidget();
    void setupFileMenu();
    void setupHelpMenu();
    void connectSession();

    void newFromZoo();
    void openWithDialog();
    void saveAs();
    void refreshViews();
    void updateTitle();
    void rememberRecent(const QString& path);
    void rebuildRecentMenu();
    void showError(const QString& message);

    ProjectSession* m_session;
    NodeTableModel* m_nodeModel;
    SummaryModel* m_summaryModel;
    NodeTableView* m_nodeTable = nullptr;
    SummaryPanel* m_summaryPanel = nullptr;
    QMenu* m_recentMenu = nullptr;
};

} // namespace ps::gui
