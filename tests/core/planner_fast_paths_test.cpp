// The planners' fast paths (issue P19) give the slow paths' answers: remembered stage
// evaluations, the parameter-state lower bound that answers infeasible cases at once, the bisected
// memory-balanced fill, and the auto-search on several threads.
#include "graph/graph_builder.h"
#include "plan/partition_search.h"
#include "plan/planner.h"
#include "plan/range_facts.h"
#include "util/error.h"
#include "util/parallel.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <atomic>
#include <iostream>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>

using namespace ps;

namespace {

const DeviceSpec& a100Device()
{
    static const auto device = DeviceCatalog::builtin().find("a100-40gb");
    return device;
}

Graph zooGraph(const char* name)
{
    auto c = zooPreset(name);
    c.layers = 4;
    if (std::string(name).starts_with("t5")) {
        c.decoderLayers = 3;
        c.decoderSeq = 64;
    }
    c.seq = 128;
    return buildZooModel(c);
}

void expectSamePlan(const Plan& fast, const Plan& slow, const std::string& what)
{
    EXPECT_EQ(fast.feasible, slow.feasible) << what;
    EXPECT_EQ(fast.partition.stageStarts, slow.partition.stageStarts) << what;
    EXPECT_EQ(fast.stageDevices, slow.stageDevices) << what;
    EXPECT_EQ(fast.slowestStageNs, slow.slowestStageNs) << what;
    EXPECT_EQ(fast.reason, slow.reason) << what;
    EXPECT_EQ(fast.seed, slow.seed) << what;
    ASSERT_EQ(fast.stages.size(), slow.stages.size()) << what;
    for (std::size_t s = 0; s < fast.stages.size(); ++s) {
        EXPECT_EQ(fast.stages[s].peakBytes, slow.stages[s].peakBytes) << what << " stage " << s;
        EXPECT_EQ(fast.stages[s].memoryPlan.swappedTensors, slow.stages[s].memoryPlan.swappedTensors) << what;
        EXPECT_EQ(fast.stages[s].memoryPlan.recomputedTensors, slow.stages[s].memoryPlan.recomputedTensors) << what;
    }
}

// Per device, in a few steps from roomy to where most algorithms need swap or recompute (or find
// nothing): the cases where the searches take different branches.
std::vector<double> limitsFor(const Graph& graph, int stages)
{
    const auto profile = estimateProfile(graph, a100Device(), {});
    const StageModel probe(graph, profile, { ScheduleKind::OneFOneB, stages, 2 * stages, 1, 1 },
        makeCluster(a100Device(), stages), 16, {});
    const double even = probe.approxMemoryBytes(0, probe.nodeCount(), 0) / stages;
    return { 0, 1.2 * even, 0.6 * even, 0.3 * even };
}

} // namespace

// Cuts, times, memory plans and reasons of every algorithm are the slow path's (every range
// evaluated afresh), on three zoo families at 2, 4 and 8 stages and four memory limits.
TEST(PlannerFastPaths, RememberedEvaluationsGiveTheSlowPathsPlans)
{
    int feasible = 0;
    int optimized = 0;
    int infeasible = 0;
    for (const char* name : { "gpt2-small", "bert-base", "t5-small" }) {
        const auto graph = zooGraph(name);
        const auto profile = estimateProfile(graph, a100Device(), {});
        for (const int stages : { 2, 4, 8 }) {
            for (const double limit : limitsFor(graph, stages)) {
                const ScheduleSpec spec { ScheduleKind::OneFOneB, stages, 2 * stages, 1, 1 };
                const PlannerLimits limits { limit, true, true };
                const StageModel fast(graph, profile, spec, makeCluster(a100Device(), stages), 16, limits);
                StageModel slow(graph, profile, spec, makeCluster(a100Device(), stages), 16, limits);
                slow.setEvaluationCache(false);
                for (auto algorithm : allPlanAlgorithms()) {
                    if (algorithm == PlanAlgorithm::Exhaustive)
                        continue; // limited to 80 nodes
                    PlannerOptions o;
                    o.algorithm = algorithm;
                    o.limits = limits;
                    const auto a = findPlan(fast, o);
                    const auto b = findPlan(slow, o);
                    expectSamePlan(a, b,
                        std::string(name) + " " + std::to_string(stages) + " stages, limit " + std::to_string(limit)
                            + ", " + std::string(toString(algorithm)));
                    feasible += a.feasible ? 1 : 0;
                    infeasible += a.feasible ? 0 : 1;
                    for (const auto& s : a.stages)
                        optimized += s.overheadNs > 0 ? 1 : 0;
                }
            }
        }
    }
    // The limits reach all three kinds of answer.
    EXPECT_GT(feasible, 50);
    EXPECT_GT(optimized, 10);
    EXPECT_GT(infeasible, 10);
}

