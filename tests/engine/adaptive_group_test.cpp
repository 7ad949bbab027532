// Ada-Grouper in the runtime: emulated links between CPU devices, schedules switched between steps
// without touching parameters, and the group-size controller fed with measured transfers.
#include "cpu/cpu_backend.h"
#include "pipeline_support.h"
#include "runtime/channel.h"
#include "runtime/emulated_link.h"
#include "runtime/group_controller.h"
#include "runtime/training_run.h"
#include "trainer.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;
using std::chrono::duration;
using std::chrono::milliseconds;

namespace {

RunConfig kfkb(const Graph& graph, int k)
{
    RunConfig c;
    c.schedule = parseScheduleSpec("kfkb:" + std::to_string(k), 2, 4);
    c.partition = evenCuts(graph, 2);
    c.optimizer.kind = "sgd";
    c.optimizer.lr = 0.05;
    c.seed = 5;
    return c;
}

// One device accumulating 4 micro-batches per step with kfkb()'s optimizer and seed: what a
// two-device run of the same 4 x 2 samples per step must match.
Trainer oneDevice(const Graph& graph)
{
    TrainOptions o;
    o.accumulation = 4;
    o.optimizer.kind = "sgd";
    o.optimizer.lr = 0.05;
    o.seed = 5;
    return Trainer(graph, randomCorpus(), o);
}

double secondsOf(EmulatedLink::Clock::duration d)
{
    return duration<double>(d).count();
}

} // namespace

TEST(EmulatedLink, TransfersQueueBehindEachOtherAndPayLatencyAndTheTrace)
{
    const auto origin = EmulatedLink::Clock::now();
    EmulatedLink link({ 1e6, 1e-3, std::nullopt }, origin);
    const auto a = link.reserve(2000, origin); // 1 ms latency + 2 ms
    EXPECT_NEAR(secondsOf(a.start - origin), 0, 1e-9);
    EXPECT_NEAR(secondsOf(a.end - origin), 3e-3, 1e-9);
    const auto b = link.reserve(1000, origin + milliseconds(1)); // waits for a
    EXPECT_NEAR(secondsOf(b.start - origin), 3e-3, 1e-9);
    EXPECT_NEAR(secondsOf(b.end - origin), 5e-3, 1e-9);
    // At a tenth of its bandwidth from 10 ms on (the simulator's trace arithmetic).
    EmulatedLink slow({ 1e6, 0, BandwidthTrace { { { 0.0, 1.0 }, { 0.01, 0.1 } }, 0 } }, origin);
    const auto c = slow.reserve(20000, origin); // 10 ms at full speed moves 10000 bytes, then 100 ms
    EXPECT_NEAR(secondsOf(c.end - origin), 0.11, 1e-9);
    EXPECT_THROW(EmulatedLink({ 0, 0, std::nullopt }, origin), Error);
}

TEST(EmulatedLink, TheReceiverGetsTheMessageWhenTheLinkDeliversItAndTheSenderGoesOn)
{
    const auto& cpu = cpuBackend();
    Allocator memory("cpu:1");
    AbortSignal abort;
    EmulatedLink link({ 4e5, 0, std::nullopt }, EmulatedLink::Clock::now()); // 40 KB take 100 ms
    InProcessChannel channel("stage 0 -> 1", cpu, cpu, memory, abort, &link);
    Allocator source("cpu:0");
    std::vector<float> values(10000, 1.5F);
    auto array = cpu.fromHost(source, { 10000 }, DType::F32, std::as_bytes(std::span<const float>(values)));
    const auto sent = EmulatedLink::Clock::now();
    const auto transfer = channel.send(MicroBatchId(0), { std::move(array) });
    ASSERT_TRUE(transfer.has_value());
    EXPECT_NEAR(secondsOf(transfer->end - transfer->start), 0.1, 1e-6);
    EXPECT_LT(EmulatedLink::Clock::now(), transfer->end) << "the sender must not wait for the link";
    const auto message = channel.receive(MicroBatchId(0));
    EXPECT_GE(EmulatedLink::Clock::now(), transfer->end);
    EXPECT_GE(secondsOf(EmulatedLink::Clock::now() - sent), 0.1);
    ASSERT_EQ(message.size(), 1U);
    EXPECT_EQ(message[0].bytes(), 40000);
}

