#include "models/plans_model.h"

#include "graph/graph_summary.h"

#include <nlohmann/json.hpp>

namespace ps::gui {

PlansModel::PlansModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void PlansModel::setProject(const QString& projectPath)
{
    m_path = projectPath;
    reload();
}

void PlansModel::reload()
{
    beginResetModel();
    m_rows.clear();
    if (!m_path.isEmpty()) {
        try {
            m_rows = ProjectStore::open(m_path.toStdString(), ProjectStore::Access::ReadOnly).loadPlans();
        } catch (const std::exception&) {
            m_rows.clear(); // not a project (yet): no plans to show
        }
    }
    endResetModel();
}

const ProjectStore::PlanRow* PlansModel::row(int r) const
{
    return r >= 0 && static_cast<std::size_t>(r) < m_rows.size() ? &m_rows[static_cast<std::size_t>(r)] : nullptr;
}

QList<double> PlansModel::stagePeaks(int r) const
{
    QList<double> peaks;
    if (const auto* p = row(r)) {
        const auto j = nlohmann::json::parse(p->json, nullptr, false);
        if (j.is_object() && j.contains("stage_details")) {
            for (const auto& s : j["stage_details"])
                peaks.append(s.value("peak_bytes", 0.0));
        }
    }
    return peaks;
}

double PlansModel::metric(int r, int column) const
{
    const auto* p = row(r);
    if (!p)
        return 0;
    const auto j = nlohmann::json::parse(p->json, nullptr, false);
    const auto sim = j.is_object() ? j.value("simulation", nlohmann::json::object()) : nlohmann::json::object();
    switch (column) {
    case SlowestColumn:
        return p->slowestStageNs / 1e6;
    case IterationColumn:
        return sim.value("iteration_ms", 0.0);
    case BubbleColumn:
        return 100 * sim.value("bubble_fraction", 0.0);
    case ThroughputColumn:
        return sim.value("samples_per_second", 0.0);
    case PeakColumn: {
        double peak = 0;
        for (double v : stagePeaks(r))
            peak = std::max(peak, v);
        return peak;
    }
    default:
        return 0;
    }
}

int PlansModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int PlansModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant PlansModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const auto& p = m_rows[static_cast<std::size_t>(index.row())];
    if (role == PlanIdRole)
        return static_cast<qlonglong>(p.id);
    const int c = index.column();
    if (role == ValueRole)
        return metric(index.row(), c);
    if (role != Qt::DisplayRole && role != Qt::EditRole)
        return {};
    switch (c) {
    case NameColumn:
        return QString::fromStdString(p.name);
    case AlgorithmColumn:
        return QString::fromStdString(p.algorithm);
    case FeasibleColumn:
        return p.feasible ? tr("yes") : tr("no");
    case PeakColumn:
        return QString::fromStdString(formatBytes(metric(index.row(), c)));
    case CutsColumn: {
        const auto j = nlohmann::json::parse(p.json, nullptr, false);
        return QString::fromStdString(j.is_object() ? j.value("cuts", std::string()) : std::string());
    }
    default:
        return QString::number(metric(index.row(), c), 'f', c == BubbleColumn ? 1 : 2);
    }
}

QVariant PlansModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const char* const kNames[ColumnCount] = { "Name", "Algorithm", "Feasible", "Slowest stage ms",
        "Iteration ms", "Bubble %", "Peak", "Samples/s", "Cuts" };
    return section >= 0 && section < ColumnCount ? tr(kNames[section]) : QVariant();
}

bool PlansModel::setData(const QModelIndex& index, const QVariant& value, int role)
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid) || role != Qt::EditRole || index.column() != NameColumn)
        return false;
    const auto name = value.toString().trimmed();
    if (name.isEmpty())
        return false;
    try {
        ProjectStore::open(m_path.toStdString())
            .renamePlan(m_rows[static_cast<std::size_t>(index.row())].id, name.toStdString());
    } catch (const std::exception&) {
        return false;
    }
    m_rows[static_cast<std::size_t>(index.row())].name = name.toStdString();
    Q_EMIT dataChanged(index, index);
    return true;
}

Qt::ItemFlags PlansModel::flags(const QModelIndex& index) const
{
    auto f = QAbstractTableModel::flags(index);
    return index.isValid() && index.column() == NameColumn ? f | Qt::ItemIsEditable : f;
}

} // namespace ps::gui