// The bound is sound: no stage evaluation of any range holds less than it.
TEST(PlannerFastPaths, ParameterStateBoundNeverExceedsAStagesPeak)
{
    std::mt19937 rng(7);
    for (const char* name : { "gpt2-small", "bert-base", "t5-small" }) {
        const auto graph = zooGraph(name);
        const auto profile = estimateProfile(graph, a100Device(), {});
        for (auto kind : { ScheduleKind::OneFOneB, ScheduleKind::PipeDream }) {
            const StageModel m(
                graph, profile, { kind, 4, 8, 1, 1 }, makeCluster(a100Device(), 4), 8, { 1e8, true, true });
            std::uniform_int_distribution<std::size_t> node(0, m.nodeCount() - 1);
            for (int i = 0; i < 300; ++i) {
                auto b = node(rng);
                auto e = node(rng);
                if (b > e)
                    std::swap(b, e);
                ++e;
                const int stage = i % 4;
                const auto ev = m.evaluateUncached(b, e, stage);
                EXPECT_LE(m.minimumStaticBytes(b, e, stage), ev.staticBytes) << name << " [" << b << ", " << e << ")";
                EXPECT_LE(ev.staticBytes, ev.peakBytes);
            }
        }
    }
}

// parametersCanFit is exact for its bound over partitions whose stages may be empty (so never
// says no where a real partition fits): on a small graph, against trying every partition, at
// limits around each stage's state.
TEST(PlannerFastPaths, ParameterStateCheckAgreesWithEveryPartition)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 2;
    c.hidden = 64;
    c.heads = 2;
    c.vocab = 500;
    c.seq = 16;
    const auto graph = buildZooModel(c);
    const auto profile = estimateProfile(graph, a100Device(), {});
    const int S = 3;
    const auto spec = ScheduleSpec { ScheduleKind::PipeDream, S, 6, 1, 1 };
    const StageModel probe(graph, profile, spec, makeCluster(a100Device(), S), 1, {});
    const auto n = probe.nodeCount();
    const double whole = probe.minimumStaticBytes(0, n, 0);
    int yes = 0;
    int no = 0;
    for (double fraction = 0.05; fraction < 1.0; fraction += 0.03) {
        const StageModel m(graph, profile, spec, makeCluster(a100Device(), S), 1, { fraction * whole, true, true });
        const auto fits = [&](std::size_t a, std::size_t b) {
            return m.minimumStaticBytes(0, a, 0) <= m.capacityBytes()
                && m.minimumStaticBytes(a, b, 1) <= m.capacityBytes()
                && m.minimumStaticBytes(b, n, 2) <= m.capacityBytes();
        };
        bool relaxed = false;
        bool strict = false;
        for (std::size_t a = 0; a <= n; ++a) {
            for (std::size_t b = a; b <= n; ++b) {
                const bool f = fits(a, b);
                relaxed = relaxed || f;
                strict = strict || (f && a > 0 && b > a && b < n);
            }
        }
        EXPECT_EQ(m.parametersCanFit(), relaxed) << fraction;
        EXPECT_TRUE(!strict || m.parametersCanFit()) << fraction;
        (relaxed ? yes : no) += 1;
        if (!m.parametersCanFit()) {
            PlannerOptions o;
            const auto plan = findPlan(m, o);
            EXPECT_FALSE(plan.feasible);
            EXPECT_NE(plan.reason.find("optimizer states alone exceed it"), std::string::npos) << plan.reason;
        }
    }
    EXPECT_GT(yes, 3);
    EXPECT_GT(no, 3);
}

