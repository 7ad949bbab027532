// MainWindow: the Run menu (launch, stop, kill), the Monitor dock and the launch flow.
#include "models/plan_session.h"
#include "models/plans_model.h"
#include "models/profile_runner.h"
#include "models/project_session.h"
#include "models/run_launcher.h"
#include "models/run_monitor_model.h"
#include "models/runs_model.h"
#include "store/project_store.h"
#include "views/launch_dialog.h"
#include "views/main_window.h"
#include "views/monitor_dock.h"
#include "views/profile_dock.h"
#include "views/run_compare_view.h"
#include "views/trace_import_dialog.h"

#include <QDateTime>
#include <QDockWidget>
#include <QMenuBar>
#include <QStatusBar>
#include <QToolBar>

namespace ps::gui {

void MainWindow::setupRunDocks()
{
    m_launcher = new RunLauncher(this);
    m_monitorModel = new RunMonitorModel(this);
    m_runsModel = new RunsModel(this);
    m_monitor = new MonitorDock(m_launcher, m_monitorModel, m_runsModel, this);
    auto* monitorDock = new QDockWidget(tr("Monitor"), this);
    monitorDock->setObjectName(QStringLiteral("Monitor"));
    monitorDock->setWidget(m_monitor);
    addDockWidget(Qt::BottomDockWidgetArea, monitorDock);
    m_compare = new RunCompareView(m_runsModel, this);
    auto* compareDock = new QDockWidget(tr("Predicted vs measured"), this);
    compareDock->setObjectName(QStringLiteral("Predicted vs measured"));
    compareDock->setWidget(m_compare);
    addDockWidget(Qt::BottomDockWidgetArea, compareDock);
    if (auto* timeline = dock(tr("Timeline and memory"))) {
        tabifyDockWidget(timeline, monitorDock);
        tabifyDockWidget(timeline, compareDock);
        timeline->raise();
    }
    connect(m_compare, &RunCompareView::failed, this, [this](const QString& m) { statusBar()->showMessage(m, 10000); });
    connect(m_monitor, &MonitorDock::message, this, [this](const QString& m) { statusBar()->showMessage(m, 10000); });
    connect(m_monitor, &MonitorDock::failed, this, &MainWindow::showError);
    connect(m_monitorModel, &RunMonitorModel::changed, this, &MainWindow::updateTitle);
    connect(m_launcher, &RunLauncher::finished, this, [this](const RunOutcome& outcome) {
        updateTitle();
        m_plansModel->reload();
        if (outcome.runId > 0 && outcome.status != QStringLiteral("failed"))
            m_compare->showRun(outcome.runId); // the measured timeline against the prediction
    });
}

void MainWindow::setupRunMenu()
{
    auto* run = menuBar()->addMenu(tr("&Run"));
    auto* launch = run->addAction(tr("&Launch…"), this, &MainWindow::openLaunchDialog);
    launch->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    auto* stop = run->addAction(tr("&Stop (checkpoint, then exit)"), m_launcher, &RunLauncher::stop);
    auto* kill = run->addAction(tr("&Kill"), m_launcher, &RunLauncher::kill);
    run->addSeparator();
    run->addAction(tr("&Compare predicted with measured"), this, [this] {
        const auto id = m_monitorModel->runId() > 0 ? m_monitorModel->runId()
                                                    : (m_runsModel->rowCount() > 0 ? m_runsModel->row(0)->id : 0);
        if (id == 0) {
            showError(tr("The project has no runs yet: Run > Launch first."));
            return;
        }
        if (m_compare->showRun(id)) {
            dock(QStringLiteral("Predicted vs measured"))->show();
            dock(QStringLiteral("Predicted vs measured"))->raise();
        }
    });
    const auto update = [this, launch, stop, kill] {
        const bool running = m_launcher->isRunning();
        launch->setEnabled(!running);
        stop->setEnabled(running);
        kill->setEnabled(running);
    };
    connect(m_monitorModel, &RunMonitorModel::changed, this, update);
    connect(m_launcher, &RunLauncher::finished, this, update);
    update();
    auto* toolbar = addToolBar(tr("Run"));
    toolbar->setObjectName(QStringLiteral("runToolbar"));
    toolbar->addAction(launch);
    toolbar->addAction(stop);
}

void MainWindow::openLaunchDialog()
{
    if (!m_planSession->hasPlan()) {
        showError(tr("Open a model first."));
        return;
    }
    if (m_launcher->isRunning()) {
        showError(tr("A run is going; stop it before launching another."));
        return;
    }
    // The child trains the project file, so it must exist and hold this model.
    if (!ensureSavedForChild())
        return;
    auto* dialog = new LaunchDialog(m_planSession, m_session->filePath(), this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QDialog::accepted, this, [this, dialog] { launch(*dialog); });
    dialog->resize(720, 620);
    dialog->open();
}

bool MainWindow::launch(const LaunchDialog& dialog)
{
    if (!dialog.canLaunch()) {
        showError(dialog.refusal().isEmpty() ? tr("The launch dialog has no runnable plan.") : dialog.refusal());
        return false;
    }
    auto request = dialog.request();
    if (dialog.usesCurrentEdit()) {
        try {
            const auto& snap = m_planSession->snapshot();
            auto plan = snap.plan;
            plan.algorithm = "manual";
            const auto name = tr("launched %1").arg(QDateTime::currentDateTime().toString(Qt::ISODate));
            request.planId =
                ProjectStore::open(request.project.toStdString()).savePlan(plan, name.toStdString(), &snap.simulation);
            m_plansModel->reload();
        } catch (const std::exception& e) {
            showError(tr("Cannot store the plan to launch: %1").arg(QString::fromStdString(e.what())));
            return false;
        }
    }
    const auto& p = *dialog.prediction();
    std::vector<double> peaks;
    for (const auto& d : p.simulation.devices)
        peaks.push_back(d.peakBytes);
    m_monitorModel->clear();
    m_monitorModel->setPrediction(p.simulation.iterationNs / 1e6, peaks, QString::fromStdString(p.profileSource));
    if (auto* d = dock(QStringLiteral("Monitor"))) {
        d->show();
        d->raise();
        if (!d->isFloating() && d->height() < height() * 2 / 5)
            resizeDocks({ d }, { height() * 2 / 5 }, Qt::Vertical);
    }
    const bool started = m_launcher->start(request);
    updateTitle();
    return started;
}

} // namespace ps::gui

