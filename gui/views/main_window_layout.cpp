// MainWindow: the View menu (every dock, Reset layout), the remembered layout and File > Export.
#include "models/plan_session.h"
#include "models/project_session.h"
#include "models/run_monitor_model.h"
#include "schedule/schedule_validate.h"
#include "store/project_store.h"
#include "views/main_window.h"

#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QMenuBar>
#include <QSettings>
#include <QStatusBar>
#include <QToolBar>

namespace ps::gui {
namespace {

    const auto kGeometryKey = QStringLiteral("window/geometry");
    const auto kStateKey = QStringLiteral("window/state");

    bool writeText(const QString& path, const std::string& text, QString& error)
    {
        QFile f(path);
        if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)
            || f.write(text.data(), static_cast<qint64>(text.size())) != static_cast<qint64>(text.size())) {
            error = QObject::tr("Cannot write '%1': %2").arg(path, f.errorString());
            return false;
        }
        return true;
    }

} // namespace

QDockWidget* MainWindow::dock(const QString& name) const
{
    return findChild<QDockWidget*>(name, Qt::FindDirectChildrenOnly);
}

void MainWindow::setupViewMenu()
{
    m_viewMenu = menuBar()->addMenu(tr("&View"));
    for (auto* d : findChildren<QDockWidget*>(QString(), Qt::FindDirectChildrenOnly))
        m_viewMenu->addAction(d->toggleViewAction());
    m_viewMenu->addSeparator();
    for (auto* t : findChildren<QToolBar*>(QString(), Qt::FindDirectChildrenOnly))
        m_viewMenu->addAction(t->toggleViewAction());
    m_viewMenu->addSeparator();
    m_viewMenu->addAction(tr("&Reset layout"), this, &MainWindow::resetLayout);
    m_defaultLayout = saveState();
}

void MainWindow::resetLayout()
{
    restoreState(m_defaultLayout);
    for (auto* d : findChildren<QDockWidget*>(QString(), Qt::FindDirectChildrenOnly)) {
        d->setFloating(false);
        d->show();
    }
    for (const auto& name : { tr("Nodes"), tr("Stage balance"), tr("Timeline and memory") }) {
        if (auto* d = dock(name))
            d->raise();
    }
}

void MainWindow::restoreLayout()
{
    const QSettings settings;
    if (settings.contains(kGeometryKey))
        restoreGeometry(settings.value(kGeometryKey).toByteArray());
    if (settings.contains(kStateKey))
        restoreState(settings.value(kStateKey).toByteArray());
}

void MainWindow::setupExportMenu(QMenu* file)
{
    auto* menu = file->addMenu(tr("&Export"));
    const auto ask = [this](const QString& title, const QString& filter) {
        return QFileDialog::getSaveFileName(this, title, QString(), filter);
    };
    const auto traceFilter = tr("Chrome trace (*.json)");
    menu->addAction(tr("Chrome trace of the &simulated iteration…"), this, [this, ask, traceFilter] {
        if (const auto path = ask(tr("Export simulated trace"), traceFilter); !path.isEmpty())
            exportSimulatedTrace(path);
    });
    menu->addAction(
        tr("Chrome trace of the &measured iteration (run in the monitor)…"), this, [this, ask, traceFilter] {
            if (const auto path = ask(tr("Export measured trace"), traceFilter); !path.isEmpty())
                exportMeasuredTrace(path, m_monitorModel->runId());
        });
    menu->addAction(tr("Schedule &CSV (PyTorch pipelining)…"), this, [this, ask] {
        if (const auto path = ask(tr("Export schedule"), tr("CSV (*.csv)")); !path.isEmpty())
            exportScheduleCsv(path);
    });
}

bool MainWindow::exportSimulatedTrace(const QString& path)
{
    if (!m_planSession->hasPlan()) {
        showError(tr("There is no plan to export; open a model first."));
        return false;
    }
    QString error;
    if (!writeText(path, toChromeTrace(m_planSession->snapshot().simulation), error)) {
        showError(error);
        return false;
    }
    statusBar()->showMessage(tr("Wrote the simulated iteration to %1").arg(path), 8000);
    return true;
}

bool MainWindow::exportMeasuredTrace(const QString& path, std::int64_t runId)
{
    try {
        if (m_session->filePath().isEmpty())
            throw std::runtime_error(tr("the project has no file and so no runs").toStdString());
        const auto store = ProjectStore::open(m_session->filePath().toStdString(), ProjectStore::Access::ReadOnly);
        const auto id = runId > 0 ? runId : store.latestRunId();
        const auto iterations = id > 0 ? store.runEventIterations(id) : std::vector<std::int64_t> {};
        if (iterations.empty())
            throw std::runtime_error(tr("no run of this project stored a measured timeline").toStdString());
        SimulationResult r;
        r.scheduleName = tr("measured run %1, iteration %2").arg(id).arg(iterations.front()).toStdString();
        r.events = store.loadRunEvents(id, iterations.front());
        for (const auto& e : r.events) {
            r.devices.resize(std::max<std::size_t>(r.devices.size(), e.device.index() + 1));
            r.iterationNs = std::max(r.iterationNs, e.endNs);
        }
        QString error;
        if (!writeText(path, toChromeTrace(r), error))
            throw std::runtime_error(error.toStdString());
        statusBar()->showMessage(
            tr("Wrote run %1's measured iteration %2 to %3").arg(id).arg(iterations.front()).arg(path), 8000);
        return true;
    } catch (const std::exception& e) {
        showError(tr("Cannot export the measured trace: %1").arg(QString::fromStdString(e.what())));
        return false;
    }
}

bool MainWindow::exportScheduleCsv(const QString& path)
{
    if (!m_planSession->hasPlan()) {
        showError(tr("There is no plan to export; open a model first."));
        return false;
    }
    QString error;
    try {
        const auto csv = scheduleToCsv(generateSchedule(m_planSession->snapshot().plan.schedule));
        if (!writeText(path, csv, error)) {
            showError(error);
            return false;
        }
    } catch (const std::exception& e) {
        showError(QString::fromStdString(e.what()));
        return false;
    }
    statusBar()->showMessage(tr("Wrote the schedule to %1").arg(path), 8000);
    return true;
}

} // namespace ps::gui
