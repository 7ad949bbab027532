// First start: with no project and no recent one, the studio opens the example project (created
// in the app data folder of a fresh HOME) ready for Run > Launch; and `pipestudio gui --help`
// lists every view it renders.
#include "models/example_project.h"
#include "models/plan_session.h"
#include "models/project_session.h"
#include "models/run_launcher.h"
#include "models/run_prediction.h"
#include "models/runs_model.h"
#include "plots/plot_units.h"
#include "plots/stage_balance_plot.h"
#include "plots/timeline_plot.h"
#include "runtime/training_run.h"
#include "store/project_store.h"
#include "views/launch_dialog.h"
#include "views/main_window.h"

#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>

#include <gtest/gtest.h>

using namespace ps;
using namespace ps::gui;

namespace {

// A fresh HOME and XDG folders for the test's lifetime, and no recent projects.
class FreshHome
{
public:
    FreshHome()
        : m_home(qgetenv("HOME"))
        , m_data(qgetenv("XDG_DATA_HOME"))
        , m_recent(QSettings().value(QStringLiteral("recentFiles")))
    {
        qputenv("HOME", m_dir.path().toUtf8());
        qputenv("XDG_DATA_HOME", m_dir.filePath(QStringLiteral("data")).toUtf8());
        QSettings().remove(QStringLiteral("recentFiles"));
    }
    ~FreshHome()
    {
        qputenv("HOME", m_home);
        qputenv("XDG_DATA_HOME", m_data);
        if (m_recent.isValid())
            QSettings().setValue(QStringLiteral("recentFiles"), m_recent);
        else
            QSettings().remove(QStringLiteral("recentFiles"));
    }
    [[nodiscard]] QString path() const
    {
        return m_dir.path();
    }

private:
    QTemporaryDir m_dir;
    QByteArray m_home;
    QByteArray m_data;
    QVariant m_recent;
};

} // namespace