namespace ps::gui {

void MainWindow::setupProfileMenu()
{
    m_profileDock = new ProfileDock(this);
    auto* d = new QDockWidget(tr("Profile"), this);
    d->setObjectName(QStringLiteral("Profile"));
    d->setWidget(m_profileDock);
    addDockWidget(Qt::RightDockWidgetArea, d);
    if (auto* balance = dock(tr("Stage balance"))) {
        tabifyDockWidget(balance, d);
        balance->raise();
    }
    auto* menu = menuBar()->addMenu(tr("Pro&file"));
    menu->addAction(tr("On this &machine (CPU)"), this, &MainWindow::profileThisMachine);
    menu->addAction(tr("Import profiler &trace…"), this, &MainWindow::importProfilerTrace);
    connect(m_profileDock, &ProfileDock::profileRequested, this, &MainWindow::profileThisMachine);
    connect(m_profileDock, &ProfileDock::failed, this, &MainWindow::showError);
    connect(m_profileDock, &ProfileDock::profiled, this, [this](const QString& message) {
        statusBar()->showMessage(message, 10000);
        if (m_session->reloadProfiles())
            useMeasuredProfile();
    });
}

bool MainWindow::ensureSavedForChild()
{
    if (m_session->filePath().isEmpty())
        saveAs();
    else if (m_session->isModified())
        m_session->save();
    return !m_session->filePath().isEmpty() && !m_session->isModified();
}

void MainWindow::profileThisMachine()
{
    if (!m_session->hasProject()) {
        showError(tr("Open a model first."));
        return;
    }
    if (!ensureSavedForChild())
        return;
    const int sizes = m_session->graph()->info().family == "onnx" ? 1 : 2; // as `pipestudio profile` measures
    m_profileDock->runner()->setExecutable(m_launcher->executable());
    if (m_profileDock->start(m_session->filePath(), sizes)) {
        dock(QStringLiteral("Profile"))->show();
        dock(QStringLiteral("Profile"))->raise();
    }
}

void MainWindow::importProfilerTrace()
{
    if (!m_session->hasProject()) {
        showError(tr("Open a model first."));
        return;
    }
    if (!ensureSavedForChild())
        return;
    TraceImportDialog dialog(m_session->filePath(), m_launcher->executable(), this);
    connect(&dialog, &TraceImportDialog::imported, this, [this, &dialog](const QString& message) {
        statusBar()->showMessage(message, 10000);
        (void)m_session->reloadProfiles();
        m_runsModel->reload();
        const auto runId = dialog.report().value(QStringLiteral("run")).toInt();
        if (runId > 0 && m_compare->showRun(runId)) { // the imported timeline against the prediction
            dock(QStringLiteral("Predicted vs measured"))->show();
            dock(QStringLiteral("Predicted vs measured"))->raise();
        }
    });
    (void)dialog.exec();
}

void MainWindow::useMeasuredProfile()
{
    const auto& stored = m_session->storedProfiles();
    const auto measured =
        std::find_if(stored.begin(), stored.end(), [](const Profile& p) { return p.source == "measured-cpu"; });
    if (measured == stored.end())
        return;
    m_planSession->setStoredProfiles(stored);
    auto setup = m_planSession->setup();
    setup.deviceId = "cpu";
    setup.profileSource = "measured-cpu";
    if (m_planSession->configure(setup)) {
        const double mb = m_planSession->editor().microBatch();
        m_profileDock->showComparison(m_session->graph(), &*measured, mb);
        statusBar()->showMessage(tr("The editor and balance views now plan with the measured CPU profile."), 10000);
    }
}

} // namespace ps::gui
