// The event simulation of a parallel configuration (issue P17, deliverable 3): one pipeline replica
// through core/sim under each schedule, against the closed form where both hold (uniform stages),
// and the schedules' orders where they differ.
#include "report/megatron_rows.h"
#include "report/reproduction.h"
#include "scale/scale_sim.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>

using namespace ps;

namespace {
const GptShape kGpt39 { 48, 8192, 64, 2048, 51200 };
}

// Without a pipeline the simulation has nothing to add: one stage runs m micro-batches back to back.
TEST(ScaleSimulation, OneStageIsTheClosedForm)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    ScaleConfig c { 8, 1, 4, 1, 64 };
    const auto closed = estimateScale(kGpt39, c, dgx);
    const auto sim = simulateScale(kGpt39, c, dgx);
    ASSERT_TRUE(sim.valid) << sim.reason;
    EXPECT_NEAR(sim.iterationSeconds, closed.iterationSeconds, 1e-6 * closed.iterationSeconds);
    EXPECT_NEAR(sim.bubbleSeconds, 0.0, 1e-9);
    EXPECT_NEAR(sim.pipelineCommSeconds, 0.0, 1e-9);
    // The simulator's memory model and the closed form's bytes agree on one stage.
    EXPECT_NEAR(sim.peakBytes / closed.peakBytes, 1.0, 0.001);
}

// A pipeline of uniform middle stages: the 1F1B simulation stays within a few percent of the
// closed form, whose bubble is (p - 1) of a middle stage's micro-batch; the split sums to the time.
TEST(ScaleSimulation, OneFOneBAgreesWithTheClosedForm)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    for (int p : { 2, 4, 8 }) {
        ScaleConfig c { 8, p, 4, 1, 128 };
        const auto closed = estimateScale(kGpt39, c, dgx);
        const auto sim = simulateScale(kGpt39, c, dgx);
        ASSERT_TRUE(sim.valid) << sim.reason;
        EXPECT_NEAR(sim.iterationSeconds / closed.iterationSeconds, 1.0, 0.05) << c.text();
        EXPECT_GT(sim.bubbleSeconds, 0.0) << c.text();
        const double split = sim.computeSeconds + sim.tensorCommSeconds + sim.pipelineCommSeconds + sim.bubbleSeconds
            + sim.dataCommSeconds + sim.optimizerSeconds;
        EXPECT_NEAR(split, sim.iterationSeconds, 1e-6 * sim.iterationSeconds) << c.text();
    }
}

// The schedules in their known order at few micro-batches: interleaving and ZB-H1 shrink 1F1B's
// bubble; kFkB's groups keep it (its gain is overlapping sends, which NVSwitch does not need) and
// hold more micro-batches in flight.
TEST(ScaleSimulation, SchedulesOrderAsTheirBubblesSay)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    ScaleConfig base { 8, 4, 4, 1, 32 }; // m = 8 micro-batches over 4 stages
    auto interleaved = base;
    interleaved.chunks = 2;
    auto zb = base;
    zb.zeroBubble = true;
    auto kfkb = base;
    kfkb.group = 2;
    const auto t = [&](const ScaleConfig& c) {
        const auto e = simulateScale(kGpt39, c, dgx);
        EXPECT_TRUE(e.valid) << c.text() << ": " << e.reason;
        return e.iterationSeconds;
    };
    EXPECT_LT(t(interleaved), t(base));
    EXPECT_LT(t(zb), t(base));
    EXPECT_NEAR(t(kfkb) / t(base), 1.0, 0.01);
    // ZB-H1 holds 1F1B's micro-batches and its working set, and what a split B keeps for W.
    EXPECT_GE(
        simulateScale(kGpt39, zb, dgx).stagePeakBytes.front(), simulateScale(kGpt39, base, dgx).stagePeakBytes.front());
    EXPECT_GT(simulateScale(kGpt39, kfkb, dgx).peakBytes, simulateScale(kGpt39, base, dgx).peakBytes);
    EXPECT_EQ(zb.text(), "t8 p4 d4 b1 zb-h1 full");
    EXPECT_EQ(kfkb.text(), "t8 p4 d4 b1 kfkb:2 full");
    auto both = kfkb;
    both.zeroBubble = true;
    EXPECT_FALSE(simulateScale(kGpt39, both, dgx).valid);
    kfkb.group = 16; // more than the 8 micro-batches
    EXPECT_FALSE(simulateScale(kGpt39, kfkb, dgx).valid);
}

// Megatron-LM's Table 1 rows, simulated at the paper's configurations: every row within 15% of
// the measured TFLOP/s per GPU, as the closed form is.
TEST(ScaleSimulation, Table1RowsWithinFifteenPercent)
{
    const auto paper = nlohmann::json::parse(paperNumbersJson()).at("megatron");
    const auto& node = findNode(paper.at("node").get<std::string>());
    for (const auto& row : paper.at("table1")) {
        const auto g = detail::megatronModel(paper, row);
        const auto c = detail::megatronPaperConfig(row); // as NVIDIA's artifact scripts ran it
        const auto start = std::chrono::steady_clock::now();
        const auto e = simulateScale(g, c, node);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ASSERT_TRUE(e.valid) << e.reason;
        const double measured = row.at("tflops_per_gpu").get<double>();
        EXPECT_NEAR(e.tflopsPerGpu / measured, 1.0, 0.15) << c.text() << " simulated in " << seconds << " s";
        // Memory by the simulator's model: every row fits, each stage within 1% of the closed form's.
        EXPECT_TRUE(e.fits) << c.text() << ": " << e.reason;
        const auto closed = estimateScale(g, c, node);
        ASSERT_EQ(e.stagePeakBytes.size(), closed.stagePeakBytes.size());
        for (std::size_t i = 0; i < e.stagePeakBytes.size(); ++i)
            EXPECT_NEAR(e.stagePeakBytes[i] / closed.stagePeakBytes[i], 1.0, 0.01) << c.text() << " stage " << i;
    }
}

// A pipeline too long to simulate keeps the closed form's numbers, and says so.
TEST(ScaleSimulation, PipelinesBeyondTheLimitKeepTheClosedForm)
{
    const auto& dgx = findNode("dgx-a100-80gb");
    ScaleConfig c { 8, 8, 1, 1, 1 << 20 }; // m = 2^20 micro-batches
    const auto e = simulateScale(kGpt39, c, dgx);
    ASSERT_TRUE(e.valid) << e.reason;
    EXPECT_FALSE(e.simulated);
    EXPECT_DOUBLE_EQ(e.iterationSeconds, estimateScale(kGpt39, c, dgx).iterationSeconds);
    c.globalBatch = 64;
    EXPECT_TRUE(simulateScale(kGpt39, c, dgx).simulated);
}
