// MainWindow: loads in the background (open, import ONNX, new from zoo, the first-start example)
// with a busy state, and this machine's CPU measured off the GUI thread.
#include "models/background_job.h"
#include "models/example_project.h"
#include "models/plan_session.h"
#include "models/project_session.h"
#include "models/run_prediction.h"
#include "runtime/training_run.h"
#include "views/main_window.h"
#include "zoo/model_config.h"

#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QStatusBar>

namespace ps::gui {

void MainWindow::setupBackgroundWork()
{
    m_loadJob = new BackgroundJob(this);
    connect(m_loadJob, &BackgroundJob::finished, this, &MainWindow::onLoadFinished);
    auto* busy = new QWidget(this);
    auto* layout = new QHBoxLayout(busy);
    layout->setContentsMargins(0, 0, 0, 0);
    m_busyLabel = new QLabel(busy);
    auto* bar = new QProgressBar(busy);
    bar->setRange(0, 0); // indeterminate: reading a file reports no fraction
    bar->setMaximumWidth(160);
    layout->addWidget(m_busyLabel);
    layout->addWidget(bar);
    statusBar()->addPermanentWidget(busy);
    setBusy(QString());
    // The editor on "cpu" and the launch dialog's prediction use this machine's measured CPU
    // (about 0.3 s per thread count, once per process): measure here rather than on the first click
    // the counts a plan of one, two and four CPU devices gives each device.
    m_cpuJob = new BackgroundJob(this);
    m_cpuJob->start([](JobContext&) -> std::any {
        for (const std::size_t devices : { 1, 2, 4 })
            (void)thisCpu(engine::threadsPerDevice(devices));
        return {};
    });
}

bool MainWindow::isLoading() const
{
    return m_loadJob->isRunning();
}

void MainWindow::setBusy(const QString& what)
{
    m_busyLabel->setText(what);
    m_busyLabel->parentWidget()->setVisible(!what.isEmpty());
    if (what.isEmpty())
        unsetCursor();
    else
        setCursor(Qt::BusyCursor); // busy, but the window still answers
}

bool MainWindow::loadInBackground(const QString& what, std::function<LoadedProject()> load, std::function<void()> then)
{
    if (m_loadJob->isRunning()) {
        statusBar()->showMessage(tr("Still loading; try again when it has finished."), 5000);
        return false;
    }
    // The worker only computes; the session is changed in onLoadFinished, on this thread.
    m_loadJob->start([load = std::move(load)](JobContext&) -> std::any { return load(); });
    m_afterLoad = std::move(then);
    setBusy(what);
    return true;
}

void MainWindow::onLoadFinished(const JobOutcome& outcome)
{
    setBusy(QString());
    auto then = std::exchange(m_afterLoad, {});
    const auto* project = outcome.valueAs<LoadedProject>();
    if (!outcome.finished() || !project) {
        if (outcome.status == JobOutcome::Status::Failed)
            showError(outcome.error);
        Q_EMIT loadFinished(false);
        return;
    }
    const auto path = project->path;
    const auto summary = project->summary;
    m_session->adopt(*project);
    if (then)
        then();
    statusBar()->showMessage(!summary.isEmpty() ? summary
            : path.isEmpty()                    ? tr("New project: %1").arg(m_session->displayName())
                                                : tr("Opened %1").arg(path),
        path.isEmpty() ? 0 : 5000);
    Q_EMIT loadFinished(true);
}

bool MainWindow::openProjectInBackground(const QString& path)
{
    return loadInBackground(
        tr("Opening %1…").arg(QFileInfo(path).fileName()), [path] { return loadProjectFile(path); });
}

bool MainWindow::importOnnxInBackground(
    const QString& path, std::int64_t batch, std::int64_t sequence, const QString& loss, bool keepWeights)
{
    return loadInBackground(tr("Importing %1…").arg(QFileInfo(path).fileName()),
        [path, batch, sequence, loss, keepWeights] { return loadOnnxModel(path, batch, sequence, loss, keepWeights); });
}

bool MainWindow::importOnnxInBackground(const QString& path, const OnnxImportOptions& options, const QString& loss)
{
    return loadInBackground(tr("Importing %1…").arg(QFileInfo(path).fileName()),
        [path, options, loss] { return loadOnnxModel(path, options, loss); });
}

bool MainWindow::newFromZooInBackground(const ModelConfig& config)
{
    return loadInBackground(
        tr("Building %1…").arg(QString::fromStdString(config.name)), [config] { return buildZooProject(config); });
}

bool MainWindow::openOnStart(const QString& project, const QString& model)
{
    if (!project.isEmpty())
        return openProjectInBackground(project);
    if (!model.isEmpty()) // an unknown name is the job's error, shown like any other
        return loadInBackground(
            tr("Building %1…").arg(model), [name = model.toStdString()] { return buildZooProject(zooPreset(name)); });
    if (recentFiles().isEmpty())
        return openExampleInBackground();
    return false;
}

bool MainWindow::openExampleInBackground()
{
    const auto path = exampleProjectPath();
    return loadInBackground(
        tr("Opening the example project…"), [path] { return openOrCreateExample(path); },
        [this] {
            // The example's own setup: its stored plan is what the editor shows, ready to launch.
            m_planSession->configure(examplePlanSetup());
        });
}

} // namespace ps::gui
