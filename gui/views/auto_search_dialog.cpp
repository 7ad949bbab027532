#include "views/auto_search_dialog.h"

#include "models/background_job.h"
#include "models/plan_session.h"
#include "models/search_results_model.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHeaderView>
#include <QProgressBar>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QVBoxLayout>

namespace ps::gui {

AutoSearchDialog::AutoSearchDialog(PlanSession* session, QWidget* parent)
    : QDialog(parent)
    , m_session(session)
    , m_results(new SearchResultsModel(this))
    , m_job(new BackgroundJob(this))
{
    setWindowTitle(tr("Auto-search partitions and schedules"));
    setupForm();
    connect(m_job, &BackgroundJob::progress, this, &AutoSearchDialog::onProgress);
    connect(m_job, &BackgroundJob::finished, this, &AutoSearchDialog::onFinished);
}

// Destroying the job cancels the search and waits for the worker; first, before the results model
// its streamed plans are posted to (children go in creation order, the model first).
AutoSearchDialog::~AutoSearchDialog()
{
    delete m_job;
}

bool AutoSearchDialog::isRunning() const
{
    return m_job->isRunning();
}

void AutoSearchDialog::setupForm()
{
    auto* form = new QFormLayout;
    m_algorithm = new QComboBox(this);
    m_algorithm->addItem(tr("all"));
    for (auto a : allPlanAlgorithms())
        m_algorithm->addItem(QString::fromUtf8(toString(a).data(), static_cast<qsizetype>(toString(a).size())));
    m_device = new QComboBox(this);
    for (const auto& d : DeviceCatalog::builtin().devices()) {
        if (!d.measured)
            m_device->addItem(QString::fromStdString(d.id));
    }
    m_device->setCurrentText(QString::fromStdString(m_session->setup().deviceId));
    m_stages = new QSpinBox(this);
    m_stages->setRange(1, 64);
    m_stages->setValue(m_session->setup().schedule.stages);
    m_schedule = new QComboBox(this);
    m_schedule->addItems({ QStringLiteral("1f1b"), QStringLiteral("gpipe"), QStringLiteral("zb-h1"),
        QStringLiteral("pipedream"), QStringLiteral("kfkb (k range)"), QStringLiteral("ftpipe-async") });
    m_kMin = new QSpinBox(this);
    m_kMax = new QSpinBox(this);
    m_kMin->setRange(1, 64);
    m_kMax->setRange(1, 64);
    m_kMin->setValue(1);
    m_kMax->setValue(4);
    m_microBatches = new QSpinBox(this);
    m_microBatches->setRange(1, 4096);
    m_microBatches->setValue(m_session->setup().schedule.microBatches);
    m_microBatch = new QDoubleSpinBox(this);
    m_microBatch->setRange(1, 65536);
    m_microBatch->setDecimals(0);
    m_microBatch->setValue(m_session->hasPlan() ? m_session->editor().microBatch() : 1);
    m_memoryGiB = new QDoubleSpinBox(this);
    m_memoryGiB->setRange(0, 4096);
    m_memoryGiB->setSpecialValueText(tr("device capacity"));
    m_swap = new QCheckBox(tr("swap to host memory"), this);
    m_recompute = new QCheckBox(tr("recompute"), this);
    m_swap->setChecked(true);
    m_recompute->setChecked(true);
    form->addRow(tr("Algorithm"), m_algorithm);
    form->addRow(tr("Device"), m_device);
    form->addRow(tr("Stages"), m_stages);
    form->addRow(tr("Schedule"), m_schedule);
    form->addRow(tr("kFkB k from"), m_kMin);
    form->addRow(tr("kFkB k to"), m_kMax);
    form->addRow(tr("Micro-batches"), m_microBatches);
    form->addRow(tr("Micro-batch size"), m_microBatch);
    form->addRow(tr("Memory limit (GiB)"), m_memoryGiB);
    form->addRow(tr("Memory optimization"), m_swap);
    form->addRow(QString(), m_recompute);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_table = new QTableView(this);
    m_table->setModel(m_results);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->horizontalHeader()->setStretchLastSection(true);
    m_run = new QPushButton(tr("Run"), this);
    m_cancel = new QPushButton(tr("Cancel"), this);
    auto* apply = new QPushButton(tr("Apply to editor"), this);
    m_cancel->setEnabled(false);
    connect(m_run, &QPushButton::clicked, this, [this] { start(request()); });
    connect(m_cancel, &QPushButton::clicked, this, &AutoSearchDialog::cancel);
    connect(apply, &QPushButton::clicked, this, [this] {
        const auto rows = m_table->selectionModel()->selectedRows();
        applyResult(rows.isEmpty() ? 0 : rows.front().row());
    });
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    buttons->addButton(m_run, QDialogButtonBox::ActionRole);
    buttons->addButton(m_cancel, QDialogButtonBox::ActionRole);
    buttons->addButton(apply, QDialogButtonBox::ActionRole);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    auto* layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_progress);
    layout->addWidget(m_table, 1);
    layout->addWidget(buttons);
}

