// BackgroundJob: one outcome per start on the GUI thread, exceptions as messages, cooperative
// cancel, safe destruction while running; and the GUI work that runs through it (auto-search,
// background project loading, closing the window mid-load).
#include "models/background_job.h"
#include "models/plan_session.h"
#include "models/project_session.h"
#include "models/search_results_model.h"
#include "store/project_store.h"
#include "views/auto_search_dialog.h"
#include "views/main_window.h"
#include "zoo/model_config.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

using namespace ps;
using namespace ps::gui;

namespace {

JobOutcome outcomeOf(const QSignalSpy& spy, int i = 0)
{
    return spy.at(i).front().value<JobOutcome>();
}

// Spins until cancelled (or 10 s, so a broken cancel fails the test instead of hanging it).
std::any untilCancelled(JobContext& job, std::atomic<bool>* exited = nullptr)
{
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!job.isCancelled() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (exited)
        exited->store(true);
    return job.isCancelled() ? 1 : 0;
}

} // namespace

TEST(BackgroundJob, DeliversTheValueOnceOnTheGuiThread)
{
    BackgroundJob job;
    std::atomic<QThread*> worker { nullptr };
    int deliveries = 0;
    QThread* deliveredOn = nullptr;
    QObject::connect(&job, &BackgroundJob::finished, [&](const JobOutcome&) {
        ++deliveries;
        deliveredOn = QThread::currentThread();
    });
    QSignalSpy spy(&job, &BackgroundJob::finished);
    ASSERT_TRUE(job.start([&worker](JobContext&) -> std::any {
        worker = QThread::currentThread();
        return 42;
    }));
    EXPECT_TRUE(job.isRunning());
    ASSERT_TRUE(spy.wait(5000));
    QTest::qWait(100); // nothing else arrives
    ASSERT_EQ(spy.size(), 1);
    EXPECT_EQ(deliveries, 1);
    EXPECT_EQ(deliveredOn, QApplication::instance()->thread());
    EXPECT_NE(worker.load(), QApplication::instance()->thread());
    const auto outcome = outcomeOf(spy);
    EXPECT_EQ(outcome.status, JobOutcome::Status::Finished);
    ASSERT_NE(outcome.valueAs<int>(), nullptr);
    EXPECT_EQ(*outcome.valueAs<int>(), 42);
    EXPECT_FALSE(job.isRunning());
}

TEST(BackgroundJob, ProgressArrivesBeforeTheOutcome)
{
    BackgroundJob job;
    QList<double> seen;
    bool finishedSeen = false;
    bool progressAfterFinish = false;
    QObject::connect(&job, &BackgroundJob::progress, [&](double f) {
        seen << f;
        progressAfterFinish = progressAfterFinish || finishedSeen;
    });
    QSignalSpy spy(&job, &BackgroundJob::finished);
    QObject::connect(&job, &BackgroundJob::finished, [&] { finishedSeen = true; });
    job.start([](JobContext& c) -> std::any {
        for (int i = 1; i <= 4; ++i)
            c.reportProgress(i / 4.0);
        return {};
    });
    ASSERT_TRUE(spy.wait(5000));
    EXPECT_EQ(seen, (QList<double> { 0.25, 0.5, 0.75, 1.0 }));
    EXPECT_FALSE(progressAfterFinish);
}

TEST(BackgroundJob, AnExceptionBecomesAnErrorMessage)
{
    BackgroundJob job;
    QSignalSpy spy(&job, &BackgroundJob::finished);
    job.start([](JobContext&) -> std::any { throw std::runtime_error("the disk is on fire"); });
    ASSERT_TRUE(spy.wait(5000));
    EXPECT_EQ(outcomeOf(spy).status, JobOutcome::Status::Failed);
    EXPECT_EQ(outcomeOf(spy).error, QStringLiteral("the disk is on fire"));
    EXPECT_FALSE(outcomeOf(spy).value.has_value());

    // Not a std::exception: still a message, and the job stays usable.
    job.start([](JobContext&) -> std::any { throw 7; });
    ASSERT_TRUE(spy.wait(5000));
    EXPECT_EQ(outcomeOf(spy, 1).status, JobOutcome::Status::Failed);
    EXPECT_TRUE(outcomeOf(spy, 1).error.contains(QStringLiteral("unknown error")));
    job.start([](JobContext&) -> std::any { return QStringLiteral("fine"); });
    ASSERT_TRUE(spy.wait(5000));
    EXPECT_EQ(outcomeOf(spy, 2).status, JobOutcome::Status::Finished);
}

