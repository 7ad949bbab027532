#include "models/search_results_model.h"

#include <algorithm>

namespace ps::gui {

SearchResultsModel::SearchResultsModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void SearchResultsModel::setResults(std::vector<Plan> plans)
{
    beginResetModel();
    m_plans = std::move(plans);
    endResetModel();
}

void SearchResultsModel::addResult(Plan plan)
{
    const auto at = std::upper_bound(m_plans.begin(), m_plans.end(), plan, rankedBefore);
    const auto row = static_cast<int>(at - m_plans.begin());
    beginInsertRows({}, row, row);
    m_plans.insert(at, std::move(plan));
    endInsertRows();
}

int SearchResultsModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_plans.size());
}

int SearchResultsModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant SearchResultsModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid) || role != Qt::DisplayRole)
        return {};
    const auto& p = m_plans[static_cast<std::size_t>(index.row())];
    switch (index.column()) {
    case RankColumn:
        return index.row() + 1;
    case AlgorithmColumn:
        return QString::fromStdString(p.algorithm);
    case ScheduleColumn:
        return QString::fromStdString(scheduleName(p.schedule));
    case FeasibleColumn:
        return p.feasible ? tr("yes") : tr("no");
    case SlowestColumn:
        return p.feasible ? QString::number(p.slowestStageNs / 1e6, 'f', 3) : QString();
    case IterationColumn:
        return p.simulation ? QString::number(p.simulation->iterationNs / 1e6, 'f', 3) : QString();
    case ThroughputColumn:
        return p.simulation ? QString::number(p.simulation->samplesPerSecond, 'f', 1) : QString();
    case CutsColumn:
        return QString::fromStdString(p.stageDevices.empty() ? p.partition.cutsText() : p.stageDevicesText());
    case ReasonColumn:
        return QString::fromStdString(p.reason);
    default:
        return {};
    }
}

QVariant SearchResultsModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const char* const kNames[ColumnCount] = { "#", "Algorithm", "Schedule", "Feasible", "Slowest stage ms",
        "Iteration ms", "Samples/s", "Cuts", "Why not" };
    return section >= 0 && section < ColumnCount ? tr(kNames[section]) : QVariant();
}

} // namespace ps::gui
