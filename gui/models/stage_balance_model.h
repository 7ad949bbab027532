// One row per pipeline stage: compute split into forward / backward / recompute / swap stall and
// memory split into parameters / gradients / optimizer / activations / workspace, against the
// device capacity. Values come from the plan session's snapshot (core's planner and simulator).
#pragma once

#include <QAbstractTableModel>

namespace ps::gui {

class PlanSession;

class StageBalanceModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column {
        StageColumn,
        NodesColumn,
        ForwardColumn, // ms per micro-batch
        BackwardColumn,
        RecomputeColumn,
        SwapStallColumn,
        ParametersColumn, // bytes
        GradientsColumn,
        OptimizerColumn,
        ActivationsColumn,
        WorkspaceColumn,
        PeakColumn,
        CapacityColumn,
        OverColumn,
        ColumnCount
    };
    enum Role { ValueRole = Qt::UserRole }; // the number behind a cell

    explicit StageBalanceModel(PlanSession* session, QObject* parent = nullptr);

    // The number of a cell (ms or bytes); what the stage balance plot draws.
    [[nodiscard]] double value(int stage, Column column) const;
    [[nodiscard]] bool isOverCapacity(int stage) const
    {
        return value(stage, OverColumn) > 0;
    }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    void refresh();

    PlanSession* m_session;
    QList<QList<double>> m_rows;
};

} // namespace ps::gui
