#include "app_launcher.h"

#include "models/plan_session.h"
#include "models/plans_model.h"
#include "models/project_session.h"
#include "models/runs_model.h"
#include "models/stage_balance_model.h"
#include "plots/figure_plot.h"
#include "plots/partition_editor_plot.h"
#include "plots/stage_balance_plot.h"
#include "plots/timeline_plot.h"
#include "store/project_store.h"
#include "views/auto_search_dialog.h"
#include "views/cluster_dock.h"
#include "views/launch_dialog.h"
#include "views/main_window.h"
#include "views/monitor_dock.h"
#include "views/onnx_import_dialog.h"
#include "views/plans_panel.h"
#include "views/run_compare_view.h"
#include "views/scale_dialog.h"

#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QEventLoop>
#include <QFile>
#include <QHeaderView>
#include <QIcon>
#include <QPixmap>
#include <QTableView>
#include <QTimer>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <cstdio>

namespace ps::gui {
namespace {

    bool loadInitial(MainWindow& window, const GuiOptions& options, std::string& error)
    {
        QString message;
        QObject::connect(
            window.session(), &ProjectSession::operationFailed, &window, [&message](const QString& m) { message = m; });
        bool ok = true;
        if (!options.project.empty())
            ok = window.openProject(QString::fromStdString(options.project));
        else if (!options.model.empty()) {
            try {
                ok = window.session()->newFromZoo(zooPreset(options.model));
            } catch (const std::exception& e) {
                message = QString::fromStdString(e.what());
                ok = false;
            }
        } else { // neither: the example project, planned on this CPU as at first start
            QEventLoop loop;
            QObject::connect(&window, &MainWindow::loadFinished, &loop, [&ok, &loop](bool loaded) {
                ok = loaded;
                loop.quit();
            });
            if (window.openExampleInBackground())
                loop.exec();
            else
                ok = false;
        }
        error = message.toStdString();
        return ok;
    }

} // namespace

namespace {

    void settle()
    {
        // Let layouts settle and QCustomPlot's queued replots run before grabbing.
        for (int i = 0; i < 5; ++i)
            QApplication::processEvents();
    }

    bool savePng(QWidget& widget, const GuiOptions& options, std::string& error)
    {
        widget.resize(options.width, options.height);
        widget.show();
        settle();
        if (!widget.grab().save(QString::fromStdString(options.screenshot), "PNG")) {
            error = "cannot write screenshot '" + options.screenshot + "'";
            return false;
        }
        return true;
    }

    // Plans to show in the plans view: the planner's algorithms and the hand-made start, saved
    // with their simulations into a scratch project next to the screenshot.
    QString projectWithPlans(PlanSession& session, const GuiOptions& options)
    {
        const QString path = QString::fromStdString(options.screenshot) + QStringLiteral(".pstudio");
        writeNewProject(path.toStdString(), *session.graph(), true);
        auto store = ProjectStore::open(path.toStdString());
        const auto& editor = session.editor();
        for (auto algo : { PlanAlgorithm::DawnPiper, PlanAlgorithm::PipeDream, PlanAlgorithm::GPipe,
                 PlanAlgorithm::MemoryBalanced }) {
            PlannerOptions o;
            o.algorithm = algo;
            const auto plan = findPlan(editor.model(), o);
            session.applyPartition(plan.partition, QString());
            auto named = session.snapshot().plan;
            named.algorithm = plan.algorithm;
            store.savePlan(named, plan.algorithm + " 1f1b", &session.snapshot().simulation);
        }
        return path;
    }

    // The stored plan `id` of the open project in the editor: its schedule and micro-batch, then its
    // placement (a Mixed-pipe plan with its node order and stage-to-device map).
    bool applyStoredPlan(MainWindow& window, std::int64_t id, std::string& error)
    {
        const auto path = window.session()->filePath();
        auto* session = window.planSession();
        if (path.isEmpty() || !session->hasPlan()) {
            error = "--plan needs a project with a model";
            return false;
        }
        for (const auto& row : ProjectStore::open(path.toStdString()).loadPlans()) {
            if (row.id != id)
                continue;
            const auto j = nlohmann::json::parse(row.json);
            auto setup = session->setup();
            setup.schedule = parseScheduleSpec(
                j.value("schedule", std::string("1f1b")), j.value("stages", 1), j.value("micro_batches", 1));
            setup.microBatch = j.value("micro_batch", setup.microBatch);
            QString failure;
            const auto connection =
                QObject::connect(session, &PlanSession::operationFailed, [&failure](const QString& m) { failure = m; });
            if (!(setup == session->setup()))
                session->configure(setup);
            session->applyPlacement(placementFromPlanJson(row.json, session->graph()->nodeCount()),
                QStringLiteral("Apply plan %1").arg(id));
            QObject::disconnect(connection);
            error = failure.toStdString();
            return failure.isEmpty();
        }
        error = "'" + path.toStdString() + "' has no plan " + std::to_string(id);
        return false;
    }

