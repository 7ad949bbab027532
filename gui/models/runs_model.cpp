#include "models/runs_model.h"

#include <QBrush>
#include <QColor>

namespace ps::gui {

RunsModel::RunsModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void RunsModel::setProject(const QString& projectPath)
{
    if (projectPath != m_path)
        m_marked.clear();
    m_path = projectPath;
    reload();
}

void RunsModel::reload()
{
    beginResetModel();
    m_rows.clear();
    if (!m_path.isEmpty()) {
        try {
            auto store = ProjectStore::open(m_path.toStdString());
            const auto marked = store.markStaleRunsInterrupted();
            m_marked.insert(m_marked.end(), marked.begin(), marked.end());
            m_rows = store.loadRuns();
        } catch (const std::exception&) {
            try { // a read-only file: show what it holds
                m_rows = ProjectStore::open(m_path.toStdString(), ProjectStore::Access::ReadOnly).loadRuns();
            } catch (const std::exception&) {
                m_rows.clear();
            }
        }
    }
    endResetModel();
}

bool RunsModel::isImportedTrace(const ProjectStore::RunRow& row)
{
    return row.json.find(R"("source":"trace")") != std::string::npos;
}

const ProjectStore::RunRow* RunsModel::row(int r) const
{
    return r >= 0 && r < rowCount() ? &m_rows[static_cast<std::size_t>(r)] : nullptr;
}

int RunsModel::rowOf(std::int64_t runId) const
{
    for (std::size_t i = 0; i < m_rows.size(); ++i) {
        if (m_rows[i].id == runId)
            return static_cast<int>(i);
    }
    return -1;
}

int RunsModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int RunsModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant RunsModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid())
        return {};
    const auto& r = m_rows[static_cast<std::size_t>(index.row())];
    if (role == RunIdRole)
        return QVariant::fromValue(r.id);
    if (role == Qt::ForegroundRole && index.column() == StatusColumn) {
        if (r.status == "failed")
            return QBrush(QColor(190, 30, 30));
        if (r.status == "interrupted")
            return QBrush(QColor(170, 110, 0));
        return {};
    }
    if (role == Qt::ToolTipRole && !r.error.empty())
        return QString::fromStdString(r.error);
    if (role != Qt::DisplayRole)
        return {};
    const bool trace = isImportedTrace(r);
    const bool hasSteps = r.steps > 0 && !trace; // a trace's iterations carry no loss or throughput
    switch (index.column()) {
    case RunColumn:
        return QVariant::fromValue(r.id);
    case PlanColumn:
        return trace ? tr("imported trace") : r.planId > 0 ? tr("plan %1").arg(r.planId) : tr("planned at launch");
    case StatusColumn:
        return QString::fromStdString(r.status);
    case StartedColumn:
        return QString::fromStdString(r.startedAt);
    case StepsColumn:
        return QVariant::fromValue(r.steps);
    case LossColumn:
        return hasSteps ? QString::number(r.lastLoss, 'f', 4) : QString();
    case ThroughputColumn:
        return hasSteps ? QString::number(r.lastTokensPerSecond, 'f', 0) : QString();
    case MessageColumn:
        return QString::fromStdString(r.error);
    default:
        return {};
    }
}

QVariant RunsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const QStringList names { tr("Run"), tr("Plan"), tr("Status"), tr("Started (UTC)"), tr("Steps"),
        tr("Final loss"), tr("Tokens/s"), tr("Message") };
    return section < names.size() ? names[section] : QVariant();
}

} // namespace ps::gui
