// Launch and monitor: real `pipestudio train` children on a gpt2-tiny project, driven through the
// launch dialog's API, the launcher and the main window.
#include "models/plan_session.h"
#include "models/run_launcher.h"
#include "models/run_monitor_model.h"
#include "models/runs_model.h"
#include "plots/compare_timeline_plot.h"
#include "plots/run_monitor_plot.h"
#include "runtime/run_comparison.h"
#include "store/project_store.h"
#include "store/sqlite.h"
#include "views/launch_dialog.h"
#include "views/main_window.h"
#include "views/monitor_dock.h"
#include "views/run_compare_view.h"
#include "zoo/model_config.h"

#include <QDir>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QMenu>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include <gtest/gtest.h>

#include <csignal>

using namespace ps;
using namespace ps::gui;

namespace {

constexpr int kRunTimeoutMs = 120'000;

QString tinyProject(const QTemporaryDir& dir)
{
    const auto path = dir.filePath(QStringLiteral("tiny.pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(zooPreset("gpt2-tiny")), true);
    return path;
}

// A main window on the tiny project planning a 2-stage 1F1B pipeline with 2 micro-batches.
struct Studio
{
    explicit Studio(const QString& path)
    {
        window.launcher()->setExecutable(QStringLiteral(PS_PIPESTUDIO_EXE));
        EXPECT_TRUE(window.openProject(path));
        auto setup = window.planSession()->setup();
        setup.schedule = { ScheduleKind::OneFOneB, 2, 2, 1, 1 };
        EXPECT_TRUE(window.planSession()->configure(setup));
    }
    MainWindow window;
};

// Waits for the launcher's outcome.
RunOutcome waitForOutcome(RunLauncher* launcher, QSignalSpy& spy)
{
    if (spy.isEmpty()) {
        EXPECT_TRUE(spy.wait(kRunTimeoutMs)) << "the training child did not end";
    }
    EXPECT_FALSE(launcher->isRunning());
    return spy.isEmpty() ? RunOutcome {} : spy.front().front().value<RunOutcome>();
}

bool waitForSteps(const RunMonitorModel* model, std::size_t steps)
{
    QElapsedTimer t;
    t.start();
    while (model->steps().size() < steps && t.elapsed() < kRunTimeoutMs)
        QTest::qWait(20);
    return model->steps().size() >= steps;
}

// Offscreen renders for the docs and for looking at (build/ci/screenshots).
void saveScreenshot(QWidget& widget, const QString& name)
{
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    widget.show();
    QTest::qWait(50);
    EXPECT_TRUE(widget.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/") + name));
}

std::string storedStatus(const QString& path, std::int64_t run)
{
    return ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly).runStatus(run);
}

// The studio launching the tiny project's plan for a million steps, to be stopped, killed or
// crashed once `steps` of them have reached the monitor.
struct EndlessRun
{
    explicit EndlessRun(std::size_t steps)
    {
        dialog.setSteps(1'000'000);
        launched = studio.window.launch(dialog) && waitForSteps(studio.window.monitorModel(), steps);
    }
    RunOutcome outcome()
    {
        return waitForOutcome(launcher, done);
    }
    QTemporaryDir dir;
    QString path = tinyProject(dir);
    Studio studio { path };
    MainWindow& window = studio.window;
    LaunchDialog dialog { window.planSession(), path };
    RunLauncher* launcher = window.launcher();
    QSignalSpy done { launcher, &RunLauncher::finished };
    bool launched = false;
};

} // namespace

TEST(RunLaunch, ParsesTheTrainJsonLines)
{
    const auto start = parseTrainLine(R"({"config":{"devices":"cpu:2","steps":20},"run":7})");
    EXPECT_EQ(start.kind, TrainLine::Kind::Start);
    EXPECT_EQ(start.runId, 7);
    const auto step = parseTrainLine(R"({"busy_ms":[27.0,32.5],"loss":5.5,"lr":0.001,"peak_bytes":[4923904,4331276],)"
                                     R"("step":3,"step_ms":51.3,"tokens_per_s":9971.4})");
    ASSERT_EQ(step.kind, TrainLine::Kind::Step);
    EXPECT_EQ(step.step.step, 3);
    EXPECT_DOUBLE_EQ(step.step.loss, 5.5);
    EXPECT_EQ(step.step.peakBytes, (std::vector<std::int64_t> { 4923904, 4331276 }));
    EXPECT_EQ(step.step.busyMs.size(), 2u);
    const auto summary = parseTrainLine(R"({"loss":3.8,"run":7,"status":"interrupted","step":9,"summary":true})");
    EXPECT_EQ(summary.kind, TrainLine::Kind::Summary);
    EXPECT_EQ(summary.status, QStringLiteral("interrupted"));
    EXPECT_EQ(parseTrainLine("warning: not json").kind, TrainLine::Kind::Other);
    const auto error = parseTrainLine(R"({"error":"out of memory on cpu:1: fc needs 2.00 MiB more","run":7})");
    EXPECT_EQ(error.kind, TrainLine::Kind::Error);
    EXPECT_EQ(error.runId, 7);
    EXPECT_EQ(error.error, QStringLiteral("out of memory on cpu:1: fc needs 2.00 MiB more"));
}

// A stand-in child: its JSON error line says one thing, its stderr tail another.
TEST(RunLaunch, TheChildsJsonErrorLineIsTheReadableErrorNotItsStderrTail)
{
    QTemporaryDir dir;
    const auto path = tinyProject(dir);
    const auto run = ProjectStore::open(path.toStdString()).beginRun(R"({"steps":3})");
    const auto script = dir.filePath(QStringLiteral("fake-pipestudio"));
    QFile f(script);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write(QStringLiteral("#!/bin/sh\n"
                           "echo '{\"config\":{},\"run\":%1}'\n"
                           "echo '{\"error\":\"out of memory on cpu:1: stage 1 needs 2.00 MiB more\",\"run\":%1}'\n"
                           "echo 'an unrelated last line' >&2\n"
                           "exit 1\n")
                .arg(run)
                .toUtf8());
    f.close();
    f.setPermissions(f.permissions() | QFileDevice::ExeOwner);
    RunLauncher launcher;
    launcher.setExecutable(script);
    QSignalSpy done(&launcher, &RunLauncher::finished);
    LaunchRequest r;
    r.project = path;
    ASSERT_TRUE(launcher.start(r));
    const auto outcome = waitForOutcome(&launcher, done);
    EXPECT_EQ(outcome.status, QStringLiteral("failed"));
    EXPECT_EQ(outcome.runId, run);
    EXPECT_EQ(outcome.message,
        QStringLiteral("Training failed (exit code 1): out of memory on cpu:1: stage 1 needs 2.00 MiB more"));
    // The run the child could not end is stored failed, with that message.
    const auto rows = ProjectStore::open(path.toStdString(), ProjectStore::Access::ReadOnly).loadRuns();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows.front().status, "failed");
    EXPECT_NE(rows.front().error.find("stage 1 needs 2.00 MiB more"), std::string::npos) << rows.front().error;

    // Without a JSON error line (a child that died early), the stderr tail is the message.
    ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write("#!/bin/sh\necho 'pipestudio: error: data file x.txt cannot be read' >&2\nexit 1\n");
    f.close();
    done.clear();
    ASSERT_TRUE(launcher.start(r));
    const auto early = waitForOutcome(&launcher, done);
    EXPECT_EQ(early.message, QStringLiteral("Training failed (exit code 1): data file x.txt cannot be read"));
}

TEST(RunLaunch, ArgumentsCarryEveryChoice)
{
    LaunchRequest r;
    r.project = QStringLiteral("/p/x.pstudio");
    r.planId = 4;
    r.devices = 3;
    r.deviceMemoryBytes = 1 << 20;
    r.steps = 50;
    r.randomTokens = true;
    r.learningRate = 3e-4;
    r.checkpointEvery = 10;
    const auto args = trainArguments(r).join(QLatin1Char(' '));
    for (const auto* part : { "train /p/x.pstudio", "--devices cpu:3", "--steps 50", "--lr 0.0003", "--json",
             "--plan 4", "--device-memory 1048576", "--data-format random", "--checkpoint-every 10" })
        EXPECT_TRUE(args.contains(QString::fromLatin1(part))) << args.toStdString() << " lacks " << part;
}

// A GPU chosen in the launch dialog: one device is the GPU, several split it (cuda:GxK).
TEST(RunLaunch, AChosenGpuBecomesCudaDevices)
{
    LaunchRequest r;
    r.project = QStringLiteral("/p/x.pstudio");
    r.gpu = 1;
    r.devices = 1;
    EXPECT_TRUE(trainArguments(r).join(QLatin1Char(' ')).contains(QStringLiteral("--devices cuda:1 ")));
    r.devices = 2;
    EXPECT_TRUE(trainArguments(r).join(QLatin1Char(' ')).contains(QStringLiteral("--devices cuda:1x2 ")));
}

TEST(RunMonitor, ProgressEtaAndBusyShareComeFromTheSteps)
{
    RunMonitorModel m;
    m.beginRun(1, 2, 10);
    EXPECT_LT(m.etaSeconds(), 0);
    m.addStep({ 1, 5.0, 1e-3, 100, 10, { 100, 200 }, { 90, 10 } }); // cold first step: left out
    m.addStep({ 2, 4.0, 1e-3, 20, 50, { 100, 300 }, { 10, 5 } });
    m.addStep({ 3, 3.0, 1e-3, 20, 50, { 100, 250 }, { 10, 5 } });
    EXPECT_DOUBLE_EQ(m.progress(), 0.3);
    EXPECT_NEAR(m.etaSeconds(), 7 * 0.020, 1e-9);
    EXPECT_DOUBLE_EQ(m.busyShare(0), 0.5);
    EXPECT_DOUBLE_EQ(m.busyShare(1), 0.25);
    EXPECT_EQ(m.measuredPeakBytes(1), 300);
    EXPECT_EQ(m.columnCount(), RunMonitorModel::FirstDeviceColumn + 2);
    EXPECT_EQ(formatDuration(65), QStringLiteral("1 min 05 s"));
}

TEST(RunLaunch, ATwoDeviceRunFromTheDialogReachesTheMonitorAndTheProject)
{
    QTemporaryDir dir;
    const auto path = tinyProject(dir);
    Studio s(path);
    LaunchDialog dialog(s.window.planSession(), path);
    ASSERT_TRUE(dialog.usesCurrentEdit());
    ASSERT_TRUE(dialog.prediction().has_value());
    EXPECT_GT(dialog.prediction()->simulation.iterationNs, 0);
    EXPECT_EQ(dialog.prediction()->simulation.devices.size(), 2u);
    EXPECT_TRUE(dialog.canLaunch()) << dialog.refusal().toStdString();
    dialog.setSteps(20);
    auto* launcher = s.window.launcher();
    QSignalSpy steps(launcher, &RunLauncher::stepReceived);
    QSignalSpy done(launcher, &RunLauncher::finished);
    ASSERT_TRUE(s.window.launch(dialog));
    EXPECT_TRUE(s.window.windowTitle().startsWith(QStringLiteral("[")));
    const auto outcome = waitForOutcome(launcher, done);
    EXPECT_EQ(outcome.status, QStringLiteral("finished")) << outcome.message.toStdString();
    EXPECT_EQ(steps.size(), 20);
    auto* model = s.window.monitorModel();
    ASSERT_EQ(model->steps().size(), 20u);
    EXPECT_EQ(model->status(), QStringLiteral("finished"));
    EXPECT_EQ(model->deviceCount(), 2);
    EXPECT_GT(model->predictedIterationMs(), 0);
    EXPECT_GT(model->measuredPeakBytes(1), 0);
    EXPECT_EQ(s.window.monitor()->plot()->lossPointCount(), 20);
    EXPECT_DOUBLE_EQ(s.window.monitor()->plot()->predictedLineMs(), model->predictedIterationMs());
    EXPECT_EQ(s.window.monitor()->progressBar()->value(), 1000);
    EXPECT_FALSE(s.window.windowTitle().startsWith(QStringLiteral("[")));

    // The run row is complete, its plan the stored current edit.
    EXPECT_EQ(storedStatus(path, outcome.runId), "finished");
    auto* runs = s.window.runsModel();
    ASSERT_EQ(runs->rowCount(), 1);
    const auto* row = runs->row(0);
    EXPECT_EQ(row->steps, 20);
    EXPECT_GT(row->planId, 0);
    EXPECT_DOUBLE_EQ(row->lastLoss, model->steps().back().loss);
    EXPECT_FALSE(row->endedAt.empty());

    // The finished run's measured iteration is drawn against the simulated one.
    const auto* comparison = s.window.compareView()->comparison();
    ASSERT_NE(comparison, nullptr);
    EXPECT_EQ(comparison->runId, outcome.runId);
    EXPECT_GT(s.window.compareView()->plot()->measuredBlocks(), 0);
    EXPECT_GT(s.window.compareView()->plot()->predictedBlocks(), 0);
    EXPECT_GT(s.window.compareView()->actionsTable()->rowCount(), 0);
    EXPECT_EQ(s.window.compareView()->peaksTable()->rowCount(), 2);
    EXPECT_GT(comparison->peaks[0].measuredBytes, 0);
    EXPECT_GT(comparison->peaks[0].predictedBytes, 0);
    // Beside the peak any timing can give, the one the simulated timing gives (no more than it).
    EXPECT_GT(comparison->peaks[0].predictedTimedBytes, 0);
    EXPECT_LE(comparison->peaks[0].predictedTimedBytes, comparison->peaks[0].predictedBytes);
    ASSERT_EQ(s.window.compareView()->peaksTable()->columnCount(), 5);
    EXPECT_FALSE(s.window.compareView()->peaksTable()->item(0, 2)->text().isEmpty());

    // Reopening the finished run shows the same curves with its prediction.
    s.window.monitorModel()->clear();
    ASSERT_TRUE(s.window.monitor()->openRun(outcome.runId));
    EXPECT_EQ(model->steps().size(), 20u);
    EXPECT_EQ(model->status(), QStringLiteral("finished"));
    EXPECT_GT(model->predictedIterationMs(), 0);
    EXPECT_EQ(model->predictedPeakBytes().size(), 2u);
}

TEST(RunLaunch, StopEndsTheRunWithinFiveSecondsWithACheckpoint)
{
    EndlessRun run(3);
    ASSERT_TRUE(run.launched);
    auto& s = run.studio;
    EXPECT_TRUE(s.window.monitor()->stopButton()->isEnabled());
    // The runs table follows the going run (re-read every few seconds), not only its start.
    ASSERT_GT(s.window.runsModel()->rowCount(), 0);
    QElapsedTimer seen;
    seen.start();
    while (s.window.runsModel()->row(0)->steps == 0 && seen.elapsed() < 15'000)
        QTest::qWait(50);
    EXPECT_GT(s.window.runsModel()->row(0)->steps, 0);
    EXPECT_EQ(s.window.runsModel()->row(0)->status, "running");
    EXPECT_TRUE(s.window.windowTitle().contains(QStringLiteral("step "))) << s.window.windowTitle().toStdString();
    s.window.resize(1600, 1000);
    saveScreenshot(s.window, QStringLiteral("monitor_live.png"));
    QElapsedTimer t;
    t.start();
    s.window.monitor()->stopButton()->click();
    const auto outcome = run.outcome();
    EXPECT_LT(t.elapsed(), 5000);
    EXPECT_EQ(outcome.status, QStringLiteral("interrupted")) << outcome.message.toStdString();
    EXPECT_EQ(storedStatus(run.path, outcome.runId), "interrupted");
    const auto checkpoint =
        ProjectStore::open(run.path.toStdString(), ProjectStore::Access::ReadOnly).latestCheckpoint();
    ASSERT_TRUE(checkpoint.has_value());
    EXPECT_EQ(checkpoint->runId, outcome.runId);
    EXPECT_EQ(checkpoint->step, outcome.lastStep);
}

TEST(RunLaunch, AChildKilledBySigkillIsStoredAsFailedAndTheGuiStaysResponsive)
{
    EndlessRun run(2);
    ASSERT_TRUE(run.launched);
    auto& s = run.studio;
    int ticks = 0;
    QTimer timer;
    QObject::connect(&timer, &QTimer::timeout, [&ticks] { ++ticks; });
    timer.start(10);
    ::kill(static_cast<pid_t>(run.launcher->processId()), SIGKILL); // as the OOM killer would
    const auto outcome = run.outcome();
    QTest::qWait(50);
    EXPECT_GT(ticks, 0); // the event loop kept running
    EXPECT_EQ(outcome.status, QStringLiteral("failed"));
    EXPECT_TRUE(outcome.message.contains(QStringLiteral("crashed"))) << outcome.message.toStdString();
    EXPECT_EQ(storedStatus(run.path, outcome.runId), "failed");
    EXPECT_EQ(s.window.monitorModel()->status(), QStringLiteral("failed"));
    s.window.runsModel()->reload();
    EXPECT_EQ(s.window.runsModel()->row(0)->status, "failed");
}

TEST(RunLaunch, KillFromTheMonitorStoresTheRunAsInterrupted)
{
    EndlessRun run(2);
    ASSERT_TRUE(run.launched);
    run.window.monitor()->killButton()->click();
    const auto outcome = run.outcome();
    EXPECT_EQ(outcome.status, QStringLiteral("interrupted"));
    EXPECT_EQ(storedStatus(run.path, outcome.runId), "interrupted");
}

TEST(RunLaunch, APlanPredictedOutOfMemoryIsRefusedNamingTheDeviceAndBytes)
{
    QTemporaryDir dir;
    const auto path = tinyProject(dir);
    Studio s(path);
    LaunchDialog dialog(s.window.planSession(), path);
    dialog.setDeviceMemoryBytes(1 << 20); // gpt2-tiny needs about 5 MiB per device
    EXPECT_FALSE(dialog.canLaunch());
    EXPECT_FALSE(dialog.launchButton()->isEnabled());
    const auto refusal = dialog.refusal();
    EXPECT_TRUE(refusal.contains(QStringLiteral("cpu:0"))) << refusal.toStdString();
    EXPECT_TRUE(refusal.contains(QStringLiteral("MiB more than its 1.00 MiB"))) << refusal.toStdString();
    EXPECT_FALSE(s.window.launch(dialog));
    dialog.resize(760, 640);
    saveScreenshot(dialog, QStringLiteral("launch_refused.png"));

    // Overridden, the child runs out of memory for real; the error reads as the engine wrote it.
    dialog.setOverride(true);
    ASSERT_TRUE(dialog.canLaunch());
    dialog.setSteps(5);
    QSignalSpy done(s.window.launcher(), &RunLauncher::finished);
    QSignalSpy logs(s.window.launcher(), &RunLauncher::logLine);
    ASSERT_TRUE(s.window.launch(dialog));
    const auto outcome = waitForOutcome(s.window.launcher(), done);
    EXPECT_EQ(outcome.status, QStringLiteral("failed"));
    // The child's {"error": ...} line: which device, stage and action ran out, for which node, by
    // how much ("cpu:0, stage 0, 0F0: out of memory on cpu:0: node 'embed_add' needs 0.12 MiB more, ...").
    const auto& m = outcome.message;
    EXPECT_TRUE(m.startsWith(QStringLiteral("Training failed (exit code 1): cpu:"))) << m.toStdString();
    for (const auto* part : { ", stage ", "out of memory on cpu:", ": node '", " MiB more" })
        EXPECT_TRUE(m.contains(QString::fromLatin1(part))) << part << " not in " << m.toStdString();
    bool logged = false;
    for (const auto& l : logs) {
        const auto line = l.front().toString();
        logged = logged || (line.startsWith(QStringLiteral("Training error: ")) && m.endsWith(line.mid(16)));
    }
    EXPECT_TRUE(logged);
    EXPECT_TRUE(s.window.monitor()->statusText().contains(QStringLiteral("no step measured yet")))
        << s.window.monitor()->statusText().toStdString();
    EXPECT_EQ(storedStatus(path, outcome.runId), "failed");
}

TEST(RunLaunch, ABadDataFileIsAReadableError)
{
    QTemporaryDir dir;
    const auto path = tinyProject(dir);
    Studio s(path);
    LaunchRequest r;
    r.project = path;
    r.steps = 3;
    r.dataFile = dir.filePath(QStringLiteral("missing.txt"));
    QSignalSpy done(s.window.launcher(), &RunLauncher::finished);
    ASSERT_TRUE(s.window.launcher()->start(r));
    const auto outcome = waitForOutcome(s.window.launcher(), done);
    EXPECT_EQ(outcome.status, QStringLiteral("failed"));
    EXPECT_TRUE(outcome.message.contains(QStringLiteral("missing.txt' cannot be read")))
        << outcome.message.toStdString();
}

TEST(RunLaunch, AMissingExecutableIsReportedNotFatal)
{
    RunLauncher launcher;
    launcher.setExecutable(QStringLiteral("/nonexistent/pipestudio"));
    QSignalSpy done(&launcher, &RunLauncher::finished);
    EXPECT_FALSE(launcher.start({}));
    ASSERT_EQ(done.size(), 1);
    EXPECT_TRUE(done.front().front().value<RunOutcome>().message.contains(QStringLiteral("pipestudio executable")));
}

TEST(RunHistory, ARunLeftRunningByADeadProcessShowsAsInterruptedOnOpen)
{
    QTemporaryDir dir;
    const auto path = tinyProject(dir);
    std::int64_t run = 0;
    {
        auto store = ProjectStore::open(path.toStdString());
        run = store.beginRun(R"({"steps":10})");
        store.appendRunMetrics(run, { { 1, 5.0, 1e7, 1000 } });
    }
    {
        sql::Database db(path.toStdString(), sql::Database::Mode::ReadWrite);
        db.exec("UPDATE runs SET boot_id = 'before-the-power-cut'");
    }
    MainWindow window;
    ASSERT_TRUE(window.openProject(path));
    ASSERT_EQ(window.runsModel()->rowCount(), 1);
    EXPECT_EQ(window.runsModel()->row(0)->status, "interrupted");
    EXPECT_EQ(window.runsModel()->markedInterrupted(), std::vector<std::int64_t> { run });
    EXPECT_EQ(storedStatus(path, run), "interrupted");
}
