#include "schedule/schedule_validate.h"
#include "sim/simulator.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

using namespace ps;

namespace {

constexpr double kNsPerMs = 1e6; // ns per ms

// A cluster whose links move `bytesPerMs` bytes per millisecond and have no latency.
Cluster testCluster(int devices, double bytesPerMs = 1e9)
{
    DeviceSpec d;
    d.id = "test-gpu";
    d.memoryBytes = 1LL << 40;
    d.flopsFp32 = 1e12;
    d.memoryBandwidth = 1e12;
    d.hostLink = { "pcie", bytesPerMs * 1e3, 0 };
    d.peerLink = { "link", bytesPerMs * 1e3, 0 };
    return makeCluster(d, devices, 8);
}

std::vector<StageCost> equalStages(int S, double fMs, double bMs, double sendBytes = 0, double actBytes = 100)
{
    std::vector<StageCost> stages(static_cast<std::size_t>(S));
    for (auto& s : stages) {
        s.forwardNs = fMs * kNsPerMs;
        s.backwardNs = bMs * kNsPerMs;
        s.weightGradNs = bMs * kNsPerMs / 2;
        s.activationBytes = actBytes;
        s.sendForwardBytes = sendBytes;
        s.sendBackwardBytes = sendBytes;
    }
    return stages;
}

SimulationResult run(
    const ScheduleSpec& spec, const std::vector<StageCost>& stages, const Cluster& cluster, bool communication = true)
{
    const auto schedule = generateSchedule(spec);
    SimulationInput in { schedule, stages, cluster, {}, 1.0, {}, { false, communication } };
    return simulate(in);
}

using Spans = std::vector<std::pair<double, double>>;

// Start and end (ms) of the device's compute actions, optimizer steps left out.
Spans computeTimes(const SimulationResult& r, std::uint32_t device)
{
    Spans out;
    for (const auto& e : r.events) {
        if (e.device.value == device && e.stream == Stream::Compute && e.action != ActionType::OptimizerStep)
            out.emplace_back(e.startNs / kNsPerMs, e.endNs / kNsPerMs);
    }
    return out;
}

void expectSpans(const Spans& actual, const Spans& expected)
{
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t i = 0; i < actual.size(); ++i) {
        EXPECT_NEAR(actual[i].first, expected[i].first, 1e-9) << "action " << i;
        EXPECT_NEAR(actual[i].second, expected[i].second, 1e-9) << "action " << i;
    }
}

} // namespace

TEST(Simulator, BubbleFractionIsExactForGPipeAndOneFOneB)
{
    for (auto kind : { ScheduleKind::GPipe, ScheduleKind::OneFOneB }) {
        for (int S : { 1, 2, 3, 4, 8 }) {
            for (int M : { 1, 2, 4, 7, 16, 32 }) {
                const auto r = run({ kind, S, M, 1, 1 }, equalStages(S, 1.0, 2.0), testCluster(S), false);
                const double expected = static_cast<double>(S - 1) / (M + S - 1);
                EXPECT_NEAR(r.bubbleFraction, expected, 1e-12) << "S=" << S << " M=" << M;
                EXPECT_NEAR(r.iterationNs, (M + S - 1) * 3.0 * kNsPerMs, 1e-6);
            }
        }
    }
}

TEST(Simulator, HandWorkedOneFOneBTwoStages)
{
    // S = 2, M = 2, F = 1 ms, B = 2 ms, free communication. Worked by hand:
    // device 0: F0 [0,1] F1 [1,2] B0 [4,6] B1 [7,9]; device 1: F0 [1,2] B0 [2,4] F1 [4,5] B1 [5,7].
    const auto r = run({ ScheduleKind::OneFOneB, 2, 2, 1, 1 }, equalStages(2, 1, 2), testCluster(2), false);
    expectSpans(computeTimes(r, 0), { { 0, 1 }, { 1, 2 }, { 4, 6 }, { 7, 9 } });
    expectSpans(computeTimes(r, 1), { { 1, 2 }, { 2, 4 }, { 4, 5 }, { 5, 7 } });
    EXPECT_NEAR(r.iterationNs, 9 * kNsPerMs, 1e-3);
}