TEST(BackgroundJob, CancelEndsTheWorkAsCancelled)
{
    BackgroundJob job;
    QSignalSpy spy(&job, &BackgroundJob::finished);
    std::atomic<bool> flagSeen { false };
    job.start([&flagSeen](JobContext& c) -> std::any {
        auto result = untilCancelled(c);
        // The flag is set by the token's stop callback, which runs just after the stop becomes
        // visible: it may lag the token by a moment, never by more.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!c.cancelFlag()->load() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        flagSeen = c.cancelFlag()->load();
        return result; // a partial result comes back with the Cancelled status
    });
    QTest::qWait(50);
    EXPECT_TRUE(job.isRunning());
    EXPECT_TRUE(spy.isEmpty());
    QElapsedTimer timer;
    timer.start();
    job.cancel();
    job.cancel(); // twice: still one outcome
    ASSERT_TRUE(spy.wait(5000));
    EXPECT_LT(timer.elapsed(), 2000);
    QTest::qWait(50);
    ASSERT_EQ(spy.size(), 1);
    EXPECT_EQ(outcomeOf(spy).status, JobOutcome::Status::Cancelled);
    ASSERT_NE(outcomeOf(spy).valueAs<int>(), nullptr);
    EXPECT_EQ(*outcomeOf(spy).valueAs<int>(), 1); // the work saw the cancel
    EXPECT_TRUE(flagSeen);

    // throwIfCancelled ends the work with no value.
    job.start([](JobContext& c) -> std::any {
        untilCancelled(c);
        c.throwIfCancelled();
        return 5;
    });
    job.cancel();
    ASSERT_TRUE(spy.wait(5000));
    EXPECT_EQ(outcomeOf(spy, 1).status, JobOutcome::Status::Cancelled);
    EXPECT_FALSE(outcomeOf(spy, 1).value.has_value());
}

TEST(BackgroundJob, StartIsRefusedWhileAJobRuns)
{
    BackgroundJob job;
    QSignalSpy spy(&job, &BackgroundJob::finished);
    ASSERT_TRUE(job.start([](JobContext& c) { return untilCancelled(c); }));
    EXPECT_FALSE(job.start([](JobContext&) -> std::any { return 2; }));
    job.cancel();
    ASSERT_TRUE(spy.wait(5000));
    QTest::qWait(50);
    EXPECT_EQ(spy.size(), 1);
}

TEST(BackgroundJob, DestroyingARunningJobCancelsAndJoins)
{
    std::atomic<bool> exited { false };
    int deliveries = 0;
    QObject receiver;
    {
        auto* job = new BackgroundJob;
        QObject::connect(job, &BackgroundJob::finished, &receiver, [&deliveries] { ++deliveries; });
        job->start([&exited](JobContext& c) { return untilCancelled(c, &exited); });
        QTest::qWait(20);
        QElapsedTimer timer;
        timer.start();
        delete job; // cancels, then waits for the worker
        EXPECT_LT(timer.elapsed(), 2000);
        EXPECT_TRUE(exited); // joined: the worker no longer runs
    }
    QTest::qWait(100);
    EXPECT_EQ(deliveries, 0); // nothing arrives from a destroyed job

    // A worker that already posted its outcome when the job dies: the outcome is dropped.
    auto* job = new BackgroundJob;
    QObject::connect(job, &BackgroundJob::finished, &receiver, [&deliveries] { ++deliveries; });
    job->start([](JobContext&) -> std::any { return 1; });
    QThread::msleep(100); // the worker has finished and posted, but no events were processed
    delete job;
    QTest::qWait(50);
    EXPECT_EQ(deliveries, 0);
}

