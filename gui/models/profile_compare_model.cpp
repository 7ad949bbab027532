#include "models/profile_compare_model.h"

#include "graph/graph_summary.h"

namespace ps::gui {
namespace {

    double relative(double predicted, double measured)
    {
        return measured > 0 ? predicted / measured - 1 : 0;
    }

} // namespace

ProfileCompareModel::ProfileCompareModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void ProfileCompareModel::setProfiles(
    std::shared_ptr<const Graph> graph, const Profile* predicted, const Profile* measured, double mb)
{
    beginResetModel();
    m_rows.clear();
    if (graph && predicted && measured && predicted->nodes.size() == graph->nodeCount()
        && measured->nodes.size() == graph->nodeCount()) {
        for (std::size_t i = 0; i < graph->nodeCount(); ++i) {
            const auto& n = graph->nodes()[i];
            const auto& p = predicted->nodes[i];
            const auto& m = measured->nodes[i];
            m_rows.push_back({ QString::fromStdString(n.name),
                QString::fromLatin1(toString(n.op).data(), static_cast<qsizetype>(toString(n.op).size())),
                (p.forwardNs.at(mb) + p.backwardNs.at(mb)) / 1e6, (m.forwardNs.at(mb) + m.backwardNs.at(mb)) / 1e6,
                p.savedBytes.at(mb), m.savedBytes.at(mb) });
        }
    }
    endResetModel();
}

double ProfileCompareModel::timeError(int row) const
{
    const auto& r = m_rows.at(static_cast<std::size_t>(row));
    return relative(r.predictedMs, r.measuredMs);
}

int ProfileCompareModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int ProfileCompareModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant ProfileCompareModel::value(const Row& r, int column) const
{
    switch (column) {
    case NodeColumn:
        return r.node;
    case OpColumn:
        return r.op;
    case PredictedMsColumn:
        return r.predictedMs;
    case MeasuredMsColumn:
        return r.measuredMs;
    case TimeErrorColumn:
        return relative(r.predictedMs, r.measuredMs);
    case PredictedSavedColumn:
        return r.predictedSaved;
    case MeasuredSavedColumn:
        return r.measuredSaved;
    case MemoryErrorColumn:
        return relative(r.predictedSaved, r.measuredSaved);
    default:
        return {};
    }
}

QVariant ProfileCompareModel::data(const QModelIndex& index, int role) const
{
    if (!index.isValid())
        return {};
    const auto& r = m_rows[static_cast<std::size_t>(index.row())];
    const auto v = value(r, index.column());
    if (role == Qt::UserRole)
        return v;
    if (role != Qt::DisplayRole)
        return {};
    switch (index.column()) {
    case PredictedMsColumn:
    case MeasuredMsColumn:
        return QString::number(v.toDouble(), 'f', 3);
    case TimeErrorColumn:
    case MemoryErrorColumn:
        return QStringLiteral("%1%").arg(100 * v.toDouble(), 0, 'f', 1);
    case PredictedSavedColumn:
    case MeasuredSavedColumn:
        return QString::fromStdString(formatBytes(v.toDouble()));
    default:
        return v;
    }
}

QVariant ProfileCompareModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const QStringList names { tr("Node"), tr("Op"), tr("Predicted ms (analytical)"), tr("Measured ms"),
        tr("Time error"), tr("Predicted saved"), tr("Measured saved"), tr("Memory error") };
    return section < names.size() ? names[section] : QVariant();
}

} // namespace ps::gui
