// The View menu, the remembered layout and File > Export.
#include "models/plan_session.h"
#include "models/project_session.h"
#include "models/search_results_model.h"
#include "store/project_store.h"
#include "views/auto_search_dialog.h"
#include "views/main_window.h"
#include "zoo/model_config.h"

#include <QAction>
#include <QDockWidget>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMenu>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>

using namespace ps;
using namespace ps::gui;

namespace {

QAction* viewAction(const MainWindow& window, const QString& text)
{
    for (auto* a : window.viewMenu()->actions()) {
        if (a->text() == text)
            return a;
    }
    return nullptr;
}

void clearLayoutSettings()
{
    QSettings().remove(QStringLiteral("window"));
}

} // namespace

TEST(Layout, TheViewMenuBringsBackAClosedDock)
{
    clearLayoutSettings();
    MainWindow window;
    window.show();
    auto* monitor = window.dock(QStringLiteral("Monitor"));
    ASSERT_NE(monitor, nullptr);
    for (const auto& name :
        { "Nodes", "Summary", "Cluster", "Stage balance", "Plans", "Timeline and memory", "Monitor" })
        EXPECT_NE(viewAction(window, QString::fromLatin1(name)), nullptr) << name;
    monitor->close();
    EXPECT_FALSE(monitor->isVisible());
    auto* action = viewAction(window, QStringLiteral("Monitor"));
    ASSERT_NE(action, nullptr);
    EXPECT_FALSE(action->isChecked());
    action->trigger();
    EXPECT_TRUE(monitor->isVisible());
}

TEST(Layout, ResetLayoutShowsEveryDockDockedAgain)
{
    clearLayoutSettings();
    MainWindow window;
    window.show();
    window.dock(QStringLiteral("Nodes"))->close();
    window.dock(QStringLiteral("Plans"))->setFloating(true);
    viewAction(window, QStringLiteral("&Reset layout"))->trigger();
    for (auto* d : window.findChildren<QDockWidget*>()) {
        EXPECT_FALSE(d->isHidden()) << d->objectName().toStdString();
        EXPECT_FALSE(d->isFloating()) << d->objectName().toStdString();
    }
}

TEST(Layout, TheLayoutIsRememberedBetweenSessions)
{
    clearLayoutSettings();
    {
        MainWindow window;
        window.show();
        window.dock(QStringLiteral("Cluster"))->close();
        window.close(); // saves geometry and dock state
    }
    MainWindow next;
    next.show();
    EXPECT_TRUE(next.dock(QStringLiteral("Cluster"))->isHidden());
    EXPECT_FALSE(next.dock(QStringLiteral("Nodes"))->isHidden());
    clearLayoutSettings();
}

TEST(Export, SimulatedTraceAndScheduleCsvOfTheCurrentPlan)
{
    QTemporaryDir dir;
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-tiny")));
    const auto trace = dir.filePath(QStringLiteral("sim.json"));
    ASSERT_TRUE(window.exportSimulatedTrace(trace));
    QFile f(trace);
    ASSERT_TRUE(f.open(QIODevice::ReadOnly));
    const auto doc = QJsonDocument::fromJson(f.readAll());
    ASSERT_TRUE(doc.isObject());
    EXPECT_GT(doc.object().value(QStringLiteral("traceEvents")).toArray().size(), 10);

    const auto csv = dir.filePath(QStringLiteral("schedule.csv"));
    ASSERT_TRUE(window.exportScheduleCsv(csv));
    QFile c(csv);
    ASSERT_TRUE(c.open(QIODevice::ReadOnly));
    const auto rows = QString::fromUtf8(c.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    EXPECT_EQ(rows.size(), window.planSession()->snapshot().plan.schedule.devices());
    EXPECT_TRUE(rows.front().startsWith(QStringLiteral("0F0"))) << rows.front().toStdString();
}

TEST(Export, AMeasuredTraceNeedsARunAndSaysSo)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(zooPreset("gpt2-tiny")), true);
    MainWindow window;
    ASSERT_TRUE(window.openProject(path));
    EXPECT_FALSE(window.exportMeasuredTrace(dir.filePath(QStringLiteral("m.json"))));
    {
        auto store = ProjectStore::open(path.toStdString());
        const auto run = store.beginRun("{}");
        SimEvent e;
        e.device = DeviceId(1);
        e.stage = StageId(1);
        e.microBatch = MicroBatchId(0);
        e.startNs = 1e6;
        e.endNs = 3e6;
        store.saveRunEvents(run, 1, { e });
        store.endRun(run, "finished");
    }
    const auto out = dir.filePath(QStringLiteral("m.json"));
    ASSERT_TRUE(window.exportMeasuredTrace(out));
    QFile f(out);
    ASSERT_TRUE(f.open(QIODevice::ReadOnly));
    const auto text = f.readAll();
    EXPECT_TRUE(text.contains("\"name\":\"F0\"")) << text.toStdString();
    EXPECT_TRUE(text.contains("\"pid\":1,\"tid\":0")) << text.toStdString(); // device 1's compute stream
}

TEST(AutoSearch, AnErrorThrownByTheSearchIsShownNotFatal)
{
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-tiny")));
    AutoSearchDialog dialog(window.planSession());
    QSignalSpy failed(&dialog, &AutoSearchDialog::searchFailed);
    QSignalSpy finished(&dialog, &AutoSearchDialog::searchFinished);
    // searchPlans reports a plan it cannot make as a row; an exception is a bug (or out of memory),
    // which the first search here throws.
    auto calls = std::make_shared<int>(0);
    dialog.setSearchFunction([calls](const Graph& g, const Profile& p, const SearchRequest& r,
                                 const std::function<void(double)>& progress, const std::atomic<bool>* cancel) {
        if ((*calls)++ == 0)
            throw std::logic_error("planner bug: stage 3 has no nodes");
        return searchPlans(g, p, r, progress, cancel);
    });
    auto request = dialog.request();
    request.schedules = { { ScheduleKind::OneFOneB, 2, 4, 1, 1 } };
    dialog.start(request);
    ASSERT_TRUE(finished.wait(30'000));
    ASSERT_EQ(failed.size(), 1);
    EXPECT_EQ(dialog.lastError(), QStringLiteral("planner bug: stage 3 has no nodes"));
    EXPECT_FALSE(dialog.isRunning());
    // Still usable: the next search runs.
    dialog.start(request);
    ASSERT_TRUE(finished.wait(30'000));
    EXPECT_TRUE(dialog.lastError().isEmpty());
    EXPECT_GT(dialog.results()->rowCount(), 0);
}