TEST(AutoSearch, TheSearchErrorComesThroughTheBackgroundJob)
{
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-tiny")));
    AutoSearchDialog dialog(window.planSession());
    QSignalSpy outcomes(dialog.job(), &BackgroundJob::finished);
    QSignalSpy failed(&dialog, &AutoSearchDialog::searchFailed);
    dialog.setSearchFunction([](const Graph&, const Profile&, const SearchRequest&,
                                 const std::function<void(double)>& progress, const std::atomic<bool>*) {
        progress(0.5);
        throw std::out_of_range("vector::_M_range_check");
        return std::vector<Plan> {};
    });
    dialog.start(dialog.request());
    EXPECT_TRUE(dialog.isRunning());
    ASSERT_TRUE(outcomes.wait(30'000));
    const auto outcome = outcomeOf(outcomes);
    EXPECT_EQ(outcome.status, JobOutcome::Status::Failed);
    EXPECT_EQ(outcome.error, QStringLiteral("vector::_M_range_check"));
    ASSERT_EQ(failed.size(), 1);
    EXPECT_EQ(failed.front().front().toString(), outcome.error);
    EXPECT_EQ(dialog.lastError(), outcome.error);
}

TEST(AutoSearch, ClosingTheDialogMidSearchIsSafe)
{
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-medium")));
    auto* dialog = new AutoSearchDialog(window.planSession());
    auto request = dialog->request();
    request.schedules.clear();
    for (int k = 1; k <= 4; ++k)
        request.schedules.push_back({ ScheduleKind::KFKB, 4, 8, k, 1 });
    request.algorithms = allPlanAlgorithms();
    dialog->start(request);
    ASSERT_TRUE(dialog->isRunning());
    QTest::qWait(20);
    delete dialog; // the job cancels and joins; no search result reaches a dead dialog
    QTest::qWait(50);
    SUCCEED();
}

TEST(BackgroundLoad, OpeningAProjectRunsOffTheGuiThreadAndAdoptsItOnIt)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(zooPreset("gpt2-tiny")), true);
    MainWindow window;
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    QSignalSpy changed(window.session(), &ProjectSession::projectChanged);
    ASSERT_TRUE(window.openProjectInBackground(path));
    EXPECT_TRUE(window.isLoading());
    EXPECT_FALSE(window.openProjectInBackground(path)); // one load at a time
    EXPECT_FALSE(window.session()->hasProject()); // nothing adopted before the outcome
    ASSERT_TRUE(loaded.wait(20'000));
    EXPECT_TRUE(loaded.front().front().toBool());
    EXPECT_EQ(changed.size(), 1);
    EXPECT_EQ(window.session()->filePath(), path);
    EXPECT_FALSE(window.session()->isModified());
    EXPECT_TRUE(window.planSession()->hasPlan());
    EXPECT_FALSE(window.isLoading());
    EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("Opened")));
}