TEST(Simulator, SlowTransfersMakeTwoFTwoBFasterThanOneFOneB)
{
    // S = 2, M = 4, F = 1 ms, B = 2 ms, every transfer 1 ms on a FIFO link. Worked by hand:
    // 1F1B  device 0: F0 [0,1] F1 [1,2] B0 [6,8] F2 [8,9] B1 [9,11] F3 [11,12] B2 [14,16] B3 [17,19]
    // 2F2B  device 0: F0..F3 [0,4] B0 [7,9] B1 [9,11] B2 [13,15] B3 [15,17]
    // (2F2B's second forward overlaps the first one's transfer, Ada-Grouper Fig. 2.)
    const auto cluster = testCluster(2, 1000); // 1000 bytes per ms
    const auto stages = equalStages(2, 1, 2, 1000); // 1000 bytes per transfer: 1 ms
    const auto one = run({ ScheduleKind::OneFOneB, 2, 4, 1, 1 }, stages, cluster);
    const auto two = run({ ScheduleKind::KFKB, 2, 4, 2, 1 }, stages, cluster);
    expectSpans(computeTimes(one, 0),
        { { 0, 1 }, { 1, 2 }, { 6, 8 }, { 8, 9 }, { 9, 11 }, { 11, 12 }, { 14, 16 }, { 17, 19 } });
    expectSpans(
        computeTimes(two, 0), { { 0, 1 }, { 1, 2 }, { 2, 3 }, { 3, 4 }, { 7, 9 }, { 9, 11 }, { 13, 15 }, { 15, 17 } });
    EXPECT_NEAR(one.iterationNs, 19 * kNsPerMs, 1e-3);
    EXPECT_NEAR(two.iterationNs, 17 * kNsPerMs, 1e-3);
    // Without transfer time both take (M + S - 1)(F + B) = 15 ms.
    EXPECT_NEAR(run({ ScheduleKind::OneFOneB, 2, 4, 1, 1 }, stages, cluster, false).iterationNs, 15 * kNsPerMs, 1e-3);
    EXPECT_NEAR(run({ ScheduleKind::KFKB, 2, 4, 2, 1 }, stages, cluster, false).iterationNs, 15 * kNsPerMs, 1e-3);
}

TEST(Simulator, PeakMemoryFollowsInFlightMicroBatches)
{
    const int S = 4;
    const int M = 8;
    for (const auto& spec : { ScheduleSpec { ScheduleKind::GPipe, S, M, 1, 1 },
             ScheduleSpec { ScheduleKind::OneFOneB, S, M, 1, 1 }, ScheduleSpec { ScheduleKind::KFKB, S, M, 2, 1 } }) {
        const auto r = run(spec, equalStages(S, 1, 2, 0, 1000), testCluster(S), false);
        for (int s = 0; s < S; ++s) {
            const auto& d = r.devices[static_cast<std::size_t>(s)];
            EXPECT_EQ(d.memory.peakInFlight, inFlightMicroBatches(spec, s)) << scheduleName(spec) << " stage " << s;
            EXPECT_DOUBLE_EQ(d.peakBytes, 1000.0 * inFlightMicroBatches(spec, s))
                << scheduleName(spec) << " stage " << s;
        }
    }
}

TEST(Simulator, FlagsOutOfMemoryPerDevice)
{
    auto cluster = testCluster(2);
    cluster.device.memoryBytes = 1500;
    const auto r = run({ ScheduleKind::OneFOneB, 2, 4, 1, 1 }, equalStages(2, 1, 2, 0, 1000), cluster, false);
    EXPECT_TRUE(r.devices[0].outOfMemory); // two micro-batches in flight: 2000 bytes
    EXPECT_FALSE(r.devices[1].outOfMemory); // one: 1000 bytes
    EXPECT_TRUE(r.anyOutOfMemory);
}

TEST(Simulator, ZeroBubbleFillsTheCoolDown)
{
    // F = 1, B = 1 (input) + 1 (weight): 1F1B takes 3M + 3(S-1); ZB-H1's bubble is (S-1)(F+B-W),
    // a third of it (Qi et al. 2023, §3.1), so 3M + (S-1).
    for (int S : { 2, 4, 8 }) {
        for (int M : { 8, 16 }) {
            const auto stages = equalStages(S, 1, 2);
            const auto f1b = run({ ScheduleKind::OneFOneB, S, M, 1, 1 }, stages, testCluster(S), false);
            const auto zb = run({ ScheduleKind::ZeroBubbleH1, S, M, 1, 1 }, stages, testCluster(S), false);
            EXPECT_NEAR(f1b.iterationNs, (3 * M + 3 * (S - 1)) * kNsPerMs, 1e-3);
            EXPECT_NEAR(zb.iterationNs, (3 * M + (S - 1)) * kNsPerMs, 1e-3) << "S=" << S << " M=" << M;
        }
    }
}

