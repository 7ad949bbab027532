// The project's training runs, newest first: plan, status, steps, final loss and throughput.
// Reading a project first marks runs left "running" by a process that no longer exists as
// interrupted (power loss, SIGKILL), so the history never shows a dead run as going.
#pragma once

#include "store/project_store.h"

#include <QAbstractTableModel>

namespace ps::gui {

class RunsModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    // A profiler trace stored as a run by `pipestudio import-trace` (its timeline, no loss).
    [[nodiscard]] static bool isImportedTrace(const ProjectStore::RunRow& row);

    enum Column {
        RunColumn,
        PlanColumn,
        StatusColumn,
        StartedColumn,
        StepsColumn,
        LossColumn,
        ThroughputColumn,
        MessageColumn,
        ColumnCount
    };
    enum Role { RunIdRole = Qt::UserRole };

    explicit RunsModel(QObject* parent = nullptr);

    // Reads the runs of `projectPath`; an empty path or an unreadable file leaves the model empty.
    void setProject(const QString& projectPath);
    void reload();
    [[nodiscard]] const QString& projectPath() const
    {
        return m_path;
    }
    [[nodiscard]] const ProjectStore::RunRow* row(int r) const;
    [[nodiscard]] int rowOf(std::int64_t runId) const;
    // Runs found dead and stored as interrupted since this project was set.
    [[nodiscard]] const std::vector<std::int64_t>& markedInterrupted() const
    {
        return m_marked;
    }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QString m_path;
    std::vector<ProjectStore::RunRow> m_rows;
    std::vector<std::int64_t> m_marked;
};

} // namespace ps::gui
