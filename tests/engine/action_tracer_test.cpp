// The schedule runner's device tracer (runtime/action_tracer.h): with one, each action is
// reported on its worker thread and its event takes the span the tracer returns, the busy time
// follows the spans, and the training itself is unchanged.
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <set>
#include <thread>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

// Returns a made-up span per id (start = its index times 1000, 7 ns long), none for ids of actions
// at an index divisible by 5 (those keep the host clock's times).
class FakeTracer final : public ActionTracer
{
public:
    void begin(std::uint64_t id) override
    {
        const std::lock_guard lock(mutex);
        open[std::this_thread::get_id()].push_back(id);
        threads.insert(std::this_thread::get_id());
        ids.push_back(id);
    }
    void end() override
    {
        const std::lock_guard lock(mutex);
        auto& stack = open[std::this_thread::get_id()];
        ASSERT_FALSE(stack.empty());
        stack.pop_back();
    }
    std::unordered_map<std::uint64_t, ActionSpan> finish(std::chrono::steady_clock::time_point /*origin*/) override
    {
        const std::lock_guard lock(mutex);
        ++finishes;
        for (const auto& [thread, stack] : open)
            EXPECT_TRUE(stack.empty()) << "a range left open";
        std::unordered_map<std::uint64_t, ActionSpan> spans;
        for (const auto id : ids) {
            const auto index = id & ((std::uint64_t { 1 } << 40U) - 1);
            if (index % 5 != 0)
                spans[id] = { 1000.0 * static_cast<double>(id >> 40U) * 1e6 + static_cast<double>(index) * 1000.0,
                    1000.0 * static_cast<double>(id >> 40U) * 1e6 + static_cast<double>(index) * 1000.0 + 7.0 };
        }
        given = spans.size();
        ids.clear();
        return spans;
    }
    void setCollecting(bool on) override
    {
        const std::lock_guard lock(mutex);
        collecting.push_back(on);
    }
    std::vector<bool> collecting; // every switch, in order
    std::mutex mutex;
    std::map<std::thread::id, std::vector<std::uint64_t>> open;
    std::set<std::thread::id> threads;
    std::vector<std::uint64_t> ids;
    int finishes = 0;
    std::size_t given = 0;
};

Graph tracedGpt()
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 2;
    c.hidden = 32;
    c.heads = 2;
    c.seq = 16;
    c.maxPositions = 16;
    c.microBatch = 2;
    c.dropout = 0.1;
    return buildZooModel(c);
}

std::vector<RunStepResult> train(const Graph& graph, ActionTracer* tracer, int steps)
{
    RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.partition = evenCuts(graph, 2);
    c.memory = swapAndRecompute(graph, c.partition);
    c.seed = 3;
    c.tracer = tracer;
    TrainingRun run(graph, TokenData::random(256, 1 << 12, 5), makeDevices("cpu:2", 0), c);
    std::vector<RunStepResult> out;
    for (int i = 0; i < steps; ++i)
        out.push_back(run.step());
    return out;
}

} // namespace