TEST(EmulatedLink, ARunOverItRecordsEachSendsTimeOnTheLinkAndTrainsTheSame)
{
    const auto graph = tinyGpt();
    auto config = kfkb(graph, 2);
    TrainingRun plain(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    config.link = { 2e7, 2e-4, std::nullopt }; // 20 MB/s, 0.2 ms
    TrainingRun linked(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    for (int s = 0; s < 3; ++s) {
        const auto a = plain.step();
        const auto b = linked.step();
        EXPECT_DOUBLE_EQ(a.loss, b.loss) << "step " << s + 1;
        int sends = 0;
        for (const auto& e : b.events) {
            if (e.stream != Stream::Send)
                continue;
            ++sends;
            EXPECT_NEAR((e.endNs - e.startNs) * 1e-9, 2e-4 + e.bytes / 2e7, 2e-6)
                << formatAction({ e.action, e.stage, e.microBatch });
        }
        EXPECT_EQ(sends, 8) << "4 activations forward and 4 gradients back";
    }
}

TEST(Pipeline, SwitchingKBetweenStepsKeepsParametersAndMatchesOneDevice)
{
    const auto graph = tinyGpt();
    Trainer reference = oneDevice(graph);
    TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), kfkb(graph, 1));
    for (int s = 0; s < 9; ++s) {
        if (s == 3 || s == 6) {
            auto spec = run.config().schedule;
            spec.groupSize = s == 3 ? 4 : 2;
            run.setSchedule(spec);
        }
        EXPECT_NEAR(run.step().loss, reference.step().loss, 1e-5) << "step " << s + 1;
    }
    EXPECT_EQ(run.config().schedule.groupSize, 2);
    EXPECT_EQ(scheduleName(run.runner().schedule().spec), "kfkb:2");
}

TEST(Pipeline, SetScheduleRejectsAnotherShapeAndKeepsTheCurrentOne)
{
    const auto graph = tinyGpt();
    TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), kfkb(graph, 2));
    auto more = run.config().schedule;
    more.microBatches = 8;
    try {
        run.setSchedule(more);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("8 micro-batches instead of 4"), std::string::npos) << e.what();
    }
    auto async = run.config().schedule;
    async.kind = ScheduleKind::PipeDream;
    EXPECT_THROW(run.setSchedule(async), Error);
    EXPECT_EQ(scheduleName(run.config().schedule), "kfkb:2");
    EXPECT_GT(run.step().loss, 0);
}

TEST(Pipeline, SwitchingTheMicroBatchSizeKeepsParametersDataAndMatchesOneDevice)
{
    // Ada-Grouper's (k, b) at a fixed 8 samples per step: b = 2 x M = 4, then 4 x 2, then 1 x 8.
    // Each step's mean loss and gradient are those of its 8 windows however they are grouped, so
    // the run keeps matching one device accumulating 4 micro-batches of 2.
    const auto graph = tinyGpt();
    Trainer reference = oneDevice(graph);
    TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), kfkb(graph, 1));
    for (int s = 0; s < 7; ++s) {
        if (s == 2 || s == 4) {
            const std::int64_t b = s == 2 ? 4 : 1;
            auto spec = run.config().schedule;
            spec.microBatches = static_cast<int>(8 / b);
            spec.groupSize = s == 2 ? 2 : 4;
            run.setMicroBatch(buildAtMicroBatch(graph, b), spec);
            EXPECT_EQ(run.graph().info().microBatch, b);
            EXPECT_EQ(run.tokensPerStep(), 8 * 32);
        }
        EXPECT_NEAR(run.step().loss, reference.step().loss, 1e-5) << "step " << s + 1;
    }
    EXPECT_EQ(scheduleName(run.runner().schedule().spec), "kfkb:4");
    EXPECT_EQ(run.runner().schedule().spec.microBatches, 8);
    // Another global batch, or another model, is refused and the run goes on as it was.
    auto spec = run.config().schedule;
    spec.microBatches = 2;
    EXPECT_THROW(run.setMicroBatch(buildAtMicroBatch(graph, 2), spec), Error);
    auto other = zooPreset("gpt2-tiny");
    other.seq = 32;
    other.layers = 1;
    other.microBatch = 4;
    spec.microBatches = 2;
    EXPECT_THROW(run.setMicroBatch(buildZooModel(other), spec), Error);
    EXPECT_EQ(run.graph().info().microBatch, 1);
    EXPECT_NEAR(run.step().loss, reference.step().loss, 1e-5);
}

