// A run's measured timeline from a device tracer (kernel_timeline.h): each external id's span from
// its records through the clock map; on CPU devices over the host clock (every action traced, in
// order on its device, inside the iteration); and, labelled `gpu` (skipped without a device), over
// CUPTI on one GPU split into two stage devices: the same losses as the synchronized timeline, every
// compute action timed by its kernels, a device's actions in order and inside the iteration.
#include "cuda/cuda_probe.h"
#include "kernel_timeline.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>

using namespace ps;
using namespace ps::profiler;

namespace {

cupti::DeviceActivity record(cupti::ActivityKind kind, std::uint64_t start, std::uint64_t end,
    std::uint32_t correlation, std::uint32_t stream = 7)
{
    return { kind, "k", start, end, correlation, stream, 0, 0 };
}

bool isCompute(ActionType t)
{
    return t == ActionType::Forward || t == ActionType::Backward || t == ActionType::BackwardInput
        || t == ActionType::BackwardWeight || t == ActionType::OptimizerStep || t == ActionType::Recompute;
}

Graph smallGpt(int layers, std::int64_t hidden, std::int64_t seq)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = layers;
    c.hidden = hidden;
    c.heads = 4;
    c.seq = seq;
    c.maxPositions = seq;
    c.microBatch = 4;
    c.dropout = 0.1;
    return buildZooModel(c);
}

engine::RunConfig onefoneb(const Graph& graph, engine::ActionTracer* tracer)
{
    engine::RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.partition.stageStarts = { 0, graph.nodeCount() / 2 };
    c.optimizer.kind = "adamw";
    c.seed = 9;
    c.tracer = tracer;
    return c;
}

// Every event inside the iteration; a device's events in order, none starting before the previous
// one on that device ended.
void expectOrderedInside(const engine::RunStepResult& r, const std::string& what)
{
    std::map<std::uint32_t, std::vector<const SimEvent*>> byDevice;
    for (const auto& e : r.events) {
        EXPECT_GE(e.startNs, 0.0) << what;
        EXPECT_LE(e.startNs, e.endNs) << what;
        EXPECT_LE(e.endNs, r.seconds * 1e9 + 1.0) << what;
        if (isCompute(e.action))
            byDevice[e.device.index()].push_back(&e);
    }
    for (auto& [device, list] : byDevice) {
        std::sort(list.begin(), list.end(), [](const auto* a, const auto* b) { return a->startNs < b->startNs; });
        for (std::size_t i = 1; i < list.size(); ++i)
            EXPECT_GE(list[i]->startNs + 1.0, list[i - 1]->endNs) << what << ": device " << device << ", action " << i;
    }
}

} // namespace

TEST(KernelTimeline, SpansRunFromTheFirstRecordToTheLastThroughTheClockMap)
{
    cupti::ActivityBatch batch;
    // id 7: two kernels overlapping on two streams, then a copy; id 9: a memset; id 11: one kernel.
    batch.activities = { record(cupti::ActivityKind::Kernel, 1'000'100, 1'000'300, 1, 7),
        record(cupti::ActivityKind::Kernel, 1'000'200, 1'000'400, 2, 8),
        record(cupti::ActivityKind::Memcpy, 1'000'500, 1'000'900, 3, 9),
        record(cupti::ActivityKind::Memset, 1'002'000, 1'002'010, 4),
        record(cupti::ActivityKind::Kernel, 1'003'000, 1'003'500, 5),
        record(cupti::ActivityKind::Kernel, 1'004'000, 1'004'100, 6), // correlated with no external id
        record(cupti::ActivityKind::Kernel, 1'005'000, 1'005'100, 99) }; // no correlation at all
    batch.correlations = { { 1, 7 }, { 2, 7 }, { 3, 7 }, { 4, 9 }, { 5, 11 } };
    cupti::ClockMap clock;
    clock.gpuOrigin = 1'000'000;
    clock.hostAtOrigin = 5e9;
    clock.scale = 2.0; // a record-clock tick is two host nanoseconds
    std::size_t orphans = 0;
    const auto spans = actionSpans(batch, clock, 5e9 - 100.0, &orphans);
    EXPECT_EQ(orphans, 2U);
    ASSERT_EQ(spans.size(), 3U);
    EXPECT_DOUBLE_EQ(spans.at(7).startNs, 100.0 + 2 * 100.0);
    EXPECT_DOUBLE_EQ(spans.at(7).endNs, 100.0 + 2 * 900.0);
    EXPECT_DOUBLE_EQ(spans.at(9).startNs, 100.0 + 2 * 2000.0);
    EXPECT_DOUBLE_EQ(spans.at(9).endNs, 100.0 + 2 * 2010.0);
    EXPECT_DOUBLE_EQ(spans.at(11).endNs - spans.at(11).startNs, 1000.0);
    // Busy: the two overlapping kernels count once (300 ticks), the copy after a gap 400.
    EXPECT_DOUBLE_EQ(spans.at(7).busyNs, 2 * 700.0);
    EXPECT_DOUBLE_EQ(spans.at(9).busyNs, 2 * 10.0);
}

TEST(KernelTimeline, WorkOfAnotherActionInsideASpanIsNotBusyTime)
{
    // Two stage devices on one GPU: action 1's kernels bracket action 2's on the shared stream.
    cupti::ActivityBatch batch;
    batch.activities = { record(cupti::ActivityKind::Kernel, 0, 10, 1), record(cupti::ActivityKind::Kernel, 10, 30, 2),
        record(cupti::ActivityKind::Kernel, 30, 40, 3) };
    batch.correlations = { { 1, 1 }, { 2, 2 }, { 3, 1 } };
    cupti::ClockMap clock;
    const auto spans = actionSpans(batch, clock, 0);
    EXPECT_DOUBLE_EQ(spans.at(1).endNs - spans.at(1).startNs, 40.0);
    EXPECT_DOUBLE_EQ(spans.at(1).busyNs, 20.0);
    EXPECT_DOUBLE_EQ(spans.at(2).busyNs, 20.0);
}

