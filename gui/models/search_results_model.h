// Ranked results of an auto-search: one row per (schedule, algorithm) plan.
#pragma once

#include "plan/planner.h"

#include <QAbstractTableModel>

namespace ps::gui {

class SearchResultsModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column {
        RankColumn,
        AlgorithmColumn,
        ScheduleColumn,
        FeasibleColumn,
        SlowestColumn,
        IterationColumn, // simulated with communication: what the results are ranked by
        ThroughputColumn,
        CutsColumn,
        ReasonColumn,
        ColumnCount
    };

    explicit SearchResultsModel(QObject* parent = nullptr);

    void setResults(std::vector<Plan> plans);
    // One more plan, inserted where the search's ranking puts it (results streaming in).
    void addResult(Plan plan);
    [[nodiscard]] const std::vector<Plan>& results() const
    {
        return m_plans;
    }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    std::vector<Plan> m_plans;
};

} // namespace ps::gui
