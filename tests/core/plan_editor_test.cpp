#include "plan/plan_editor.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

using namespace ps;

namespace {

struct Fixture
{
    Graph graph;
    Profile profile;
};

Fixture gpt2(int layers)
{
    auto c = zooPreset("gpt2-small");
    c.layers = layers;
    c.seq = 256;
    Fixture f { buildZooModel(c), {} };
    f.profile = estimateProfile(f.graph, DeviceCatalog::builtin().find("a100-40gb"), {});
    return f;
}

} // namespace

TEST(PlanEditor, MovingABoundaryMatchesTheCliSimulation)
{
    const auto f = gpt2(4);
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    PlanEditor editor(f.graph, f.profile, a100, { ScheduleKind::OneFOneB, 4, 8, 1, 1 }, 4);
    const auto before = editor.snapshot().simulation.iterationNs;
    const auto landed = editor.moveBoundary(1, editor.partition().stageStarts[1] + 10);
    EXPECT_EQ(editor.partition().stageStarts[1], landed);
    EXPECT_NE(editor.snapshot().simulation.iterationNs, before);
    // The CLI's path: stage costs from the graph, the same schedule and cluster, no memory plan
    // needed at this size.
    ASSERT_TRUE(editor.snapshot().plan.feasible);
    const auto stages = computeStageCosts(f.graph, f.profile, editor.partition(), 4);
    const auto schedule = generateSchedule({ ScheduleKind::OneFOneB, 4, 8, 1, 1 });
    const auto cli = simulate({ schedule, stages, editor.cluster(), {}, 4, {}, {} });
    EXPECT_NEAR(editor.snapshot().simulation.iterationNs, cli.iterationNs, 1e-6 * cli.iterationNs);
    // And every device's peak, the gradients the first backward after a step grows included.
    const auto& mine = editor.snapshot().simulation.devices;
    ASSERT_EQ(mine.size(), cli.devices.size());
    int growing = 0; // stages whose first backward adds bytes: the check is not over zeros alone
    for (std::size_t d = 0; d < mine.size(); ++d) {
        growing += editor.snapshot().stageCosts[d].firstBackwardExtraBytes > 0 ? 1 : 0;
        EXPECT_NEAR(editor.snapshot().stageCosts[d].firstBackwardExtraBytes, stages[d].firstBackwardExtraBytes,
            1e-6 * stages[d].firstBackwardExtraBytes + 1)
            << "stage " << d;
        EXPECT_NEAR(mine[d].peakBytes, cli.devices[d].peakBytes, 1e-6 * cli.devices[d].peakBytes) << "device " << d;
    }
    EXPECT_GE(growing, 2);
}

TEST(PlanEditor, BoundariesSnapIntoTheirLegalRange)
{
    const auto f = gpt2(2);
    PlanEditor editor(
        f.graph, f.profile, DeviceCatalog::builtin().find("a100-40gb"), { ScheduleKind::OneFOneB, 3, 6, 1, 1 }, 1);
    const auto [lo, hi] = editor.legalRange(1);
    EXPECT_EQ(lo, 1U);
    EXPECT_EQ(hi, editor.partition().stageStarts[2] - 1);
    EXPECT_EQ(editor.moveBoundary(1, 0), lo);
    EXPECT_EQ(editor.moveBoundary(1, 100000), hi);
    EXPECT_THROW((void)editor.legalRange(3), Error);
}

TEST(PlanEditor, AddAndRemoveStages)
{
    const auto f = gpt2(4);
    PlanEditor editor(
        f.graph, f.profile, DeviceCatalog::builtin().find("a100-40gb"), { ScheduleKind::OneFOneB, 2, 4, 1, 1 }, 2);
    editor.addStage();
    EXPECT_EQ(editor.partition().stageCount(), 3);
    EXPECT_EQ(editor.schedule().stages, 3);
    EXPECT_EQ(editor.snapshot().simulation.devices.size(), 3U);
    editor.removeStage(1);
    EXPECT_EQ(editor.partition().stageCount(), 2);
    EXPECT_THROW(editor.setPartition(Partition { { 0, 0 } }), Error);
}
