#include "models/stage_balance_model.h"

#include "graph/graph_summary.h"
#include "models/plan_session.h"

#include <QBrush>
#include <QColor>

namespace ps::gui {
namespace {

    QList<double> rowFor(const EditorSnapshot& snap, const Partition& partition, std::size_t nodeCount, std::size_t s)
    {
        const auto& stage = snap.plan.stages[s];
        const auto& device = snap.simulation.devices[s % snap.simulation.devices.size()];
        const auto& mem = device.memory;
        const StageId id(static_cast<std::uint32_t>(s));
        const double recompute = stage.memoryPlan.recomputeNs;
        QList<double> row(StageBalanceModel::ColumnCount, 0.0);
        row[StageBalanceModel::StageColumn] = static_cast<double>(s);
        row[StageBalanceModel::NodesColumn] =
            static_cast<double>(partition.stageEnd(id, nodeCount) - partition.stageBegin(id));
        row[StageBalanceModel::ForwardColumn] = stage.cost.forwardNs / 1e6;
        row[StageBalanceModel::BackwardColumn] = stage.cost.backwardNs / 1e6;
        row[StageBalanceModel::RecomputeColumn] = recompute / 1e6;
        row[StageBalanceModel::SwapStallColumn] = std::max(0.0, stage.overheadNs - recompute) / 1e6;
        row[StageBalanceModel::ParametersColumn] = mem.parameters + mem.stashedWeights;
        row[StageBalanceModel::GradientsColumn] = mem.gradients;
        row[StageBalanceModel::OptimizerColumn] = mem.optimizerStates;
        row[StageBalanceModel::WorkspaceColumn] = mem.workspace;
        row[StageBalanceModel::PeakColumn] = device.peakBytes;
        // Activations at the peak: whatever the static parts do not explain.
        row[StageBalanceModel::ActivationsColumn] = std::max(0.0, device.peakBytes - mem.staticBytes());
        row[StageBalanceModel::CapacityColumn] = device.capacityBytes;
        row[StageBalanceModel::OverColumn] = std::max(0.0, device.peakBytes - device.capacityBytes);
        return row;
    }

    bool isBytes(int column)
    {
        return column >= StageBalanceModel::ParametersColumn;
    }

} // namespace

StageBalanceModel::StageBalanceModel(PlanSession* session, QObject* parent)
    : QAbstractTableModel(parent)
    , m_session(session)
{
    connect(session, &PlanSession::planChanged, this, &StageBalanceModel::refresh);
    refresh();
}

void StageBalanceModel::refresh()
{
    beginResetModel();
    m_rows.clear();
    if (m_session->hasPlan()) {
        const auto& snap = m_session->snapshot();
        const auto& partition = m_session->editor().partition();
        for (std::size_t s = 0; s < snap.plan.stages.size(); ++s)
            m_rows.append(rowFor(snap, partition, m_session->graph()->nodeCount(), s));
    }
    endResetModel();
}

double StageBalanceModel::value(int stage, Column column) const
{
    if (stage < 0 || stage >= m_rows.size())
        return 0;
    return m_rows[stage][column];
}

int StageBalanceModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(m_rows.size());
}

int StageBalanceModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant StageBalanceModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid))
        return {};
    const double v = m_rows[index.row()][index.column()];
    switch (role) {
    case Qt::DisplayRole:
        if (index.column() <= NodesColumn)
            return QString::number(static_cast<qlonglong>(v));
        if (isBytes(index.column()))
            return index.column() == OverColumn && v <= 0 ? QString() : QString::fromStdString(formatBytes(v));
        return QString::number(v, 'f', 2);
    case ValueRole:
        return v;
    case Qt::ForegroundRole:
        return isOverCapacity(index.row()) && index.column() >= PeakColumn ? QVariant(QBrush(QColor(0xc0, 0x20, 0x20)))
                                                                           : QVariant();
    case Qt::TextAlignmentRole:
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    default:
        return {};
    }
}

QVariant StageBalanceModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    static const char* const kNames[ColumnCount] = { "Stage", "Nodes", "Forward ms", "Backward ms", "Recompute ms",
        "Swap stall ms", "Parameters", "Gradients", "Optimizer", "Activations", "Workspace", "Peak", "Capacity",
        "Over" };
    return section >= 0 && section < ColumnCount ? tr(kNames[section]) : QVariant();
}

} // namespace ps::gui