TEST(FirstStart, OpensTheExampleProjectReadyToLaunch)
{
    FreshHome home;
    const auto example = exampleProjectPath();
    ASSERT_TRUE(example.startsWith(home.path())) << example.toStdString();
    ASSERT_FALSE(QFileInfo::exists(example));

    MainWindow window;
    window.launcher()->setExecutable(QStringLiteral(PS_PIPESTUDIO_EXE));
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    ASSERT_TRUE(window.openOnStart(QString(), QString()));
    ASSERT_TRUE(loaded.wait(60'000));
    ASSERT_TRUE(loaded.front().front().toBool());
    EXPECT_TRUE(QFileInfo::exists(example));
    EXPECT_EQ(window.session()->filePath(), example);
    EXPECT_FALSE(window.session()->isModified());
    EXPECT_EQ(window.session()->graph()->info().name, "gpt2-tiny");
    ASSERT_TRUE(window.planSession()->hasPlan());
    EXPECT_EQ(window.planSession()->setup().deviceId, "cpu");
    // This machine's CPU as one of the plan's devices sharing its cores, measured once per process
    // and thread count (off the GUI thread at start), not again.
    const auto devices = static_cast<std::size_t>(window.planSession()->setup().schedule.devices());
    EXPECT_EQ(window.planSession()->editor().cluster().device.flopsFp32,
        thisCpu(ps::engine::threadsPerDevice(devices)).flopsFp32);
    EXPECT_EQ(window.planSession()->editor().cluster().device.cacheBytes,
        thisCpu(ps::engine::threadsPerDevice(devices)).cacheBytes);
    EXPECT_EQ(window.planSession()->snapshot().plan.schedule.stages, 2);
    const auto plans = ProjectStore::open(example.toStdString(), ProjectStore::Access::ReadOnly).loadPlans();
    ASSERT_EQ(plans.size(), 1u);
    // Its memory charts read in the unit of its stages (a few MiB), and the bars and curves fill
    // their axes instead of lying flat under the machine's memory.
    EXPECT_EQ(window.balancePlot()->memoryAxisLabel(), QStringLiteral("MiB at the peak"));
    EXPECT_GT(window.balancePlot()->memoryAxisFill(), 0.5);
    EXPECT_EQ(window.timeline()->memoryAxisLabel(), QStringLiteral("MiB"));
    EXPECT_GT(window.timeline()->memoryAxisFill(), 0.5);
    const double iterationMs = window.planSession()->snapshot().simulation.iterationNs / 1e6;
    EXPECT_EQ(window.timeline()->timeAxisLabel(), QStringLiteral("time (%1)").arg(timeAxisUnit(iterationMs).name));
    EXPECT_EQ(window.timeline()->legendEntries(), 7);

    // Run > Launch is ready: the current edit and the stored plan, both predicted to fit.
    LaunchDialog dialog(window.planSession(), example);
    EXPECT_EQ(dialog.planCount(), 2);
    EXPECT_TRUE(dialog.canLaunch()) << dialog.refusal().toStdString();
    EXPECT_TRUE(dialog.launchButton()->isEnabled());
    EXPECT_EQ(dialog.request().devices, 2);
    dialog.selectPlan(1);
    EXPECT_TRUE(dialog.canLaunch()) << dialog.refusal().toStdString();
    dialog.setSteps(3);
    QSignalSpy done(window.launcher(), &RunLauncher::finished);
    ASSERT_TRUE(window.launch(dialog));
    ASSERT_TRUE(done.wait(120'000));
    const auto outcome = done.front().front().value<RunOutcome>();
    EXPECT_EQ(outcome.status, QStringLiteral("finished")) << outcome.message.toStdString();
    EXPECT_EQ(outcome.lastStep, 3);
}

TEST(FirstStart, TheExampleIsReusedAndRecentProjectsWin)
{
    FreshHome home;
    const auto example = exampleProjectPath();
    {
        MainWindow window;
        QSignalSpy loaded(&window, &MainWindow::loadFinished);
        ASSERT_TRUE(window.openExampleInBackground());
        ASSERT_TRUE(loaded.wait(60'000));
    }
    const auto written = QFileInfo(example).lastModified();
    {
        // Opening it again reads the same file, and adds no second plan.
        MainWindow window;
        QSignalSpy loaded(&window, &MainWindow::loadFinished);
        ASSERT_TRUE(window.openExampleInBackground());
        ASSERT_TRUE(loaded.wait(60'000));
        EXPECT_EQ(window.session()->filePath(), example);
    }
    EXPECT_EQ(QFileInfo(example).lastModified(), written);
    EXPECT_EQ(ProjectStore::open(example.toStdString(), ProjectStore::Access::ReadOnly).loadPlans().size(), 1u);
    // The example is now a recent project, so a later start opens nothing by itself.
    MainWindow window;
    EXPECT_FALSE(window.recentFiles().isEmpty());
    EXPECT_FALSE(window.openOnStart(QString(), QString()));
    EXPECT_FALSE(window.isLoading());
}

TEST(GuiCommand, HelpListsEveryView)
{
    QProcess p;
    p.start(QStringLiteral(PS_PIPESTUDIO_EXE), { QStringLiteral("gui"), QStringLiteral("--help") });
    ASSERT_TRUE(p.waitForFinished(20'000));
    const auto help = QString::fromUtf8(p.readAllStandardOutput()).simplified();
    EXPECT_EQ(p.exitCode(), 0);
    for (const char* view :
        { "main", "editor", "balance", "timeline", "plans", "search", "cluster", "launch", "monitor", "compare" })
        EXPECT_TRUE(help.contains(QString::fromLatin1(view))) << view << " missing from: " << help.toStdString();
    EXPECT_TRUE(help.contains(QStringLiteral("example project"))) << help.toStdString();

    // Anything else is refused before a window opens.
    p.start(QStringLiteral(PS_PIPESTUDIO_EXE),
        { QStringLiteral("gui"), QStringLiteral("--screenshot"), QStringLiteral("/tmp/x.png"), QStringLiteral("--view"),
            QStringLiteral("histogram") });
    ASSERT_TRUE(p.waitForFinished(20'000));
    EXPECT_NE(p.exitCode(), 0);
    EXPECT_TRUE(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("histogram")));
}

// The axis units: binary byte units from B to TiB and us/ms/s, each where the largest value reads
// from 1 to below 1024 (1000); a capacity far above the data stays off the axis.
TEST(PlotUnits, UnitsFitTheLargestValue)
{
    EXPECT_EQ(byteAxisUnit(0).name, QStringLiteral("B"));
    EXPECT_EQ(byteAxisUnit(1023).name, QStringLiteral("B"));
    EXPECT_EQ(byteAxisUnit(1024).name, QStringLiteral("KiB"));
    EXPECT_EQ(byteAxisUnit(5.0 * 1024 * 1024).name, QStringLiteral("MiB"));
    EXPECT_DOUBLE_EQ(byteAxisUnit(5.0 * 1024 * 1024).scale, 1024.0 * 1024);
    EXPECT_EQ(byteAxisUnit(80.0 * (1LL << 30)).name, QStringLiteral("GiB"));
    EXPECT_EQ(byteAxisUnit(3.0 * (1LL << 50)).name, QStringLiteral("TiB")); // past TiB stays TiB
    EXPECT_EQ(timeAxisUnit(0).name, QStringLiteral("ms"));
    EXPECT_DOUBLE_EQ(timeAxisUnit(0.25).scale, 1e-3);
    EXPECT_EQ(timeAxisUnit(999).name, QStringLiteral("ms"));
    EXPECT_EQ(timeAxisUnit(1500).name, QStringLiteral("s"));
    EXPECT_DOUBLE_EQ(axisTop(10, 15, 1.2), 18); // the capacity near the data is on the axis
    EXPECT_DOUBLE_EQ(axisTop(10, 1000, 1.2), 12); // far above it, not
    EXPECT_DOUBLE_EQ(axisTop(0, 8, 1.0), 8);
}
