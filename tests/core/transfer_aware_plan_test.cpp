// The DawnPiper portfolio's cuts under schedules that wait on boundary transfers: 1F1B's steady
// state waits on each boundary's round trip, so on a slow link PipeStudio's planner charges a stage
// the transfers of its cuts (exposedTransferNs) and tries each seed with its cuts moved to narrow
// waists (narrowWaistCuts); Algorithm 1 as published ("dawnpiper-paper") leaves the transfers out.
#include "cost/profile.h"
#include "cost/training_setup.h"
#include "plan/partition_search.h"
#include "plan/planner.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

using namespace ps;
using ps::detail::exposedTransferNs;
using ps::detail::narrowWaistCuts;

namespace {

// GPT-2 medium cut to eight layers on four V100s in fp16, one per machine over a 100 Gb/s link
// (Ada-Grouper's setting, as its quick report runs it), micro-batch 6, 32 micro-batches.
struct SlowLinkGpt
{
    Graph graph;
    Profile profile;
    Cluster cluster;

    explicit SlowLinkGpt(double bandwidth = 12.5e9)
        : graph(buildZooModel([] {
            auto config = zooPreset("gpt2-medium");
            config.layers = 8;
            return config;
        }()))
        , profile([this] {
            CostModelOptions costs;
            costs.setup.precision = Precision::Fp16;
            return estimateProfile(graph, DeviceCatalog::builtin().find("v100-32gb"), costs);
        }())
        , cluster(makeCluster(DeviceCatalog::builtin().find("v100-32gb"), 4, 1))
    {
        cluster.interNode = { "roce-100g", bandwidth, 5e-6 };
    }

    [[nodiscard]] Plan plan(PlanAlgorithm algorithm, ScheduleKind kind = ScheduleKind::OneFOneB, int m = 32) const
    {
        ScheduleSpec schedule { kind, 4, m, 1, 1 };
        const StageModel model(graph, profile, schedule, cluster, 6, {});
        PlannerOptions options;
        options.algorithm = algorithm;
        auto p = findPlan(model, options);
        if (p.feasible)
            p.simulation = simulatePlan(p, graph, profile, cluster);
        return p;
    }
};

double widestCut(const StageModel& model, const Partition& p)
{
    double bytes = 0;
    for (std::size_t s = 1; s < p.stageStarts.size(); ++s)
        bytes = std::max(bytes, model.cutBytes(p.stageStarts[s]));
    return bytes;
}

} // namespace

// Worked by hand: a cut's wait is its activations and their gradient over the link plus two
// latencies, once per micro-batch under 1F1B, once per group of k under kFkB, never under GPipe.
TEST(TransferAwarePlan, A1F1BStageWaitsOnItsBoundarysRoundTrip)
{
    const SlowLinkGpt gpt;
    const StageModel oneF1B(gpt.graph, gpt.profile, { ScheduleKind::OneFOneB, 4, 32, 1, 1 }, gpt.cluster, 6, {});
    const std::size_t cut = gpt.graph.nodeCount() / 2;
    ASSERT_GT(oneF1B.cutBytes(cut), 0);
    EXPECT_LE(oneF1B.cutGradBytes(cut), oneF1B.cutBytes(cut));
    const double byHand = 1e9 * ((oneF1B.cutBytes(cut) + oneF1B.cutGradBytes(cut)) / 12.5e9 + 2 * 5e-6);
    EXPECT_NEAR(exposedTransferNs(oneF1B, cut, 1), byHand, 1e-6 * byHand);
    const StageModel kfkb(gpt.graph, gpt.profile, { ScheduleKind::KFKB, 4, 32, 4, 1 }, gpt.cluster, 6, {});
    EXPECT_NEAR(exposedTransferNs(kfkb, cut, 1), byHand / 4, 1e-6 * byHand);
    const StageModel gpipe(gpt.graph, gpt.profile, { ScheduleKind::GPipe, 4, 32, 1, 1 }, gpt.cluster, 6, {});
    EXPECT_EQ(exposedTransferNs(gpipe, cut, 1), 0);
    // The narrowest cut nearby (windows apart, so none is clipped): no wider both ways than the cut
    // it moves, the narrowest of its window, in order.
    const auto both = [&](std::size_t c) { return oneF1B.cutBytes(c) + oneF1B.cutGradBytes(c); };
    const std::vector<std::size_t> starts { 0, cut - 9, cut, cut + 9 };
    const std::size_t window = 4;
    const auto moved = narrowWaistCuts(oneF1B, starts, window);
    ASSERT_EQ(moved.size(), starts.size());
    for (std::size_t s = 1; s < moved.size(); ++s) {
        EXPECT_LE(both(moved[s]), both(starts[s])) << s;
        EXPECT_GT(moved[s], moved[s - 1]) << s;
        EXPECT_LE(moved[s] > starts[s] ? moved[s] - starts[s] : starts[s] - moved[s], window) << s;
        for (auto c = starts[s] - window; c <= starts[s] + window; ++c)
            EXPECT_GE(both(c), both(moved[s])) << s << " " << c;
    }
}

