// The node table with its filter box: NodeTableModel behind a QSortFilterProxyModel.
#pragma once

#include <QWidget>

class QLineEdit;
class QSortFilterProxyModel;
class QTableView;

namespace ps::gui {

class NodeTableModel;

class NodeTableView : public QWidget
{
    Q_OBJECT
public:
    NodeTableView(NodeTableModel* model, QWidget* parent = nullptr);

    [[nodiscard]] QSortFilterProxyModel* proxy() const
    {
        return m_proxy;
    }
    [[nodiscard]] QLineEdit* filterEdit() const
    {
        return m_filter;
    }
    [[nodiscard]] QTableView* table() const
    {
        return m_table;
    }

private:
    void setupProxy(NodeTableModel* model);
    void setupTable();

    QLineEdit* m_filter;
    QSortFilterProxyModel* m_proxy;
    QTableView* m_table;
};

} // namespace ps::gui