    // Launch dialog, monitor and predicted-vs-measured of the project's newest run.
    bool renderRunView(MainWindow& window, const GuiOptions& options, std::string& error)
    {
        const auto path = window.session()->filePath();
        if (path.isEmpty()) {
            error = "the '" + options.view + "' view needs a saved project (--project)";
            return false;
        }
        if (options.view == "launch") {
            LaunchDialog dialog(window.planSession(), path);
            return savePng(dialog, options, error);
        }
        if (window.runsModel()->rowCount() == 0) {
            error = "'" + path.toStdString() + "' has no training runs (pipestudio train first)";
            return false;
        }
        const auto run = window.runsModel()->row(0)->id;
        QString failure;
        QObject::connect(window.monitor(), &MonitorDock::failed, [&failure](const QString& m) { failure = m; });
        QObject::connect(window.compareView(), &RunCompareView::failed, [&failure](const QString& m) { failure = m; });
        QWidget* widget = window.monitor();
        bool ok = window.monitor()->openRun(run);
        if (options.view == "compare") {
            widget = window.compareView();
            ok = window.compareView()->showRun(run);
        }
        if (!ok) {
            error = failure.toStdString();
            return false;
        }
        auto* dock = qobject_cast<QDockWidget*>(widget->parentWidget());
        widget->setParent(nullptr); // rendered on its own, at the screenshot's size
        const bool saved = savePng(*widget, options, error);
        if (dock)
            dock->setWidget(widget);
        return saved;
    }

    // The Scale out dialog for the session's GPT: 256 GPUs of DGX A100 nodes, global batch 1,024.
    bool renderScale(PlanSession* session, const GuiOptions& options, std::string& error)
    {
        const auto graph = session->graph();
        const auto model = graph ? gptShapeOf(*graph) : std::nullopt;
        if (!model) {
            error = "the 'scale' view needs a GPT-2 zoo model";
            return false;
        }
        ScaleDialog w(*model);
        w.setCluster(QStringLiteral("dgx-a100-80gb"), 256, 1024);
        w.search();
        return savePng(w, options, error);
    }

    bool renderPlans(PlanSession* session, const GuiOptions& options, std::string& error)
    {
        PlansModel model;
        model.setProject(projectWithPlans(*session, options));
        PlansPanel w(session, &model);
        w.table()->selectRow(0);
        const bool ok = savePng(w, options, error);
        for (const char* suffix : { "", "-wal", "-shm" })
            QFile::remove(model.projectPath() + QString::fromLatin1(suffix));
        return ok;
    }

    // Auto-search over three schedules, rendered when it has finished.
    bool renderSearch(PlanSession* session, const GuiOptions& options, std::string& error)
    {
        AutoSearchDialog dialog(session);
        QEventLoop loop;
        QObject::connect(&dialog, &AutoSearchDialog::searchFinished, &loop, &QEventLoop::quit);
        auto request = dialog.request();
        request.schedules = { { ScheduleKind::OneFOneB, 4, 8, 1, 1 }, { ScheduleKind::KFKB, 4, 8, 2, 1 },
            { ScheduleKind::ZeroBubbleH1, 4, 8, 1, 1 } };
        dialog.start(request);
        loop.exec();
        return savePng(dialog, options, error);
    }