TEST(GroupSizeController, DecidesEveryIntervalFromAMovingAverageOfTheMeasuredBandwidth)
{
    const auto graph = tinyGpt();
    const auto config = kfkb(graph, 1);
    RunShape shape { config.partition, config.schedule, {}, {}, 0, 0, { 1e9, 1e-4, std::nullopt } };
    const std::vector<GroupCandidate> ks { { 1, 2, 4 }, { 2, 2, 4 }, { 4, 2, 4 } };
    GroupSizeController controller(graph, std::nullopt, shape, ks, 2);
    // Two 1 MB sends between the devices, 1 ms and 10 ms on the link after the 0.1 ms latency.
    const auto send = [](std::uint32_t stage, ActionType type, double startNs, double endNs, double bytes) {
        return SimEvent { DeviceId(stage), Stream::Send, type, StageId(stage), MicroBatchId(0), startNs, endNs, bytes };
    };
    EXPECT_FALSE(controller.observe(1, { send(0, ActionType::SendForward, 0, 1.1e6, 1e6) }));
    EXPECT_NEAR(controller.bandwidthEstimate(), 1e9, 1);
    const auto slow = controller.observe(2, { send(1, ActionType::SendBackward, 0, 10.1e6, 1e6) });
    ASSERT_TRUE(slow.has_value());
    EXPECT_EQ(slow->step, 2);
    EXPECT_NEAR(slow->measuredBandwidth, 0.5 * 1e8 + 0.5 * 1e9, 1); // the newest step weighs one half
    ASSERT_EQ(slow->predictedIterationNs.size(), 3U);
    const auto fastest = std::min_element(slow->predictedIterationNs.begin(), slow->predictedIterationNs.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    EXPECT_EQ(slow->chosen, fastest->first);
    EXPECT_EQ(controller.current(), slow->chosen);
    // A step without transfers leaves the estimate; the next decision folds in what follows.
    EXPECT_FALSE(controller.observe(3, {}));
    EXPECT_NEAR(controller.bandwidthEstimate(), 5.5e8, 1);
    // The same candidates predicted at that bandwidth by choose(), and slower than at 1 GB/s.
    const auto again = controller.choose(slow->measuredBandwidth);
    const auto quick = controller.choose(1e9);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_DOUBLE_EQ(again.predictedIterationNs[i].second, slow->predictedIterationNs[i].second);
        EXPECT_GT(again.predictedIterationNs[i].second, quick.predictedIterationNs[i].second);
    }
    EXPECT_THROW(GroupSizeController(graph, std::nullopt, shape, { { 5, 2, 4 } }, 1), Error); // k over M = 4
    EXPECT_THROW(GroupSizeController(graph, std::nullopt, shape, { { 2, 4, 4 } }, 1), Error); // 16 samples, not 8
    EXPECT_THROW(GroupSizeController(graph, std::nullopt, shape, {}, 1), Error);
    EXPECT_THROW(GroupSizeController(graph, std::nullopt, shape, ks, 1, 0.0), Error);
}

TEST(GroupSizeController, CandidatesFollowTheMemoryLimitCurve)
{
    // 8 samples per step on two devices. Without a memory cap: k = 1..4 at the run's b = 2. With
    // one: for each k the largest b (M = 8 / b >= k) predicted to fit, and b never grows with k.
    const auto graph = tinyGpt();
    const auto config = kfkb(graph, 1);
    RunShape shape { config.partition, config.schedule, {}, {}, 0, 0, {} };
    const auto free = autoGroupCandidates(graph, nullptr, shape);
    ASSERT_EQ(free.size(), 4U);
    for (std::size_t i = 0; i < free.size(); ++i)
        EXPECT_EQ(free[i], (GroupCandidate { static_cast<int>(i) + 1, 2, 4 }));
    // A cap between what b = 2 and b = 4 need with one micro-batch in flight.
    auto atB = [&](std::int64_t b, int k) {
        auto s = shape;
        s.microBatch = b;
        s.schedule.microBatches = static_cast<int>(8 / b);
        s.schedule.groupSize = k;
        double peak = 0;
        for (const auto& d : predictRun(graph, nullptr, s).simulation.devices)
            peak = std::max(peak, d.peakBytes);
        return peak;
    };
    shape.deviceMemoryBytes = static_cast<std::int64_t>((atB(2, 1) + atB(4, 1)) / 2);
    const auto capped = autoGroupCandidates(graph, nullptr, shape);
    ASSERT_FALSE(capped.empty());
    EXPECT_EQ(capped.front(), (GroupCandidate { 1, 2, 4 })) << "b = 4 does not fit, b = 2 does";
    for (std::size_t i = 0; i < capped.size(); ++i) {
        EXPECT_EQ(capped[i].microBatch * capped[i].microBatches, 8);
        EXPECT_GE(capped[i].microBatches, capped[i].k);
        EXPECT_LE(atB(capped[i].microBatch, capped[i].k), static_cast<double>(shape.deviceMemoryBytes));
        if (i > 0) {
            EXPECT_LE(capped[i].microBatch, capped[i - 1].microBatch);
        }
    }
    EXPECT_LT(capped.back().microBatch, 2) << "k = 4 keeps four groups in flight: b = 1";
}