TEST(KernelTimeline, OnCpuDevicesOverTheHostClockEveryActionIsTracedInOrder)
{
    const auto graph = smallGpt(2, 32, 16);
    KernelTimelineTracer tracer(std::make_unique<HostClockTracer>());
    const auto config = onefoneb(graph, &tracer);
    engine::TrainingRun run(graph, engine::TokenData::random(256, 1 << 12, 5), engine::makeDevices("cpu:2", 0), config);
    for (int step = 1; step <= 2; ++step) {
        const auto r = run.step();
        EXPECT_EQ(r.tracedActions, static_cast<std::int64_t>(r.events.size())) << "step " << step;
        expectOrderedInside(r, "step " + std::to_string(step));
        EXPECT_TRUE(tracer.takeWarnings().empty());
    }
}

// Stopping the collection between steps drops what the device tracer recorded until then and tells
// it to stop; resuming tells it to record again, and the next step is traced as before.
TEST(KernelTimeline, StoppingCollectionDropsTheRecordsAndResumes)
{
    class CountingTracer final : public ActivityTracer
    {
    public:
        explicit CountingTracer(std::vector<bool>& switches)
            : m_switches(switches)
        {
        }
        void push(std::uint64_t id) override
        {
            m_host.push(id);
        }
        void pop() override
        {
            m_host.pop();
        }
        cupti::ActivityBatch collect() override
        {
            return m_host.collect();
        }
        std::uint64_t timestampNs() const override
        {
            return m_host.timestampNs();
        }
        void setCollecting(bool on) override
        {
            m_switches.push_back(on);
        }

    private:
        HostClockTracer m_host;
        std::vector<bool>& m_switches;
    };
    std::vector<bool> switches;
    KernelTimelineTracer tracer(std::make_unique<CountingTracer>(switches));
    tracer.begin(7);
    tracer.end();
    tracer.setCollecting(false); // action 7's record is no step's: dropped
    tracer.setCollecting(true);
    tracer.begin(8);
    tracer.end();
    const auto spans = tracer.finish(std::chrono::steady_clock::now());
    EXPECT_EQ(switches, (std::vector<bool> { false, true }));
    EXPECT_EQ(spans.count(7), 0U);
    EXPECT_EQ(spans.count(8), 1U);
}

TEST(GpuSelfTest, CuptiTimelineOfTwoStageDevicesOnOneGpu)
{
    const auto probe = engine::cuda::probeGpus();
    if (probe.devices.empty())
        GTEST_SKIP() << "no CUDA device: " << probe.status;
    const auto graph = smallGpt(4, 256, 256);
    const auto data = engine::TokenData::random(256, 1 << 16, 11);
    const int steps = 4;
    engine::TrainingRun plain(graph, data, engine::makeDevices("cuda:0x2", 0), onefoneb(graph, nullptr));
    const auto tracer = makeCuptiKernelTimeline();
    engine::TrainingRun traced(graph, data, engine::makeDevices("cuda:0x2", 0), onefoneb(graph, tracer.get()));
    double plainMs = 0;
    double tracedMs = 0;
    for (int step = 1; step <= steps; ++step) {
        const auto a = plain.step();
        const auto b = traced.step();
        EXPECT_NEAR(b.loss, a.loss, 1e-4 * std::abs(a.loss)) << "step " << step;
        std::int64_t compute = 0;
        for (const auto& e : b.events)
            compute += isCompute(e.action) ? 1 : 0;
        EXPECT_GE(b.tracedActions, compute) << "every compute action launched kernels, step " << step;
        expectOrderedInside(b, "step " + std::to_string(step));
        for (std::size_t d = 0; d < b.deviceBusyNs.size(); ++d) // the two devices share one stream
            EXPECT_LE(b.deviceBusyNs[d], b.seconds * 1e9) << "device " << d << ", step " << step;
        for (const auto& w : tracer->takeWarnings())
            std::cout << "[ NOTE ] warning: " << w << "\n";
        if (step > 1) { // the first step warms the caches
            plainMs += a.seconds * 1e3 / (steps - 1);
            tracedMs += b.seconds * 1e3 / (steps - 1);
        }
        if (step == steps) {
            double busy = 0;
            for (double ns : b.deviceBusyNs)
                busy += ns / 1e6;
            std::cout << "[ NOTE ] step " << step << ": " << b.tracedActions << " actions timed by their kernels, "
                      << "devices busy " << busy << " ms of " << b.seconds * 1e3 << " ms\n";
        }
    }
    // Steps nobody keeps the timeline of: neither traced nor waited for.
    double untimedMs = 0;
    for (int step = 1; step <= 3; ++step) {
        const auto a = plain.step();
        const auto b = traced.step(false);
        EXPECT_NEAR(b.loss, a.loss, 1e-4 * std::abs(a.loss)) << "untimed step " << step;
        EXPECT_TRUE(b.deviceBusyNs.empty());
        untimedMs += b.seconds * 1e3 / 3;
    }
    std::cout << "[ NOTE ] mean step: synchronized timeline " << plainMs << " ms, CUPTI timeline " << tracedMs
              << " ms, untimed " << untimedMs << " ms\n";
}