// PipeDream's later stages stash fewer weight versions, so a heavy last layer may fit only there:
// the check must not give up at the first stage it cannot join.
TEST(PlannerFastPaths, ParameterStateCheckLetsAHeavyLastLayerWaitForTheLastStage)
{
    GraphBuilder g(ModelInfo { "heavy-tail", "test", "{}", 4 });
    auto x = g.input("x", { 4, 16 }, DType::F32);
    x = g.op(OpType::MatMul, "fc0", { x, g.parameter("fc0.w", { 16, 16 }) });
    x = g.op(OpType::MatMul, "fc1", { x, g.parameter("fc1.w", { 16, 16 }) });
    x = g.op(OpType::MatMul, "fc2", { x, g.parameter("fc2.w", { 16, 4096 }) });
    const auto labels = g.input("labels", { 4 }, DType::I64);
    const auto graph = g.finish({ g.op(OpType::CrossEntropy, "loss", { x, labels }) });
    const auto profile = estimateProfile(graph, a100Device(), {});
    const auto spec = ScheduleSpec { ScheduleKind::PipeDream, 3, 6, 1, 1 };
    const StageModel probe(graph, profile, spec, makeCluster(a100Device(), 3), 1, {});
    const auto heavy = graph.nodeCount() - 2; // fc2
    // Room for fc2 as the last stage (one weight version), not as the middle one (two).
    const double limit =
        (probe.minimumStaticBytes(heavy, heavy + 1, 2) + probe.minimumStaticBytes(heavy, heavy + 1, 1)) / 2;
    ASSERT_LT(probe.minimumStaticBytes(heavy, heavy + 1, 2), limit);
    ASSERT_GT(probe.minimumStaticBytes(heavy, heavy + 1, 1), limit);
    const StageModel m(graph, profile, spec, makeCluster(a100Device(), 3), 1, { limit, true, true });
    EXPECT_TRUE(m.parametersCanFit());
}

// The bisected fill of the memory-balanced partition ends every stage where the linear scan did.
TEST(PlannerFastPaths, MemoryBalancedFillMatchesTheLinearScan)
{
    const auto linear = [](const StageModel& m, std::size_t b, std::size_t e, int first, int last) {
        const auto fill = [&](double target) {
            std::vector<std::size_t> starts { b };
            std::size_t from = b;
            for (int x = first; x < last; ++x) {
                std::size_t to = from + 1;
                const auto room = e - static_cast<std::size_t>(last - x);
                while (to < room && m.approxMemoryBytes(from, to + 1, x) <= target)
                    ++to;
                starts.push_back(to);
                from = to;
            }
            return std::make_pair(m.approxMemoryBytes(from, e, last) <= target, starts);
        };
        return detail::smallestFittingFill(m, b, e, first, last, fill);
    };
    for (const char* name : { "gpt2-small", "t5-small" }) {
        const auto graph = zooGraph(name);
        const auto profile = estimateProfile(graph, a100Device(), {});
        for (const int S : { 2, 5, 8 }) {
            const StageModel m(
                graph, profile, { ScheduleKind::OneFOneB, S, 2 * S, 1, 1 }, makeCluster(a100Device(), S), 4, {});
            const auto n = m.nodeCount();
            for (const auto& [b, e] : std::vector<std::pair<std::size_t, std::size_t>> {
                     { 0, n }, { 3, n - 5 }, { n / 3, n }, { 0, n / 2 } }) {
                EXPECT_EQ(detail::memoryBalancedStarts(m, b, e, 0, S - 1), linear(m, b, e, 0, S - 1))
                    << name << " " << S << " [" << b << ", " << e << ")";
            }
        }
    }
}

// The auto-search ranks the same plans in the same order on one thread and on several.
TEST(PlannerFastPaths, SearchRankingDoesNotDependOnThreads)
{
    const auto graph = zooGraph("gpt2-small");
    const auto profile = estimateProfile(graph, a100Device(), {});
    SearchRequest r;
    r.device = a100Device();
    for (const auto* s : { "gpipe", "1f1b", "kfkb:2", "zb-h1" })
        r.schedules.push_back(parseScheduleSpec(s, 4, 8));
    r.algorithms = { PlanAlgorithm::DawnPiper, PlanAlgorithm::PipeDream, PlanAlgorithm::GPipe };
    r.microBatchSizes = { 1, 2, 4, 8 };
    r.globalBatch = 64;
    r.limits.memoryLimitBytes = 2e9;
    std::vector<std::vector<Plan>> runs;
    for (const int threads : { 1, 2, 3 }) {
        r.threads = threads;
        std::vector<double> seen;
        runs.push_back(searchPlans(graph, profile, r, [&](double f) { seen.push_back(f); }));
        ASSERT_FALSE(seen.empty());
        EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end())) << threads << " threads";
        EXPECT_DOUBLE_EQ(seen.back(), 1.0);
    }
    ASSERT_EQ(runs[0].size(), 4U * 4U * 3U);
    for (std::size_t t = 1; t < runs.size(); ++t) {
        ASSERT_EQ(runs[t].size(), runs[0].size());
        for (std::size_t i = 0; i < runs[0].size(); ++i) {
            const auto& a = runs[0][i];
            const auto& b = runs[t][i];
            EXPECT_EQ(a.algorithm, b.algorithm) << i;
            EXPECT_EQ(scheduleName(a.schedule), scheduleName(b.schedule)) << i;
            EXPECT_EQ(a.microBatch, b.microBatch) << i;
            expectSamePlan(b, a, "rank " + std::to_string(i));
            ASSERT_EQ(a.simulation.has_value(), b.simulation.has_value());
            if (a.simulation) {
                EXPECT_EQ(a.simulation->iterationNs, b.simulation->iterationNs) << i;
            }
        }
    }
}