TEST(Simulator, PipeDreamSteadyStateHasNoFlush)
{
    const auto stages = equalStages(4, 1, 2);
    const auto f1b = run({ ScheduleKind::OneFOneB, 4, 16, 1, 1 }, stages, testCluster(4), false);
    const auto async = run({ ScheduleKind::PipeDream, 4, 16, 1, 1 }, stages, testCluster(4), false);
    EXPECT_NEAR(async.steadyIterationNs, 16 * 3 * kNsPerMs, 1e-6); // one F + B per micro-batch, no bubble
    EXPECT_GT(async.samplesPerSecond, f1b.samplesPerSecond);
}

TEST(Simulator, AsyncSteadyStateIsNoFasterThanTheBusiestDevice)
{
    // Fewer micro-batches than stages: stage 0's backwards arrive in one burst after the fill, but
    // every device still runs one F + B per micro-batch in the steady state.
    const auto stages = equalStages(8, 1, 2);
    const auto async = run({ ScheduleKind::PipeDream, 8, 2, 1, 1 }, stages, testCluster(8), false);
    EXPECT_GE(async.steadyIterationNs, 2 * 3 * kNsPerMs - 1e-6);
    EXPECT_LE(async.samplesPerSecond, 1e9 / (3 * kNsPerMs) + 1e-6);
}

TEST(Simulator, BandwidthTraceSlowsTransfers)
{
    auto cluster = testCluster(2, 1000);
    const auto stages = equalStages(2, 1, 2, 1000);
    const auto base = run({ ScheduleKind::OneFOneB, 2, 1, 1, 1 }, stages, cluster);
    cluster.intraTrace = BandwidthTrace { { { 0.0, 0.5 } }, 0 };
    const auto slow = run({ ScheduleKind::OneFOneB, 2, 1, 1, 1 }, stages, cluster);
    EXPECT_NEAR(slow.iterationNs - base.iterationNs, 2 * kNsPerMs, 1e-3); // two 1 ms transfers take 2 ms each

    const BandwidthTrace preempted { { { 0.0, 1.0 }, { 1.0, 0.0 }, { 2.0, 1.0 } }, 0 };
    EXPECT_DOUBLE_EQ(preempted.transferEnd(0.5, 1000, 1000), 2.5); // 0.5 s moved, 1 s stalled, 0.5 s more
    const BandwidthTrace dead { { { 0.0, 1.0 }, { 1.0, 0.0 } }, 0 };
    EXPECT_THROW((void)dead.transferEnd(0.5, 1000, 1000), Error);
}

TEST(Simulator, PeriodicTraceTransfersFinishFarIntoTheTrace)
{
    // Thousands of periods in, t - floor(t / P) * P rounds; a transfer must still walk forward.
    const double period = 0.137;
    const BandwidthTrace preempted { { { 0.0, 1.0 }, { period / 2, 0.1 } }, period };
    for (double periods : { 0.0, 977.0, 12345.0, 3.0e6 }) {
        const double start = periods * period;
        // 0.55 of the bandwidth on average: three periods' worth of bytes take three periods.
        const double end = preempted.transferEnd(start, 1000 * 0.55 * 3 * period, 1000);
        EXPECT_NEAR(end - start, 3 * period, 1e-6 * std::max(1.0, start)) << periods;
    }
}

TEST(Simulator, BadInputIsRejectedNotHung)
{
    auto cluster = testCluster(2);
    cluster.intraNode.bandwidth = 0;
    EXPECT_THROW(cluster.check(), Error);
    EXPECT_THROW((void)run({ ScheduleKind::OneFOneB, 2, 2, 1, 1 }, equalStages(2, 1, 2), cluster), Error);
    EXPECT_THROW((void)run({ ScheduleKind::OneFOneB, 4, 2, 1, 1 }, equalStages(4, 1, 2), testCluster(2)), Error);
}

TEST(Simulator, ChromeTraceHasOneEventPerComputeAction)
{
    const auto r = run({ ScheduleKind::OneFOneB, 2, 3, 1, 1 }, equalStages(2, 1, 2, 1000), testCluster(2, 1000));
    const auto trace = nlohmann::json::parse(toChromeTrace(r));
    int compute = 0;
    for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] == "X" && e["cat"] == "compute")
            ++compute;
    }
    EXPECT_EQ(compute, 2 * 3 * 2 + 2); // F and B per stage and micro-batch, one optimizer step per device
    const auto summary = nlohmann::json::parse(simulationSummaryJson(r));
    EXPECT_EQ(summary["schedule"], "1f1b");
    EXPECT_EQ(summary["devices"].size(), 2U);
}