SearchRequest AutoSearchDialog::request() const
{
    SearchRequest r;
    r.device = DeviceCatalog::builtin().find(m_device->currentText().toStdString());
    r.microBatch = m_microBatch->value();
    r.limits = { m_memoryGiB->value() * 1024.0 * 1024 * 1024, m_swap->isChecked(), m_recompute->isChecked() };
    const int S = m_stages->value();
    const int M = m_microBatches->value();
    if (m_schedule->currentIndex() == 4) {
        for (int k = m_kMin->value(); k <= std::min(m_kMax->value(), M); ++k)
            r.schedules.push_back({ ScheduleKind::KFKB, S, M, k, 1 });
    } else {
        r.schedules.push_back(parseScheduleSpec(m_schedule->currentText().toStdString(), S, M));
    }
    if (m_algorithm->currentIndex() == 0) {
        const auto graph = m_session->graph();
        r.algorithms = everyPlanAlgorithmFor(graph ? graph->nodeCount() : 0, S);
    } else {
        r.algorithms = { parsePlanAlgorithm(m_algorithm->currentText().toStdString()) };
    }
    // The Cluster dock's nodes and links: on a slow link between nodes the plans are cut and ranked
    // for it.
    int devices = 1;
    for (const auto& spec : r.schedules)
        devices = std::max(devices, spec.devices());
    r.cluster = PlanSession::clusterOf(m_session->setup(), r.device, devices);
    return r;
}

void AutoSearchDialog::start(const SearchRequest& request)
{
    if (m_job->isRunning() || !m_session->graph())
        return;
    // The work owns copies of everything it reads. Each plan is posted to the results table as it is
    // found (the job joins before the dialog and its model go); the ranked list replaces them at the end.
    auto streaming = request;
    streaming.onPlan = [model = m_results](const Plan& plan) {
        QMetaObject::invokeMethod(
            model, [model, plan] { model->addResult(plan); }, Qt::QueuedConnection);
    };
    const bool started = m_job->start([search = m_search, graph = m_session->graph(), profile = m_session->profile(),
                                          request = std::move(streaming)](JobContext& job) -> std::any {
        return search(
            *graph, profile, request, [&job](double f) { job.reportProgress(f); }, job.cancelFlag());
    });
    if (!started)
        return;
    m_results->setResults({});
    m_progress->setValue(0);
    m_run->setEnabled(false);
    m_cancel->setEnabled(true);
}

void AutoSearchDialog::cancel()
{
    m_job->cancel();
}

void AutoSearchDialog::onProgress(double fraction)
{
    m_progress->setValue(static_cast<int>(fraction * 1000));
}

void AutoSearchDialog::onFinished(const JobOutcome& outcome)
{
    // A cancelled search keeps what finished before the cancel.
    const auto* plans = outcome.valueAs<std::vector<Plan>>();
    m_results->setResults(plans ? *plans : std::vector<Plan> {});
    m_progress->setValue(1000);
    m_run->setEnabled(true);
    m_cancel->setEnabled(false);
    m_lastError = outcome.error;
    if (!m_lastError.isEmpty()) {
        m_progress->setFormat(tr("Search failed: %1").arg(m_lastError));
        Q_EMIT searchFailed(m_lastError);
    } else {
        m_progress->setFormat(QStringLiteral("%p%"));
    }
    Q_EMIT searchFinished();
}

bool AutoSearchDialog::applyResult(int row)
{
    const auto& plans = m_results->results();
    if (row < 0 || static_cast<std::size_t>(row) >= plans.size() || !plans[static_cast<std::size_t>(row)].feasible)
        return false;
    const auto& plan = plans[static_cast<std::size_t>(row)];
    auto setup = m_session->setup();
    setup.schedule = plan.schedule;
    setup.microBatch = plan.microBatch;
    setup.deviceId = m_device->currentText().toStdString();
    if (!(setup == m_session->setup()) && !m_session->configure(setup))
        return false;
    // A Mixed-pipe plan brings its node order and stage-to-device map; the editor keeps both.
    m_session->applyPlacement(
        { plan.partition, plan.stageDevices }, tr("Apply %1 plan").arg(QString::fromStdString(plan.algorithm)));
    return true;
}

} // namespace ps::gui
