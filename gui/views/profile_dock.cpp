#include "views/profile_dock.h"

#include "models/profile_compare_model.h"
#include "models/profile_runner.h"
#include "models/run_prediction.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QVBoxLayout>

namespace ps::gui {

ProfileDock::ProfileDock(QWidget* parent)
    : QWidget(parent)
    , m_runner(new ProfileRunner(this))
    , m_model(new ProfileCompareModel(this))
    , m_proxy(new QSortFilterProxyModel(this))
    , m_status(new QLabel(tr("Profile > On this machine measures every node on this CPU."), this))
    , m_progress(new QProgressBar(this))
    , m_start(new QPushButton(tr("Profile on this machine (CPU)"), this))
    , m_cancel(new QPushButton(tr("Cancel"), this))
    , m_table(new QTableView(this))
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto* row = new QHBoxLayout;
    row->addWidget(m_start);
    row->addWidget(m_progress, 1);
    row->addWidget(m_cancel);
    layout->addLayout(row);
    m_status->setWordWrap(true);
    layout->addWidget(m_status);
    m_proxy->setSourceModel(m_model);
    m_proxy->setSortRole(Qt::UserRole);
    m_table->setModel(m_proxy);
    m_table->setSortingEnabled(true);
    m_table->verticalHeader()->setVisible(false);
    m_table->horizontalHeader()->setStretchLastSection(true);
    layout->addWidget(m_table, 1);
    m_cancel->setEnabled(false);
    m_progress->setVisible(false);
    connect(m_start, &QPushButton::clicked, this, &ProfileDock::profileRequested);
    connect(m_cancel, &QPushButton::clicked, m_runner, &ProfileRunner::cancel);
    connect(m_runner, &ProfileRunner::progress, this, [this](int done, int total, const QString& line) {
        m_progress->setRange(0, total);
        m_progress->setValue(done);
        m_progress->setFormat(tr("%1 of %2 micro-batch sizes").arg(done).arg(total));
        m_status->setText(line);
    });
    connect(m_runner, &ProfileRunner::finished, this, [this](bool ok, const QString& message) {
        m_cancel->setEnabled(false);
        m_start->setEnabled(true);
        m_progress->setVisible(false);
        m_status->setText(message);
        if (ok)
            Q_EMIT profiled(message);
        else
            Q_EMIT failed(message);
    });
}

bool ProfileDock::start(const QString& project, int sizes)
{
    if (!m_runner->start(project, sizes))
        return false;
    m_start->setEnabled(false);
    m_cancel->setEnabled(true);
    m_progress->setVisible(true);
    return true;
}

void ProfileDock::showComparison(std::shared_ptr<const Graph> graph, const Profile* measured, double microBatch)
{
    if (!graph || !measured) {
        m_model->setProfiles(graph, nullptr, nullptr, microBatch);
        return;
    }
    // The CPU at the thread count the profile was measured with (0: every core).
    const auto predicted = estimateProfile(*graph, thisCpu(measured->threads), CostModelOptions {});
    m_model->setProfiles(graph, &predicted, measured, microBatch);
    m_table->sortByColumn(ProfileCompareModel::TimeErrorColumn, Qt::DescendingOrder);
    m_table->resizeColumnsToContents();
    m_status->setText(tr("%1 nodes: analytical estimate for this CPU (predicted) against the measured profile at "
                         "micro-batch %2; click a column to sort.")
                          .arg(m_model->rowCount())
                          .arg(microBatch));
}

} // namespace ps::gui
