#include "views/monitor_dock.h"

#include "graph/graph_summary.h"
#include "models/run_launcher.h"
#include "models/run_monitor_model.h"
#include "models/run_prediction.h"
#include "models/runs_model.h"
#include "plots/run_monitor_plot.h"
#include "runtime/training_run.h"
#include "store/project_store.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>

namespace ps::gui {
namespace {

    constexpr int kLogLines = 500;

    QString statusColor(const QString& status)
    {
        if (status == QStringLiteral("failed"))
            return QStringLiteral("#b01e1e");
        if (status == QStringLiteral("interrupted"))
            return QStringLiteral("#aa6e00");
        if (status == QStringLiteral("running"))
            return QStringLiteral("#1e64b4");
        return QStringLiteral("#2a7a2a");
    }

} // namespace

MonitorDock::MonitorDock(RunLauncher* launcher, RunMonitorModel* model, RunsModel* runs, QWidget* parent)
    : QWidget(parent)
    , m_launcher(launcher)
    , m_model(model)
    , m_runs(runs)
{
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    setupHeader();
    setupTabs();
    connect(launcher, &RunLauncher::runStarted, this, [this](std::int64_t id, const QString&) {
        const auto& r = m_launcher->request();
        m_model->beginRun(
            id, r.devices, r.steps, 0, engine::runtimeDeviceNames(devicesArgument(r.gpu, r.devices).toStdString()));
        m_runs->reload();
        m_runsRefreshed.restart();
    });
    connect(launcher, &RunLauncher::stepReceived, model, &RunMonitorModel::addStep);
    connect(launcher, &RunLauncher::stepReceived, this, [this] {
        // The going run's row (steps, loss, throughput) from the project, not on every step.
        if (!m_runsRefreshed.isValid() || m_runsRefreshed.elapsed() > 2000) {
            m_runs->reload();
            m_runsRefreshed.restart();
        }
    });
    connect(launcher, &RunLauncher::logLine, m_log, &QPlainTextEdit::appendPlainText);
    connect(launcher, &RunLauncher::finished, this, &MonitorDock::onFinished);
    connect(model, &RunMonitorModel::changed, this, &MonitorDock::refresh);
    connect(m_stop, &QPushButton::clicked, launcher, &RunLauncher::stop);
    connect(m_kill, &QPushButton::clicked, launcher, &RunLauncher::kill);
    refresh();
}

void MonitorDock::setupHeader()
{
    auto* row = new QHBoxLayout;
    m_status = new QLabel(this);
    m_status->setTextFormat(Qt::RichText);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_progress->setTextVisible(true);
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setToolTip(tr("Checkpoint after the current step, then exit"));
    m_kill = new QPushButton(tr("Kill"), this);
    m_kill->setToolTip(tr("End the training process now (no checkpoint since the last one)"));
    row->addWidget(m_status, 2);
    row->addWidget(m_progress, 3);
    row->addWidget(m_stop);
    row->addWidget(m_kill);
    static_cast<QVBoxLayout*>(layout())->addLayout(row);
}

void MonitorDock::setupTabs()
{
    auto* split = new QSplitter(Qt::Horizontal, this);
    m_plot = new RunMonitorPlot(m_model, split);
    auto* tabs = new QTabWidget(split);
    m_log = new QPlainTextEdit(tabs);
    m_log->setReadOnly(true);
    m_log->setMaximumBlockCount(kLogLines);
    m_log->setFont(QFont(QStringLiteral("monospace"), 8));
    m_runsTable = new QTableView(tabs);
    m_runsTable->setModel(m_runs);
    m_runsTable->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_runsTable->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_runsTable->verticalHeader()->setVisible(false);
    m_runsTable->horizontalHeader()->setStretchLastSection(true);
    connect(m_runs, &QAbstractItemModel::modelReset, m_runsTable, &QTableView::resizeColumnsToContents);
    connect(m_runsTable, &QTableView::doubleClicked, this,
        [this](const QModelIndex& index) { openRun(index.data(RunsModel::RunIdRole).toLongLong()); });
    tabs->addTab(m_runsTable, tr("Runs"));
    tabs->addTab(m_log, tr("Log"));
    split->addWidget(m_plot);
    split->addWidget(tabs);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 1);
    split->setSizes({ 1100, 420 });
    layout()->addWidget(split);
}

bool MonitorDock::openRun(std::int64_t runId)
{
    if (m_launcher->isRunning()) {
        Q_EMIT failed(tr("A run is going; the monitor shows it until it ends."));
        return false;
    }
    try {
        const auto store = ProjectStore::open(m_runs->projectPath().toStdString(), ProjectStore::Access::ReadOnly);
        m_model->loadRun(store, runId);
        try {
            const auto p = predictStoredRun(store, runId);
            std::vector<double> peaks;
            for (const auto& d : p.simulation.devices)
                peaks.push_back(d.peakBytes);
            m_model->setPrediction(p.simulation.iterationNs / 1e6, peaks, QString::fromStdString(p.profileSource));
        } catch (const std::exception& e) {
            m_model->setPrediction(0, {}, QString());
            Q_EMIT message(tr("Run %1 has no prediction: %2").arg(runId).arg(QString::fromStdString(e.what())));
        }
        return true;
    } catch (const std::exception& e) {
        Q_EMIT failed(QString::fromStdString(e.what()));
        return false;
    }
}

QString MonitorDock::progressText() const
{
    if (m_model->runId() == 0)
        return tr("no run");
    auto text = tr("step %1 / %2").arg(m_model->stepsDone()).arg(m_model->totalSteps());
    if (m_model->status() == QStringLiteral("running")) {
        const double eta = m_model->etaSeconds();
        if (eta >= 0)
            text += tr(" · ETA %1").arg(formatDuration(eta));
    }
    return text;
}

void MonitorDock::refresh()
{
    const bool running = m_launcher->isRunning();
    m_stop->setEnabled(running);
    m_kill->setEnabled(running);
    m_progress->setValue(static_cast<int>(1000 * m_model->progress()));
    m_progress->setFormat(progressText());
    if (m_model->runId() == 0) {
        m_status->setText(tr("No run yet: Run > Launch"));
        return;
    }
    auto text = tr("Run %1: <b style='color:%2'>%3</b>")
                    .arg(m_model->runId())
                    .arg(statusColor(m_model->status()))
                    .arg(m_model->status());
    if (m_model->predictedIterationMs() > 0 && m_model->steps().empty())
        text += tr(" · no step measured yet, %1 ms predicted").arg(m_model->predictedIterationMs(), 0, 'f', 1);
    else if (m_model->predictedIterationMs() > 0)
        text += tr(" · step %1 ms measured (median), %2 ms predicted")
                    .arg(m_model->medianStepMs(), 0, 'f', 1)
                    .arg(m_model->predictedIterationMs(), 0, 'f', 1);
    m_status->setText(text);
    m_status->setToolTip(m_model->message());
}

QString MonitorDock::statusText() const
{
    return m_status->text();
}

void MonitorDock::onFinished(const RunOutcome& outcome)
{
    if (outcome.runId != 0 && outcome.runId == m_model->runId())
        m_model->setStatus(outcome.status, outcome.message);
    m_runs->reload();
    refresh();
    if (outcome.status == QStringLiteral("failed"))
        Q_EMIT failed(outcome.message);
    else
        Q_EMIT message(outcome.message);
}

} // namespace ps::gui
