// The Profile dock: measure the project's nodes on this machine (a child `pipestudio profile`, with
// progress and Cancel), then a per-node table of predicted (analytical) against measured time and
// saved memory, sortable by error.
#pragma once

#include <QWidget>

#include <memory>

class QLabel;
class QProgressBar;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace ps {
class Graph;
struct Profile;
} // namespace ps

namespace ps::gui {

class ProfileCompareModel;
class ProfileRunner;

class ProfileDock : public QWidget
{
    Q_OBJECT
public:
    explicit ProfileDock(QWidget* parent = nullptr);

    // Starts measuring `project` (`sizes`: micro-batch sizes the child measures).
    bool start(const QString& project, int sizes);
    // The table for `graph`: the analytical estimate for this CPU against `measured` at `microBatch`.
    void showComparison(std::shared_ptr<const Graph> graph, const Profile* measured, double microBatch);

    [[nodiscard]] ProfileRunner* runner() const
    {
        return m_runner;
    }
    [[nodiscard]] ProfileCompareModel* model() const
    {
        return m_model;
    }
    [[nodiscard]] QSortFilterProxyModel* proxy() const
    {
        return m_proxy;
    }
    [[nodiscard]] QPushButton* cancelButton() const
    {
        return m_cancel;
    }

Q_SIGNALS:
    // Requests Profile > On this machine (the window knows the project).
    void profileRequested();
    // The child stored a measured profile in the project.
    void profiled(const QString& message);
    void failed(const QString& message);

private:
    ProfileRunner* m_runner;
    ProfileCompareModel* m_model;
    QSortFilterProxyModel* m_proxy;
    QLabel* m_status;
    QProgressBar* m_progress;
    QPushButton* m_start;
    QPushButton* m_cancel;
    QTableView* m_table;
};

} // namespace ps::gui