// Tasks run once each; the lowest-numbered failure is the one rethrown, whatever the threads.
TEST(PlannerFastPaths, ParallelForRunsEveryTaskAndRethrowsTheFirstFailure)
{
    for (const int threads : { 1, 2, 4 }) {
        std::vector<int> runs(100, 0);
        parallelFor(runs.size(), threads, [&](std::size_t i) { runs[i] += 1; });
        EXPECT_EQ(std::count(runs.begin(), runs.end(), 1), 100);
        try {
            parallelFor(50, threads, [](std::size_t i) {
                if (i == 7 || i == 30)
                    throw std::runtime_error("task " + std::to_string(i));
            });
            ADD_FAILURE() << "no exception";
        } catch (const std::runtime_error& e) {
            EXPECT_STREQ(e.what(), "task 7");
        }
    }
}

// Threads inside parallelFor tasks count as busy, once each however deeply the calls nest, and
// stop counting when their tasks end.
TEST(PlannerFastPaths, IdleThreadsLeaveOutThoseRunningTasks)
{
    const int all = defaultSearchThreads();
    EXPECT_EQ(idleSearchThreads(), all);
    std::vector<int> seen(2, -1);
    std::vector<int> nested(2, -1);
    std::atomic<int> started { 0 };
    std::atomic<int> done { 0 };
    parallelFor(2, 2, [&](std::size_t i) {
        ++started;
        while (started.load() < 2) // both tasks at once: each sees the other busy
            std::this_thread::yield();
        seen[i] = idleSearchThreads();
        parallelFor(1, 1, [&](std::size_t) { nested[i] = idleSearchThreads(); });
        ++done;
        while (done.load() < 2) // neither ends before the other has looked
            std::this_thread::yield();
    });
    for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(seen[i], std::max(0, all - 2)) << "task " << i;
        EXPECT_EQ(nested[i], seen[i]) << "a nested call counts its thread once";
    }
    EXPECT_EQ(idleSearchThreads(), all);
}

// onPlan sees every plan the search returns, once, on one thread or several.
TEST(PlannerFastPaths, EveryPlanIsStreamedOnce)
{
    const auto graph = zooGraph("gpt2-small");
    const auto profile = estimateProfile(graph, a100Device(), {});
    SearchRequest r;
    r.device = a100Device();
    r.schedules = { parseScheduleSpec("1f1b", 4, 8),
        parseScheduleSpec("interleaved:2", 4, 8) }; // the planner refuses it: an error row
    r.algorithms = { PlanAlgorithm::DawnPiper, PlanAlgorithm::GPipe };
    r.microBatchSizes = { 1, 2 };
    for (const int threads : { 1, 2 }) {
        r.threads = threads;
        std::vector<std::string> streamed;
        r.onPlan = [&](const Plan& p) {
            streamed.push_back(p.algorithm + " " + scheduleName(p.schedule) + " " + std::to_string(p.microBatch) + " "
                + p.partition.cutsText());
        };
        const auto plans = searchPlans(graph, profile, r);
        std::vector<std::string> returned;
        for (const auto& p : plans)
            returned.push_back(p.algorithm + " " + scheduleName(p.schedule) + " " + std::to_string(p.microBatch) + " "
                + p.partition.cutsText());
        std::sort(streamed.begin(), streamed.end());
        std::sort(returned.begin(), returned.end());
        EXPECT_EQ(streamed, returned) << threads << " threads";
        EXPECT_EQ(std::count_if(plans.begin(), plans.end(), [](const Plan& p) { return p.algorithm == "-"; }), 2)
            << "one error row per interleaved size";
        EXPECT_GE(returned.size(), 6U);
    }
}