TEST(Simulator, SwapAndRecomputeTradeTimeForMemory)
{
    const int S = 2;
    const int M = 4;
    auto stages = equalStages(S, 1, 2, 0, 1000);
    const auto cluster = testCluster(S, 1000); // host link: 1000 bytes per ms
    const auto base = run({ ScheduleKind::OneFOneB, S, M, 1, 1 }, stages, cluster, false);
    const auto schedule = generateSchedule({ ScheduleKind::OneFOneB, S, M, 1, 1 });

    // Recompute 600 of stage 0's 1000 bytes at 0.5 ms each time: peak drops, time grows.
    SimulationInput recompute { schedule, stages, cluster, {}, 1.0, { { 0, 600, 0.5 * kNsPerMs, {}, {} }, {} },
        { false, false } };
    const auto r = simulate(recompute);
    EXPECT_LT(r.devices[0].peakBytes, base.devices[0].peakBytes);
    EXPECT_GT(r.iterationNs, base.iterationNs);
    EXPECT_NEAR(r.devices[0].busyNs - base.devices[0].busyNs, M * 0.5 * kNsPerMs, 1e-3);
    EXPECT_NEAR(r.devices[0].memoryCurve.back().bytes, 0, 1e-9); // every byte freed at the end

    // Swap 500 of stage 0's 1000 bytes (0.5 ms each way) with four micro-batches in flight: at the
    // peak three of them are half on the host, 3 x 500 + 1000 + the prefetched 500 = 3000 < 4000.
    const auto deep = generateSchedule({ ScheduleKind::OneFOneB, 4, 8, 1, 1 });
    const auto deepStages = equalStages(4, 1, 2, 0, 1000);
    const std::vector<StageMemoryPlan> plans { { 500, 0, 0, {}, {} }, {}, {}, {} };
    SimulationInput swap { deep, deepStages, testCluster(4, 1000), {}, 1.0, plans, { false, false } };
    const auto w = simulate(swap);
    EXPECT_NEAR(w.devices[0].peakBytes, 3000, 1e-9);
    EXPECT_NEAR(w.devices[0].memoryCurve.back().bytes, 0, 1e-9);
    int copies = 0;
    for (const auto& e : w.events)
        copies += e.stream == Stream::CopyToHost || e.stream == Stream::CopyFromHost ? 1 : 0;
    EXPECT_EQ(copies, 2 * 8);
    const auto problems = validateSchedule(withMemoryActions(withCommunication(deep), plans));
    EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST(Simulator, OptimizerStepTakesTheProfilesMeasuredRateElseMemoryBandwidth)
{
    auto stages = equalStages(2, 1, 2);
    stages[0].parameterCount = 1000;
    stages[1].parameterCount = 3000;
    const auto schedule = generateSchedule(parseScheduleSpec("1f1b", 2, 2));
    const auto cluster = testCluster(2);
    TrainingSetup setup;
    const auto optimizerNs = [&](const SimulationResult& r, std::uint32_t device) {
        for (const auto& e : r.events) {
            if (e.device.value == device && e.action == ActionType::OptimizerStep)
                return e.endNs - e.startNs;
        }
        return -1.0;
    };
    const auto modelled = simulate({ schedule, stages, cluster, setup, 1.0, {}, { true, true } });
    // Adam in fp32 touches 16 B per parameter, read and written, at 70% of the device's bandwidth.
    EXPECT_NEAR(optimizerNs(modelled, 1), 1e9 * 2 * 3000 * 16 / (1e12 * 0.7), 1e-6);
    setup.optimizerNsPerParameter = 5;
    const auto measured = simulate({ schedule, stages, cluster, setup, 1.0, {}, { true, true } });
    EXPECT_DOUBLE_EQ(optimizerNs(measured, 0), 5000);
    EXPECT_DOUBLE_EQ(optimizerNs(measured, 1), 15000);
}

// A weight held by both stages. A CPU device (memory the host's) does what the runtime does
// (engine/runtime/tied_gradients.h): once its backwards are done it copies its gradient within
// memory, then adds the other's copy to its own. A GPU exchanges it over the link between the
// holders (to the sum and back), as an NCCL all-reduce would, and does no host copies.
TEST(Simulator, TiedGradientsAreCopiedOutAndSummedOnEachDevice)
{
    auto stages = equalStages(2, 1, 2);
    const double G = 1e8;
    for (auto& s : stages)
        s.tiedParameters = { { 7, G } };
    const auto schedule = generateSchedule(parseScheduleSpec("1f1b", 2, 2));
    // Device d's OPT_STEP: (its end, its length) in ms; it starts when d's last backward ends.
    const auto optimizerStep = [&](const Cluster& cluster, std::uint32_t device) {
        const auto r = simulate({ schedule, stages, cluster, {}, 1.0, {}, { true, true } });
        double lastCompute = 0;
        for (const auto& e : r.events) {
            if (e.device.value == device && e.stream == Stream::Compute && e.action != ActionType::OptimizerStep)
                lastCompute = std::max(lastCompute, e.endNs);
        }
        for (const auto& e : r.events) {
            if (e.device.value == device && e.action == ActionType::OptimizerStep) {
                EXPECT_DOUBLE_EQ(e.startNs, lastCompute);
                return std::pair { e.endNs / kNsPerMs, (e.endNs - e.startNs) / kNsPerMs };
            }
        }
        return std::pair { -1.0, -1.0 };
    };
    auto gpu = testCluster(2);
    gpu.device.hostLink = { "pcie", 1e10, 0 };
    gpu.intraNode = { "link", 1e11, 0 };
    // Device 0 finishes its backwards last and waits for nothing (no host copies, no adds); device
    // 1 ends when device 0's gradient has reached the sum and come back: 2 G over 1e11 B/s, 2 ms.
    const auto [gpuEnd0, gpuLength0] = optimizerStep(gpu, 0);
    EXPECT_NEAR(gpuLength0, 0, 1e-9);
    EXPECT_NEAR(optimizerStep(gpu, 1).first, gpuEnd0 + 2, 1e-9);
    auto cpu = testCluster(2);
    cpu.device.memoryBandwidth = 1e10;
    cpu.device.hostLink = { "memory", 1e10, 0 };
    // A copy moves 2 G, the add 3 G: 20 + 30 ms.
    const auto [cpuEnd0, cpuLength0] = optimizerStep(cpu, 0);
    EXPECT_NEAR(cpuLength0, 50, 1e-9);
    // Device 1 waits for device 0's hand-in, then adds: it ends with device 0.
    EXPECT_NEAR(optimizerStep(cpu, 1).first, cpuEnd0, 1e-9);
}

// Transfers between two nodes go over the sender's NIC (its place in the node mod the NIC count):
// with one NIC two devices' sends across queue on it, with two they do not; more NICs than devices
// change nothing. The count travels in the cluster's JSON, and a zero count is refused.
TEST(Simulator, EachNicCarriesItsOwnTransfersBetweenNodes)
{
    const auto clusterWith = [](int nics) {
        auto c = testCluster(4, 1000);
        c.nodes = 2;
        c.devicesPerNode = 2;
        c.interNode = { "nic", 1000 * 1e3, 0 }; // 1000 bytes per ms
        c.nicsPerNode = nics;
        return c;
    };
    // Stages 0 and 2 on node 0, 1 and 3 on node 1: every boundary crosses, and stage 0 (device 0)
    // and stage 2 (device 1) both send from node 0 to node 1.
    const auto schedule = placeStages(generateSchedule({ ScheduleKind::OneFOneB, 4, 8, 1, 1 }),
        { DeviceId(0), DeviceId(2), DeviceId(1), DeviceId(3) });
    const auto stages = equalStages(4, 1, 2, 2000); // 2 ms a transfer
    const auto time = [&](int nics) {
        const auto cluster = clusterWith(nics);
        SimulationInput in { schedule, stages, cluster, {}, 1.0, {}, { false, true } };
        return simulate(in).iterationNs;
    };
    EXPECT_LT(time(2), time(1));
    EXPECT_DOUBLE_EQ(time(4), time(2));
    const auto cluster = clusterWith(8);
    const auto back = clusterFromJson(clusterToJson(cluster), "test");
    EXPECT_EQ(back.nicsPerNode, 8);
    EXPECT_EQ(back, cluster);
    auto j = nlohmann::json::parse(clusterToJson(cluster));
    j["nics_per_node"] = 0;
    try {
        (void)clusterFromJson(j.dump(), "c.json");
        FAIL() << "a cluster with no NIC was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("nics_per_node"), std::string::npos) << e.what();
    }
}