TEST(GroupSizeController, AModelWithBatchNormKeepsItsMicroBatchSize)
{
    // Batch norm's running statistics live in the runner and its batch statistics depend on b: the
    // curve is not offered, and the run refuses a new b, unchanged.
    auto c = zooPreset("resnet-tiny");
    c.microBatch = 2;
    const auto graph = buildZooModel(c);
    RunConfig config;
    config.schedule = parseScheduleSpec("kfkb:1", 2, 4);
    config.partition = evenCuts(graph, 2);
    RunShape shape { config.partition, config.schedule, {}, {}, 0, std::int64_t { 1 } << 30, {} };
    for (const auto& candidate : autoGroupCandidates(graph, nullptr, shape))
        EXPECT_EQ(candidate.microBatch, 2);
    TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    auto spec = config.schedule;
    spec.microBatches = 2;
    c.microBatch = 4;
    try {
        run.setMicroBatch(buildZooModel(c), spec);
        FAIL() << "a new micro-batch size was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("batch norm"), std::string::npos) << e.what();
    }
    EXPECT_EQ(run.graph().info().microBatch, 2);
    EXPECT_TRUE(std::isfinite(run.step().loss));
}

// kfkb:auto in a run (the CLI's train loop calls adaptAfterStep after every step): the controller
// decides from the steps' measured sends and the run switches k and b together at a step boundary,
// mid-run, and keeps training the same 8 samples a step as one device accumulating them would.
TEST(GroupSizeController, ARunSwitchesKAndTheMicroBatchSizeWhenTheLinkSlowsDown)
{
    const auto graph = tinyGpt();
    const auto config = kfkb(graph, 1);
    RunShape shape { config.partition, config.schedule, {}, {}, 0, 0, { 1e9, 1e-4, std::nullopt } };
    const std::vector<GroupCandidate> candidates { { 1, 2, 4 }, { 2, 2, 4 }, { 4, 2, 4 }, { 1, 1, 8 }, { 2, 1, 8 },
        { 4, 1, 8 }, { 8, 1, 8 } };
    GroupSizeController controller(graph, std::nullopt, shape, candidates, 2, 1.0);
    constexpr double kFast = 1e9;
    constexpr double kSlow = 2e5;
    const auto fast = controller.choose(kFast).chosen;
    const auto slow = controller.choose(kSlow).chosen;
    ASSERT_NE(fast.k, slow.k) << fast.label() << " / " << slow.label();
    ASSERT_NE(fast.microBatch, slow.microBatch) << fast.label() << " / " << slow.label();
    // One send a step at the link's rate: 1 MB, after the 0.1 ms latency.
    const auto sendAt = [](double bandwidth) {
        return std::vector<SimEvent> { { DeviceId(0), Stream::Send, ActionType::SendForward, StageId(0),
            MicroBatchId(0), 0, 1e5 + 1e6 / bandwidth * 1e9, 1e6 } };
    };
    Trainer reference = oneDevice(graph);
    TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    controller.setCurrent(fast);
    applyGroupCandidate(run, fast);
    std::vector<GroupAdaptation> decisions;
    for (int s = 1; s <= 6; ++s) {
        auto r = run.step();
        EXPECT_NEAR(r.loss, reference.step().loss, 1e-5) << "step " << s;
        r.events = sendAt(s <= 2 ? kFast : kSlow);
        if (auto a = adaptAfterStep(controller, run, r))
            decisions.push_back(std::move(*a));
    }
    ASSERT_EQ(decisions.size(), 3U); // after steps 2, 4 and 6
    EXPECT_FALSE(decisions[0].switched());
    ASSERT_TRUE(decisions[1].switched());
    EXPECT_EQ(decisions[1].before, fast);
    EXPECT_EQ(decisions[1].decision.chosen, slow);
    EXPECT_NEAR(decisions[1].decision.measuredBandwidth, kSlow, 1e-6 * kSlow);
    EXPECT_FALSE(decisions[2].switched());
    // The run took both from step 5 on: k in its schedule, b in its model.
    EXPECT_EQ(run.config().schedule.groupSize, slow.k);
    EXPECT_EQ(run.config().schedule.microBatches, slow.microBatches);
    EXPECT_EQ(run.graph().info().microBatch, slow.microBatch);
    EXPECT_NEAR(run.step().loss, reference.step().loss, 1e-5) << "step 7";
}