// The range facts every StageModel of a graph shares (plan/range_facts.h): each memoised working
// set is the one computed afresh, the same facts serve a copy (same revision), and a changed graph
// gets its own (facts of another revision refuse to answer).
TEST(PlannerFastPaths, SharedRangeFactsEqualTheDirectComputation)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 2;
    c.dropout = 0.1;
    const auto graph = buildZooModel(c);
    const auto facts = RangeFacts::of(graph);
    const auto flow = gradientFlow(graph);
    const auto n = graph.nodeCount();
    for (int pass = 0; pass < 2; ++pass) { // the second pass reads the memo
        for (std::size_t b = 0; b < n; b += 3) {
            for (std::size_t e = b + 1; e <= n; e += 5) {
                for (const auto kind : { BackwardPass::Full, BackwardPass::InputOnly })
                    ASSERT_EQ(
                        facts->backwardWorking(graph, b, e, kind)->bytes, backwardWorkingBytes(graph, flow, b, e, kind))
                        << b << ".." << e;
                const auto growing = backwardWorkingProfile(graph, flow, b, e, BackwardPass::Full, true);
                ASSERT_EQ(facts->backwardWorking(graph, b, e, BackwardPass::Full, true)->peak(0.5, false),
                    growing.peak(0.5, false))
                    << b << ".." << e;
                ASSERT_EQ(facts->weightGradHeld(graph, b, e), weightGradHeldBytes(graph, flow, b, e)) << b << ".." << e;
            }
        }
    }
    const Graph copy = graph;
    EXPECT_EQ(copy.revision(), graph.revision());
    EXPECT_EQ(RangeFacts::of(copy), facts);
    auto changed = graph;
    changed.setOutputs(graph.outputs());
    EXPECT_NE(changed.revision(), graph.revision());
    EXPECT_EQ(changed, graph); // equal content compares equal whatever the revisions
    EXPECT_NE(RangeFacts::of(changed), facts);
    EXPECT_THROW((void)facts->backwardWorking(changed, 0, n, BackwardPass::Full), Error);
}

// The maximum micro-batch found trying 2 or 3 sizes at once is one size at a time's, with the same
// plan, for several algorithms, memory plans and limits (a limit at which nothing fits included).
TEST(PlannerFastPaths, MaxMicroBatchOnSeveralThreadsIsTheSequentialOne)
{
    const auto graph = zooGraph("gpt2-small");
    const auto profile = estimateProfile(graph, a100Device(), {});
    const ScheduleSpec spec { ScheduleKind::OneFOneB, 4, 8, 1, 1 };
    const auto cluster = makeCluster(a100Device(), 4);
    const double even =
        StageModel(graph, profile, spec, cluster, 16, {}).approxMemoryBytes(0, graph.nodeCount(), 0) / 4;
    std::set<int> sizes; // the answers: none, the limit's power of two, and ones found by bisection
    for (const auto algorithm : { PlanAlgorithm::DawnPiper, PlanAlgorithm::GPipe, PlanAlgorithm::PipeDream }) {
        for (const bool swapRecompute : { false, true }) {
            for (const double limit : { 0.0, 0.5 * even, 1e6 }) {
                PlannerOptions o;
                o.algorithm = algorithm;
                o.limits = { limit, swapRecompute, swapRecompute };
                const auto what = std::string(toString(algorithm)) + (swapRecompute ? " s+r" : "") + " limit "
                    + std::to_string(limit);
                const auto one = findMaxMicroBatch(graph, profile, spec, cluster, o, 300, 1);
                sizes.insert(one.microBatch);
                for (const int threads : { 2, 3 }) {
                    const auto many = findMaxMicroBatch(graph, profile, spec, cluster, o, 300, threads);
                    EXPECT_EQ(many.microBatch, one.microBatch) << what << ", " << threads << " threads";
                    expectSamePlan(many.plan, one.plan, what + ", " + std::to_string(threads) + " threads");
                }
            }
        }
    }
    EXPECT_TRUE(sizes.contains(0));
    EXPECT_GE(sizes.size(), 4U) << "the cases should reach the bisection with several answers";
    for (const int b : sizes)
        std::cout << "[ NOTE ] max micro-batch " << b << "\n";
}
