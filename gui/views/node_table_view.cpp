#include "views/node_table_view.h"

#include "models/node_table_model.h"

#include <QHeaderView>
#include <QLineEdit>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

namespace ps::gui {

NodeTableView::NodeTableView(NodeTableModel* model, QWidget* parent)
    : QWidget(parent)
    , m_filter(new QLineEdit(this))
    , m_proxy(new QSortFilterProxyModel(this))
    , m_table(new QTableView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_filter);
    layout->addWidget(m_table);
    setupProxy(model);
    setupTable();
}

void NodeTableView::setupProxy(NodeTableModel* model)
{
    m_proxy->setSourceModel(model);
    m_proxy->setSortRole(NodeTableModel::SortRole);
    m_proxy->setFilterKeyColumn(-1); // name, op and scope all match
    m_proxy->setFilterCaseSensitivity(Qt::CaseInsensitive);
    m_filter->setPlaceholderText(tr("Filter nodes by name, op or scope (e.g. h.3.attn, Softmax)"));
    m_filter->setClearButtonEnabled(true);
    connect(m_filter, &QLineEdit::textChanged, m_proxy, &QSortFilterProxyModel::setFilterFixedString);
}

void NodeTableView::setupTable()
{
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->sortByColumn(NodeTableModel::NameColumn, Qt::AscendingOrder);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setAlternatingRowColors(true);
    m_table->verticalHeader()->setVisible(false);
    m_table->verticalHeader()->setDefaultSectionSize(22);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_table->setColumnWidth(NodeTableModel::NameColumn, 250);
    m_table->setColumnWidth(NodeTableModel::OpColumn, 90);
    m_table->setColumnWidth(NodeTableModel::ScopeColumn, 120);
    m_table->setColumnWidth(NodeTableModel::LayerColumn, 50);
    m_table->setColumnWidth(NodeTableModel::ShapeColumn, 160);
    m_table->setColumnWidth(NodeTableModel::ParamsColumn, 100);
}

} // namespace ps::gui