TEST(BackgroundLoad, ABadFileIsShownAndTheCurrentProjectStays)
{
    QTemporaryDir dir;
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-tiny")));
    const auto graph = window.session()->graph();
    const auto bad = dir.filePath(QStringLiteral("bad.pstudio"));
    QFile f(bad);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("garbage");
    f.close();
    QSignalSpy loaded(&window, &MainWindow::loadFinished);
    ASSERT_TRUE(window.openProjectInBackground(bad));
    ASSERT_TRUE(loaded.wait(20'000));
    EXPECT_FALSE(loaded.front().front().toBool());
    EXPECT_EQ(window.session()->graph(), graph);
    EXPECT_TRUE(window.statusBar()->currentMessage().contains(QStringLiteral("not a PipeStudio project")));

    // An unknown zoo model given at start-up is an error message too.
    ASSERT_TRUE(window.openOnStart(QString(), QStringLiteral("no-such-model")));
    ASSERT_TRUE(loaded.wait(20'000));
    EXPECT_FALSE(loaded.at(1).front().toBool());
    EXPECT_EQ(window.session()->graph(), graph);
}

TEST(BackgroundLoad, ClosingTheWindowMidLoadIsSafe)
{
    QTemporaryDir dir;
    const auto path = dir.filePath(QStringLiteral("p.pstudio"));
    writeNewProject(path.toStdString(), buildZooModel(zooPreset("gpt2-medium")), true);
    for (int delayMs : { 0, 5, 30 }) {
        auto* window = new MainWindow;
        ASSERT_TRUE(window->openProjectInBackground(path));
        QTest::qWait(delayMs);
        delete window;
    }
    QTest::qWait(50);
    SUCCEED();
}

// Plans show in the results table as the search finds them, ranked, before it finishes; the final
// ranked list then replaces them.
TEST(AutoSearch, ResultsStreamInBeforeTheSearchFinishes)
{
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-tiny")));
    AutoSearchDialog dialog(window.planSession());
    QSignalSpy finished(&dialog, &AutoSearchDialog::searchFinished);
    auto release = std::make_shared<std::atomic<bool>>(false);
    dialog.setSearchFunction([release](const Graph&, const Profile&, const SearchRequest& r,
                                 const std::function<void(double)>&, const std::atomic<bool>*) {
        Plan slow;
        slow.algorithm = "slow";
        slow.feasible = true;
        slow.simulation = PlanSimulation { 2e6, 10, 0, 0, false };
        Plan fast = slow;
        fast.algorithm = "fast";
        fast.simulation = PlanSimulation { 1e6, 20, 0, 0, false };
        Plan none;
        none.algorithm = "none";
        none.reason = "does not fit";
        r.onPlan(slow);
        r.onPlan(none);
        r.onPlan(fast);
        for (int i = 0; i < 3000 && !release->load(); ++i) // until the test has seen them
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        return std::vector<Plan> { fast }; // the ranked list the search returns replaces the streamed rows
    });
    dialog.start(dialog.request());
    EXPECT_TRUE(QTest::qWaitFor([&] { return dialog.results()->rowCount() == 3; }, 10'000));
    EXPECT_TRUE(dialog.isRunning());
    const auto* model = dialog.results();
    EXPECT_EQ(model->data(model->index(0, SearchResultsModel::AlgorithmColumn)).toString(), QStringLiteral("fast"));
    EXPECT_EQ(model->data(model->index(1, SearchResultsModel::AlgorithmColumn)).toString(), QStringLiteral("slow"));
    EXPECT_EQ(model->data(model->index(2, SearchResultsModel::AlgorithmColumn)).toString(), QStringLiteral("none"));
    dialog.resize(900, 520);
    QDir().mkpath(QStringLiteral(PS_SCREENSHOT_DIR));
    EXPECT_TRUE(dialog.grab().save(QStringLiteral(PS_SCREENSHOT_DIR "/auto-search-streaming.png")));
    release->store(true);
    ASSERT_TRUE(finished.wait(30'000));
    EXPECT_EQ(dialog.results()->rowCount(), 1);
}

// The auto-search plans on the Cluster dock's nodes and links: its request carries the session's
// devices per node and inter-node bandwidth, with devices for every stage of its schedules.
TEST(AutoSearch, PlansOnTheClusterDocksNodesAndLinks)
{
    MainWindow window;
    ASSERT_TRUE(window.session()->newFromZoo(zooPreset("gpt2-tiny")));
    auto setup = window.planSession()->setup();
    setup.devicesPerNode = 1;
    setup.interNodeGBps = 1.25; // 10 Gb/s between machines
    ASSERT_TRUE(window.planSession()->configure(setup));
    AutoSearchDialog dialog(window.planSession());
    const auto request = dialog.request();
    ASSERT_TRUE(request.cluster.has_value());
    EXPECT_EQ(request.cluster->devicesPerNode, 1);
    EXPECT_DOUBLE_EQ(request.cluster->interNode.bandwidth, 1.25e9);
    EXPECT_EQ(request.cluster->device.id, request.device.id);
    for (const auto& spec : request.schedules)
        EXPECT_GE(request.cluster->deviceCount(), spec.devices());
}