    bool renderView(MainWindow& window, const GuiOptions& options, std::string& error)
    {
        auto* session = window.planSession();
        const auto& view = options.view;
        if (view == "editor") {
            PartitionEditorPlot w(session);
            w.selectBoundary(2);
            return savePng(w, options, error);
        }
        if (view == "balance") {
            QWidget w;
            auto* layout = new QVBoxLayout(&w);
            layout->addWidget(new StageBalancePlot(window.stageBalance(), &w), 3);
            auto* table = new QTableView(&w);
            table->setModel(window.stageBalance());
            table->verticalHeader()->setVisible(false);
            layout->addWidget(table, 2);
            return savePng(w, options, error);
        }
        if (view == "timeline") {
            TimelinePlot w(session);
            return savePng(w, options, error);
        }
        if (view == "cluster") {
            ClusterDock w(session);
            return savePng(w, options, error);
        }
        if (view == "scale")
            return renderScale(session, options, error);
        if (view == "plans")
            return renderPlans(session, options, error);
        if (view == "search")
            return renderSearch(session, options, error);
        if (view == "launch" || view == "monitor" || view == "compare")
            return renderRunView(window, options, error);
        if (view == "import") {
            if (options.onnx.empty()) {
                error = "the 'import' view needs --onnx FILE";
                return false;
            }
            try {
                OnnxImportDialog dialog(QString::fromStdString(options.onnx));
                (void)dialog.preview(); // computed now, not after the dialog's edit pause
                return savePng(dialog, options, error);
            } catch (const std::exception& e) {
                error = e.what();
                return false;
            }
        }
        if (view != "main") {
            error = "unknown view '" + view
                + "' (main, editor, balance, timeline, plans, search, cluster, launch, monitor, compare, import)";
            return false;
        }
        return savePng(window, options, error);
    }

} // namespace

bool renderScreenshot(const GuiOptions& options, std::string& error)
{
    MainWindow window;
    if (!loadInitial(window, options, error))
        return false;
    if (options.microBatch > 0) {
        auto setup = window.planSession()->setup();
        setup.microBatch = options.microBatch;
        window.planSession()->configure(setup);
    }
    if (options.plan > 0 && !applyStoredPlan(window, options.plan, error))
        return false;
    return renderView(window, options, error);
}

bool renderFigures(
    int argc, char** argv, const std::vector<ReportFigure>& figures, const std::string& directory, std::string& error)
{
    if (qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")
        && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
        qputenv("QT_QPA_PLATFORM", "offscreen");
    QApplication app(argc, argv);
    for (const auto& f : figures) {
        const auto path = QDir(QString::fromStdString(directory)).filePath(QString::fromStdString(f.file));
        if (!saveFigurePng(f, path)) {
            error = "cannot write " + path.toStdString();
            return false;
        }
    }
    return true;
}

namespace {

    QtMessageHandler g_defaultHandler = nullptr;

    // A headless screenshot's caller reads stderr for errors: Qt's offscreen platform notes about
    // what it cannot do (window size hints) and an unset runtime folder say nothing about the PNG.
    void quietOffscreenNotes(QtMsgType type, const QMessageLogContext& context, const QString& message)
    {
        if (message.contains(QStringLiteral("propagateSizeHints"))
            || message.contains(QStringLiteral("XDG_RUNTIME_DIR not set")))
            return;
        if (g_defaultHandler)
            g_defaultHandler(type, context, message);
        else
            std::fprintf(stderr, "%s\n", qPrintable(qFormatLogMessage(type, context, message)));
    }

} // namespace

int runApplication(int argc, char** argv, const GuiOptions& options)
{
    if (!options.screenshot.empty()) {
        g_defaultHandler = qInstallMessageHandler(quietOffscreenNotes);
        // A screenshot needs no screen: render offscreen where there is no display (as reproduce does).
        if (qEnvironmentVariableIsEmpty("DISPLAY") && qEnvironmentVariableIsEmpty("WAYLAND_DISPLAY")
            && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
            qputenv("QT_QPA_PLATFORM", "offscreen");
    }
    QApplication app(argc, argv);
    QApplication::setOrganizationName(QStringLiteral("PipeStudio"));
    QApplication::setApplicationName(QStringLiteral("PipeStudio"));
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/icons/pipestudio.svg")));
    if (!options.screenshot.empty()) {
        std::string error;
        if (!renderScreenshot(options, error)) {
            qWarning("pipestudio: error: %s", error.c_str());
            return 1;
        }
        return 0;
    }
    MainWindow window;
    window.resize(options.width, options.height);
    window.show();
    // Loads in the background; errors are shown in the window.
    window.openOnStart(QString::fromStdString(options.project), QString::fromStdString(options.model));
    return QApplication::exec();
}

} // namespace ps::gui
