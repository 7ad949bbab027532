// One row per graph node: name, op, scope, layer, output shape, parameters, forward FLOPs.
// Numbers come from core (computeOpCosts); the model only converts them for display.
#pragma once

#include "graph/graph.h"
#include "graph/op_cost.h"

#include <QAbstractTableModel>

#include <memory>

namespace ps::gui {

class NodeTableModel : public QAbstractTableModel
{
    Q_OBJECT
public:
    enum Column { NameColumn, OpColumn, ScopeColumn, LayerColumn, ShapeColumn, ParamsColumn, FlopsColumn, ColumnCount };
    enum Role {
        SortRole = Qt::UserRole, // numbers as numbers, so sorting is numeric
        NodeIdRole,
    };

    explicit NodeTableModel(QObject* parent = nullptr);

    void setGraph(std::shared_ptr<const Graph> graph);
    [[nodiscard]] std::shared_ptr<const Graph> graph() const
    {
        return m_graph;
    }

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

private:
    QVariant displayData(const Node& node, const OpCost& cost, int column) const;
    QVariant sortData(const Node& node, const OpCost& cost, int column) const;

    std::shared_ptr<const Graph> m_graph;
    std::vector<OpCost> m_costs;
};

} // namespace ps::gui