TEST(ActionTracer, EventsTakeTheTracersSpansAndTrainingIsUnchanged)
{
    const auto graph = tracedGpt();
    const auto plain = train(graph, nullptr, 2);
    FakeTracer tracer;
    const auto traced = train(graph, &tracer, 2);
    EXPECT_EQ(tracer.finishes, 2);
    EXPECT_EQ(tracer.threads.size(), 2U) << "one worker thread per device reports its actions";
    for (std::size_t s = 0; s < plain.size(); ++s) {
        EXPECT_EQ(traced[s].loss, plain[s].loss) << "step " << s + 1;
        EXPECT_EQ(plain[s].tracedActions, 0);
    }
    const auto& r = traced.back();
    // Receives and queued swaps are reported too but have no event of their own.
    EXPECT_LE(static_cast<std::size_t>(r.tracedActions), tracer.given);
    ASSERT_GT(r.tracedActions, 10);
    EXPECT_GT(static_cast<std::int64_t>(r.events.size()), r.tracedActions) << "actions without a span keep theirs";
    std::int64_t fromTracer = 0;
    std::vector<double> busy(2, 0.0);
    for (const auto& e : r.events) {
        const bool fake = e.endNs - e.startNs == 7.0 && std::fmod(e.startNs, 1000.0) == 0.0;
        fromTracer += fake ? 1 : 0;
        if (fake) { // the device's span, not another device's
            EXPECT_EQ(std::floor(e.startNs / 1e9), e.device.index() + 1);
        }
        const bool compute = e.action == ActionType::Forward || e.action == ActionType::Backward
            || e.action == ActionType::BackwardInput || e.action == ActionType::BackwardWeight
            || e.action == ActionType::OptimizerStep || e.action == ActionType::Recompute;
        if (compute)
            busy[e.device.index()] += e.endNs - e.startNs;
    }
    EXPECT_EQ(fromTracer, r.tracedActions);
    for (std::size_t d = 0; d < busy.size(); ++d)
        EXPECT_DOUBLE_EQ(r.deviceBusyNs[d], busy[d]) << "device " << d;
}

// An action that fails (out of memory) still closes its tracer range, and the failure names the
// device, stage and action as without a tracer.
TEST(ActionTracer, AFailingActionClosesItsRangeAndIsReported)
{
    const auto graph = tracedGpt();
    FakeTracer tracer;
    RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.partition = evenCuts(graph, 2);
    c.tracer = &tracer;
    TrainingRun run(graph, TokenData::random(256, 1 << 12, 5), makeDevices("cpu:2", 400 << 10), c);
    try {
        (void)run.step();
        FAIL() << "a 400 KiB device ran a step";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cpu:"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("stage"), std::string::npos) << e.what();
    }
    const std::lock_guard lock(tracer.mutex);
    EXPECT_FALSE(tracer.ids.empty());
    for (const auto& [thread, stack] : tracer.open)
        EXPECT_TRUE(stack.empty()) << "a range left open";
}

// A step nobody wants the timeline of runs without the tracer and without waits: the same
// training, no busy times, no events but the swaps' (their copy streams time them; no emulated
// link here), and the next timed step is traced.
TEST(ActionTracer, AnUntimedStepTracesNothingAndReportsNoTimeline)
{
    const auto graph = tracedGpt();
    const auto plain = train(graph, nullptr, 2);
    FakeTracer tracer;
    RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.partition = evenCuts(graph, 2);
    c.memory = swapAndRecompute(graph, c.partition);
    c.seed = 3;
    c.tracer = &tracer;
    TrainingRun run(graph, TokenData::random(256, 1 << 12, 5), makeDevices("cpu:2", 0), c);
    const auto untimed = run.step(false);
    EXPECT_EQ(untimed.loss, plain[0].loss);
    EXPECT_GT(untimed.seconds, 0);
    EXPECT_TRUE(untimed.deviceBusyNs.empty());
    for (const auto& e : untimed.events) // only the copy streams' swaps, which time themselves
        EXPECT_TRUE(e.action == ActionType::SwapOut || e.action == ActionType::SwapIn)
            << formatAction({ e.action, e.stage, e.microBatch });
    EXPECT_EQ(untimed.tracedActions, 0);
    {
        const std::lock_guard lock(tracer.mutex);
        EXPECT_EQ(tracer.finishes, 1) << "the untimed step's records are dropped";
        EXPECT_TRUE(tracer.ids.empty());
        EXPECT_EQ(tracer.collecting, std::vector<bool> { false }) << "nothing recorded through it";
    }
    const auto timed = run.step(true);
    EXPECT_EQ(timed.loss, plain[1].loss);
    EXPECT_GT(timed.tracedActions, 10);
    EXPECT_EQ(timed.deviceBusyNs.size(), 2U);
    const std::lock_guard lock(tracer.mutex);
    EXPECT_EQ(tracer.finishes, 2);
    EXPECT_EQ(tracer.collecting, (std::vector<bool> { false, true })) << "recording again for the timed step";
}
