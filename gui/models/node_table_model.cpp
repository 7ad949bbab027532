#include "models/node_table_model.h"

#include "graph/graph_summary.h"

#include <QLocale>

namespace ps::gui {
namespace {

    QString outputShape(const Graph& graph, const Node& node)
    {
        QStringList shapes;
        for (auto t : node.outputs)
            shapes << QString::fromStdString(formatShape(graph.tensor(t).shape));
        return shapes.join(QStringLiteral(", "));
    }

} // namespace

NodeTableModel::NodeTableModel(QObject* parent)
    : QAbstractTableModel(parent)
{
}

void NodeTableModel::setGraph(std::shared_ptr<const Graph> graph)
{
    beginResetModel();
    m_graph = std::move(graph);
    m_costs = m_graph ? computeOpCosts(*m_graph) : std::vector<OpCost>();
    endResetModel();
}

int NodeTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() || !m_graph ? 0 : static_cast<int>(m_graph->nodeCount());
}

int NodeTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

QVariant NodeTableModel::data(const QModelIndex& index, int role) const
{
    if (!checkIndex(index, CheckIndexOption::IndexIsValid) || !m_graph)
        return {};
    const auto& node = m_graph->nodes()[static_cast<std::size_t>(index.row())];
    const auto& cost = m_costs[static_cast<std::size_t>(index.row())];
    switch (role) {
    case Qt::DisplayRole:
        return displayData(node, cost, index.column());
    case SortRole:
        return sortData(node, cost, index.column());
    case NodeIdRole:
        return static_cast<uint>(node.id.value);
    case Qt::TextAlignmentRole:
        return index.column() >= LayerColumn && index.column() != ShapeColumn
            ? QVariant(Qt::AlignRight | Qt::AlignVCenter)
            : QVariant();
    case Qt::ToolTipRole:
        return node.op == OpType::Opaque ? QString::fromStdString(node.opaqueType) : QString::fromStdString(node.name);
    default:
        return {};
    }
}

QVariant NodeTableModel::displayData(const Node& node, const OpCost& cost, int column) const
{
    switch (column) {
    case NameColumn:
        return QString::fromStdString(node.name);
    case OpColumn:
        return QString::fromUtf8(toString(node.op).data(), static_cast<qsizetype>(toString(node.op).size()));
    case ScopeColumn:
        return QString::fromStdString(node.scope);
    case LayerColumn:
        return node.layer == kNoLayer ? QString() : QString::number(node.layer);
    case ShapeColumn:
        return outputShape(*m_graph, node);
    case ParamsColumn:
        return cost.parameterCount == 0 ? QString() : QLocale().toString(static_cast<qlonglong>(cost.parameterCount));
    case FlopsColumn:
        return QString::fromStdString(formatFlops(cost.forwardFlops));
    default:
        return {};
    }
}

QVariant NodeTableModel::sortData(const Node& node, const OpCost& cost, int column) const
{
    switch (column) {
    case LayerColumn:
        return node.layer;
    case ParamsColumn:
        return static_cast<qlonglong>(cost.parameterCount);
    case FlopsColumn:
        return cost.forwardFlops;
    case NameColumn:
        return static_cast<uint>(node.id.value); // graph order, not alphabetical
    default:
        return displayData(node, cost, column);
    }
}

QVariant NodeTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole)
        return {};
    switch (section) {
    case NameColumn:
        return tr("Name");
    case OpColumn:
        return tr("Op");
    case ScopeColumn:
        return tr("Scope");
    case LayerColumn:
        return tr("Layer");
    case ShapeColumn:
        return tr("Output shape");
    case ParamsColumn:
        return tr("Params");
    case FlopsColumn:
        return tr("Forward FLOPs");
    default:
        return {};
    }
}

} // namespace ps::gui
