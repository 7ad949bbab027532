#include "views/plans_panel.h"

#include "graph/graph_summary.h"
#include "models/plan_session.h"
#include "models/plans_model.h"
#include "plan/partition.h"

#include <QDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QPushButton>
#include <QTableView>
#include <QTableWidget>
#include <QVBoxLayout>

namespace ps::gui {

PlansPanel::PlansPanel(PlanSession* session, PlansModel* model, QWidget* parent)
    : QWidget(parent)
    , m_session(session)
    , m_model(model)
    , m_table(new QTableView(this))
{
    auto* layout = new QVBoxLayout(this);
    auto* buttons = new QHBoxLayout;
    const auto addButton = [&](const QString& text, auto slot) {
        auto* b = new QPushButton(text, this);
        connect(b, &QPushButton::clicked, this, slot);
        buttons->addWidget(b);
    };
    addButton(tr("Save current…"), [this] {
        bool ok = false;
        const auto name =
            QInputDialog::getText(this, tr("Save plan"), tr("Name"), QLineEdit::Normal, tr("my plan"), &ok);
        if (ok)
            saveCurrent(name);
    });
    addButton(tr("Apply"), [this] { applySelected(); });
    addButton(tr("Compare"), [this] { compareSelected(); });
    addButton(tr("Delete"), [this] { deleteSelected(); });
    buttons->addStretch();
    layout->addLayout(buttons);
    layout->addWidget(m_table);
    m_table->setModel(model);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setStretchLastSection(true);
    connect(model, &QAbstractItemModel::modelReset, m_table, &QTableView::resizeColumnsToContents);
}

QList<int> PlansPanel::selectedRows() const
{
    QList<int> rows;
    for (const auto& index : m_table->selectionModel()->selectedRows())
        rows.append(index.row());
    std::sort(rows.begin(), rows.end());
    return rows;
}

bool PlansPanel::saveCurrent(const QString& name)
{
    if (!m_session->hasPlan() || m_model->projectPath().isEmpty()) {
        Q_EMIT message(tr("Save the project to a file first; plans are stored in it."));
        return false;
    }
    try {
        const auto& snap = m_session->snapshot();
        auto plan = snap.plan;
        plan.algorithm = "manual";
        ProjectStore::open(m_model->projectPath().toStdString()).savePlan(plan, name.toStdString(), &snap.simulation);
    } catch (const std::exception& e) {
        Q_EMIT message(QString::fromStdString(e.what()));
        return false;
    }
    m_model->reload();
    Q_EMIT message(tr("Saved plan \"%1\"").arg(name));
    return true;
}

bool PlansPanel::deleteSelected()
{
    const auto rows = selectedRows();
    if (rows.isEmpty())
        return false;
    try {
        auto store = ProjectStore::open(m_model->projectPath().toStdString());
        for (int r : rows)
            store.deletePlan(m_model->row(r)->id);
    } catch (const std::exception& e) {
        Q_EMIT message(QString::fromStdString(e.what()));
        return false;
    }
    m_model->reload();
    return true;
}

bool PlansPanel::applySelected()
{
    const auto rows = selectedRows();
    if (rows.isEmpty() || !m_session->hasPlan())
        return false;
    const auto* p = m_model->row(rows.front());
    try { // a Mixed-pipe plan brings its node order and stage-to-device map
        const auto placement = placementFromPlanJson(p->json, m_session->graph()->nodeCount());
        m_session->applyPlacement(placement, tr("Apply plan \"%1\"").arg(QString::fromStdString(p->name)));
    } catch (const std::exception& e) {
        Q_EMIT message(QString::fromStdString(e.what()));
        return false;
    }
    return true;
}

QList<QStringList> PlansPanel::comparison(int rowA, int rowB) const
{
    QList<QStringList> rows;
    for (int c = 0; c < PlansModel::ColumnCount; ++c) {
        const auto header = m_model->headerData(c, Qt::Horizontal).toString();
        rows.append({ header, m_model->index(rowA, c).data().toString(), m_model->index(rowB, c).data().toString() });
    }
    const auto a = m_model->stagePeaks(rowA);
    const auto b = m_model->stagePeaks(rowB);
    for (int s = 0; s < std::max(a.size(), b.size()); ++s) {
        rows.append({ tr("stage %1 peak").arg(s), s < a.size() ? QString::fromStdString(formatBytes(a[s])) : QString(),
            s < b.size() ? QString::fromStdString(formatBytes(b[s])) : QString() });
    }
    return rows;
}

void PlansPanel::compareSelected()
{
    const auto rows = selectedRows();
    if (rows.size() != 2) {
        Q_EMIT message(tr("Select two plans to compare."));
        return;
    }
    const auto lines = comparison(rows[0], rows[1]);
    auto* dialog = new QDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->setWindowTitle(tr("Compare plans"));
    auto* table = new QTableWidget(static_cast<int>(lines.size()), 3, dialog);
    table->setHorizontalHeaderLabels(
        { tr("Metric"), m_model->index(rows[0], 0).data().toString(), m_model->index(rows[1], 0).data().toString() });
    for (int r = 0; r < lines.size(); ++r) {
        for (int c = 0; c < 3; ++c)
            table->setItem(r, c, new QTableWidgetItem(lines[r][c]));
    }
    table->horizontalHeader()->setStretchLastSection(true);
    auto* layout = new QVBoxLayout(dialog);
    layout->addWidget(table);
    dialog->resize(640, 480);
    dialog->open();
}

} // namespace ps::gui
