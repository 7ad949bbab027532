// Per node: the analytical estimate for this CPU (predicted) against the measured CPU profile,
// forward + backward time and saved bytes at the plan's micro-batch, with the relative error so the
// table sorts by it (Qt::UserRole holds the raw numbers).
#pragma once

#include "cost/profile.h"
#include "graph/graph.h"

#include <QAbstractTableModel>

#include <memory>

namespace ps::gui {

class ProfileCompareModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column {
        NodeColumn,
        OpColumn,
        PredictedMsColumn,
        MeasuredMsColumn,
        TimeErrorColumn,
        PredictedSavedColumn,
        MeasuredSavedColumn,
        MemoryErrorColumn,
        ColumnCount
    };

    explicit ProfileCompareModel(QObject* parent = nullptr);

    // `predicted` and `measured` are profiles of `graph`'s nodes; an empty model when either is missing.
    void setProfiles(
        std::shared_ptr<const Graph> graph, const Profile* predicted, const Profile* measured, double microBatch);
    // predicted / measured - 1 of node `row`'s time (0 when nothing was measured).
    [[nodiscard]] double timeError(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    struct Row
    {
        QString node;
        QString op;
        double predictedMs = 0;
        double measuredMs = 0;
        double predictedSaved = 0;
        double measuredSaved = 0;
    };
    [[nodiscard]] QVariant value(const Row& r, int column) const;

    std::vector<Row> m_rows;
};

} // namespace ps::gui
