// Plans panel: the stored plans with their metrics; save the current edit as a plan, rename
// (edit the name), delete, apply a plan to the editor, and compare two plans side by side.
#pragma once

#include <QWidget>

class QTableView;

namespace ps::gui {

class PlanSession;
class PlansModel;

class PlansPanel : public QWidget
{
    Q_OBJECT
public:
    PlansPanel(PlanSession* session, PlansModel* model, QWidget* parent = nullptr);

    // Each returns false (and says why in the status signal) when it cannot act.
    bool saveCurrent(const QString& name);
    bool deleteSelected();
    bool applySelected();
    // Metric rows of the two plans, for the compare dialog and its test.
    [[nodiscard]] QList<QStringList> comparison(int rowA, int rowB) const;
    void compareSelected();
    [[nodiscard]] QTableView* table() const
    {
        return m_table;
    }

Q_SIGNALS:
    void message(const QString& text);

private:
    [[nodiscard]] QList<int> selectedRows() const;

    PlanSession* m_session;
    PlansModel* m_model;
    QTableView* m_table;
};

} // namespace ps::gui
