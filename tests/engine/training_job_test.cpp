// engine::TrainingJob (what `pipestudio train` runs) and engine::compareRun (what `compare` and
// the Predicted vs measured view show), called as a front end other than the CLI would.
#include "pipeline_support.h"
#include "runtime/run_comparison.h"
#include "runtime/training_job.h"
#include "store/project_store.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <unistd.h>

namespace ps::engine {
namespace {

    class TrainingJobTest : public ::testing::Test
    {
    protected:
        void SetUp() override
        {
            m_path = std::filesystem::temp_directory_path()
                / ("ps-job-" + std::to_string(::getpid()) + "-"
                    + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".pstudio");
            writeNewProject(m_path, testing::tinyGpt(), true);
        }
        void TearDown() override
        {
            std::filesystem::remove(m_path);
        }

        static TrainingJobOptions twoDevices(std::int64_t steps)
        {
            TrainingJobOptions o;
            o.devices = "cpu:2";
            o.microBatches = 4;
            o.steps = steps;
            o.data.format = "random";
            o.seed = 5;
            o.traceIterations = 2;
            o.traceEvery = 0;
            return o;
        }

        std::filesystem::path m_path;
    };

} // namespace

// Every step is stored before the caller sees it; the first N keep their timeline; the run ends
// "finished" with a checkpoint at its last step; its recorded options say what ran.
TEST_F(TrainingJobTest, StepsAreStoredBeforeTheyAreReportedAndTheRunEndsWithACheckpoint)
{
    auto store = ProjectStore::open(m_path);
    TrainingJob job(store, twoDevices(3));
    EXPECT_EQ(job.config()["stages"], 2);
    EXPECT_EQ(job.config()["micro_batches"], 4);
    EXPECT_EQ(job.config()["schedule"], "1f1b");
    EXPECT_FALSE(job.config()["cuts"].get<std::string>().empty()) << "cuts planned for the two devices";
    EXPECT_NE(job.scheduleLine().find("2 stage(s) on 2 device(s)"), std::string::npos) << job.scheduleLine();
    std::vector<std::int64_t> seen;
    const auto outcome = job.runSteps([&](const RunStepResult& r) {
        EXPECT_EQ(store.loadRunMetrics(job.runId()).size(), seen.size() + 1) << "stored before reported";
        seen.push_back(r.step);
    });
    EXPECT_EQ(seen, (std::vector<std::int64_t> { 1, 2, 3 }));
    EXPECT_EQ(outcome.step, 3);
    EXPECT_FALSE(outcome.interrupted);
    EXPECT_TRUE(std::isfinite(outcome.loss));
    EXPECT_EQ(store.runEventIterations(job.runId()), (std::vector<std::int64_t> { 1, 2 }));
    const auto checkpoint = store.latestCheckpoint();
    ASSERT_TRUE(checkpoint.has_value());
    EXPECT_EQ(checkpoint->step, 3);
    EXPECT_EQ(store.loadRuns().back().status, "finished");
}

// A stop request ends the run after the step under way, as "interrupted", with a checkpoint that a
// resumed job continues from (the same learning-rate schedule, the optimizer's state).
TEST_F(TrainingJobTest, AStoppedRunResumesFromItsCheckpoint)
{
    auto store = ProjectStore::open(m_path);
    {
        TrainingJob job(store, twoDevices(10));
        std::atomic<bool> stop { false };
        const auto outcome = job.runSteps([&](const RunStepResult& r) { stop = r.step == 2; }, {}, &stop);
        EXPECT_TRUE(outcome.interrupted);
        EXPECT_EQ(outcome.step, 2);
        EXPECT_EQ(store.loadRuns().back().status, "interrupted");
    }
    auto options = twoDevices(2);
    options.resume = true;
    TrainingJob resumed(store, options);
    EXPECT_EQ(resumed.resumedStep(), 2);
    EXPECT_TRUE(resumed.resumedMoments());
    EXPECT_EQ(resumed.config()["resumed_from_step"], 2);
    std::vector<std::int64_t> steps;
    resumed.runSteps([&](const RunStepResult& r) { steps.push_back(r.step); });
    EXPECT_EQ(steps, (std::vector<std::int64_t> { 3, 4 }));
}

// What cannot start is refused before a run is recorded: an unknown plan, nothing to resume.
TEST_F(TrainingJobTest, WhatCannotStartRecordsNoRun)
{
    auto store = ProjectStore::open(m_path);
    auto options = twoDevices(1);
    options.plan = "best";
    EXPECT_THROW(TrainingJob(store, options), Error);
    options.plan.clear();
    options.resume = true;
    try {
        TrainingJob job(store, options);
        ADD_FAILURE() << "resumed without a checkpoint";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("no checkpoint"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(store.loadRuns().empty());
}

// compareRun: a finished run's median step, each device's measured peak and its parts, and one
// stored iteration's actions against the prediction; the profile asked for must be stored.
TEST_F(TrainingJobTest, AFinishedRunIsComparedWithItsPrediction)
{
    std::int64_t runId = 0;
    {
        auto store = ProjectStore::open(m_path);
        TrainingJob job(store, twoDevices(4));
        job.runSteps({});
        runId = job.runId();
    }
    const auto store = ProjectStore::open(m_path, ProjectStore::Access::ReadOnly);
    const auto c = compareRun(store, runId);
    EXPECT_EQ(c.schedule, "1f1b");
    EXPECT_EQ(c.iterations, (std::vector<std::int64_t> { 1, 2 }));
    EXPECT_EQ(c.iteration, 2);
    EXPECT_GT(c.measuredStepNs, 0);
    EXPECT_GT(c.measuredIterationNs, 0);
    EXPECT_GT(c.predicted.iterationNs, 0);
    EXPECT_EQ(c.profileSource, "analytical");
    ASSERT_EQ(c.peaks.size(), 2U);
    ASSERT_EQ(c.deviceNames.size(), 2U);
    for (const auto& p : c.peaks) {
        EXPECT_GT(p.measuredBytes, 0);
        // The model's peak within 10% of the allocator's: the memory model is tested to 5% elsewhere.
        EXPECT_NEAR(p.predictedBytes / static_cast<double>(p.measuredBytes), 1.0, 0.1) << "device " << p.device;
        ASSERT_EQ(p.byUse.size(), 6U);
        EXPECT_EQ(p.byUse[0].use, "parameters");
        EXPECT_GT(p.byUse[0].measuredBytes, 0);
    }
    EXPECT_FALSE(c.largestDifferences.empty());
    double first = 1e300;
    for (const auto& e : c.measured)
        first = std::min(first, e.startNs);
    EXPECT_EQ(first, 0) << "the measured iteration starts at its first action";
    EXPECT_EQ(compareRun(store, runId, { 1, {}, true, true }).iteration, 1);
    EXPECT_THROW((void)compareRun(store, runId, { 7, {}, true, true }), Error);
    try {
        (void)compareRun(store, runId, { 0, "measured", true, true });
        ADD_FAILURE() << "compared with a profile the project does not store";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("pipestudio profile"), std::string::npos) << e.what();
    }
    // The studio's view is not strict: the analytical estimate stands in, and says so.
    const auto lenient = compareRun(store, runId, { 0, "measured", true, false });
    EXPECT_EQ(lenient.profileSource, "analytical");
    EXPECT_NE(c.profileExplained.find("no measured profile: run `pipestudio profile`"), std::string::npos)
        << c.profileExplained;
}

} // namespace ps::engine
