// The plans stored in the project, with their key metrics (fastest feasible first).
#pragma once

#include "store/project_store.h"

#include <QAbstractTableModel>

namespace ps::gui {

class PlansModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column {
        NameColumn,
        AlgorithmColumn,
        FeasibleColumn,
        SlowestColumn,
        IterationColumn,
        BubbleColumn,
        PeakColumn,
        ThroughputColumn,
        CutsColumn,
        ColumnCount
    };
    enum Role { PlanIdRole = Qt::UserRole, ValueRole };

    explicit PlansModel(QObject* parent = nullptr);

    // Reads the plans of `projectPath`; an empty path or a failure leaves the model empty.
    void setProject(const QString& projectPath);
    void reload();
    [[nodiscard]] const QString& projectPath() const
    {
        return m_path;
    }
    [[nodiscard]] const ProjectStore::PlanRow* row(int r) const;
    // Per-stage peak bytes of a stored plan (from its JSON), for the side-by-side compare.
    [[nodiscard]] QList<double> stagePeaks(int r) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex& index) const override;

private:
    [[nodiscard]] double metric(int r, int column) const;

    QString m_path;
    std::vector<ProjectStore::PlanRow> m_rows;
};

} // namespace ps::gui