// On the slow link Algorithm 1 cuts inside attention (its scores cross) and 1F1B waits on those
// transfers every micro-batch; the portfolio's plan sends less and simulates faster. On a link a
// thousand times faster the transfers cost nothing and the portfolio is no slower than Algorithm 1.
TEST(TransferAwarePlan, OneFOneBCutsOnASlowLinkSendLessAndRunFaster)
{
    const SlowLinkGpt slow;
    const auto ours = slow.plan(PlanAlgorithm::DawnPiper);
    const auto paper = slow.plan(PlanAlgorithm::DawnPiperPaper);
    ASSERT_TRUE(ours.feasible && paper.feasible);
    const StageModel model(slow.graph, slow.profile, { ScheduleKind::OneFOneB, 4, 32, 1, 1 }, slow.cluster, 6, {});
    EXPECT_LT(widestCut(model, ours.partition), widestCut(model, paper.partition))
        << ours.partition.cutsText() << " vs " << paper.partition.cutsText();
    EXPECT_LT(ours.simulation->iterationNs, 0.9 * paper.simulation->iterationNs)
        << ours.partition.cutsText() << " (" << ours.seed << ") vs " << paper.partition.cutsText();

    const SlowLinkGpt fast(12.5e12);
    const auto oursFast = fast.plan(PlanAlgorithm::DawnPiper);
    const auto paperFast = fast.plan(PlanAlgorithm::DawnPiperPaper);
    ASSERT_TRUE(oursFast.feasible && paperFast.feasible);
    EXPECT_LE(oursFast.simulation->iterationNs, 1.001 * paperFast.simulation->iterationNs);
    // GPipe keeps the next micro-batch's forward behind a transfer: no seed is narrowed for it.
    const auto gpipe = slow.plan(PlanAlgorithm::DawnPiper, ScheduleKind::GPipe, 4);
    ASSERT_TRUE(gpipe.feasible);
    EXPECT_EQ(gpipe.seed.find("narrowed"), std::string::npos) << gpipe.seed;
}

// Where the transfers bound the cycle (T5-base on four V100s over 10 Gb/s: a boundary's round trip
// outlasts a stage's compute), how they compound along the chain is the simulator's to say: the
// portfolio ranks its finalists by the simulated iteration, and its plan simulates no slower than
// any other algorithm's, equal-layer cuts included.
TEST(TransferAwarePlan, WhereTransfersBoundTheCycleThePortfolioRanksBySimulation)
{
    const auto graph = buildZooModel(zooPreset("t5-base"));
    CostModelOptions costs;
    costs.setup.precision = Precision::Fp16;
    const auto& v100 = DeviceCatalog::builtin().find("v100-32gb");
    const auto profile = estimateProfile(graph, v100, costs);
    auto cluster = makeCluster(v100, 4, 1);
    cluster.interNode = { "eth-10g", 1.25e9, 2e-5 };
    const StageModel model(graph, profile, { ScheduleKind::OneFOneB, 4, 8, 1, 1 }, cluster, 4, {});
    const auto planned = [&](PlanAlgorithm algorithm) {
        PlannerOptions options;
        options.algorithm = algorithm;
        auto p = findPlan(model, options);
        EXPECT_TRUE(p.feasible) << p.reason;
        return p.feasible ? simulatePlan(p, graph, profile, cluster).iterationNs : 0.0;
    };
    PlannerOptions options;
    const auto ours = findPlan(model, options);
    ASSERT_TRUE(ours.feasible);
    EXPECT_NE(ours.seed.find("(simulated)"), std::string::npos) << ours.seed;
    const double oursNs = simulatePlan(ours, graph, profile, cluster).iterationNs;
    for (const auto other : { PlanAlgorithm::GPipe, PlanAlgorithm::DawnPiperPaper, PlanAlgorithm::PipeDream,
             PlanAlgorithm::ComputeBalanced }) {
        EXPECT_LE(oursNs, planned(other) * 1.001) << static_cast<int>(other);
    }
}
