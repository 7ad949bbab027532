// The pipeline runtime against single-device training: every synchronous schedule, on 2 and 4 CPU
// devices, with and without swap and recompute plans, must give the single-device loss sequence and
// the same parameters (gradient accumulation over the same micro-batches in the same order).
#include "graph/op_cost.h"
#include "runtime/training_run.h"
#include "sim/memory_model.h"
#include "trainer.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>

using namespace ps;
using namespace ps::engine;

namespace {

constexpr int kSteps = 20;

Graph tinyGpt()
{
    auto c = zooPreset("gpt2-tiny"); // 2 layers, 64 wide, byte vocabulary, dropout 0
    c.seq = 32;
    c.microBatch = 2;
    return buildZooModel(c);
}

Graph gpt4x128()
{
    auto c = zooPreset("gpt2-tiny");
    c.name = "gpt-4x128";
    c.layers = 4;
    c.hidden = 128;
    c.heads = 4;
    c.seq = 32;
    c.microBatch = 2;
    return buildZooModel(c);
}

TokenData corpus()
{
    return TokenData::random(256, 1 << 16, 11); // not the default corpus: tests must not depend on it
}

struct Outcome
{
    std::vector<double> losses;
    std::vector<std::pair<TensorId, std::vector<float>>> params;
};

std::vector<float> asFloats(const std::vector<std::byte>& bytes)
{
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
}

Outcome singleDevice(const Graph& graph, int microBatches, const std::string& optimizer = "sgd")
{
    TrainOptions o;
    o.accumulation = microBatches;
    o.optimizer.kind = optimizer;
    o.optimizer.lr = optimizer == "sgd" ? 0.05 : 3e-3;
    o.seed = 5;
    Trainer trainer(graph, corpus(), o);
    Outcome out;
    for (int s = 0; s < kSteps; ++s)
        out.losses.push_back(trainer.step().loss);
    for (const auto& [id, bytes] : trainer.parameterBytes())
        out.params.emplace_back(id, asFloats(bytes));
    return out;
}

// Contiguous stages with about equal node counts.
Partition evenCuts(const Graph& graph, int stages)
{
    Partition p;
    for (int s = 0; s < stages; ++s)
        p.stageStarts.push_back(graph.nodeCount() * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages));
    return p;
}

RunConfig configFor(
    const Graph& graph, const std::string& schedule, int stages, int microBatches, const std::string& optimizer = "sgd")
{
    RunConfig c;
    c.schedule = parseScheduleSpec(schedule, stages, microBatches);
    c.partition = evenCuts(graph, stages);
    c.optimizer.kind = optimizer;
    c.optimizer.lr = optimizer == "sgd" ? 0.05 : 3e-3;
    c.seed = 5;
    return c;
}

Outcome pipeline(const Graph& graph, const RunConfig& config, const std::string& devices)
{
    TrainingRun run(graph, corpus(), makeDevices(devices, 0), config);
    Outcome out;
    for (int s = 0; s < kSteps; ++s)
        out.losses.push_back(run.step().loss);
    for (auto id : run.runner().parameterIds())
        out.params.emplace_back(id, asFloats(run.runner().parameterBytes(id)));
    return out;
}

// Parameters are compared per tensor by the relative L2 norm of the difference. Under AdamW the
// coordinates whose gradient is only rounding noise (GPT's key bias: softmax ignores it) move by
// about lr whatever the noise, so summing a tied weight's two gradients in another order (the
// pipeline adds each stage's sum; one device adds micro-batch by micro-batch) shows there; SGD
// does not amplify noise, so its tolerance is the 1e-5.
void expectSame(const Outcome& ref, const Outcome& got, const std::string& what, double paramTolerance = 1e-5)
{
    ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
    for (std::size_t i = 0; i < ref.losses.size(); ++i)
        EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << what << " step " << i + 1;
    ASSERT_EQ(ref.params.size(), got.params.size()) << what;
    double worst = 0;
    std::uint32_t worstId = 0;
    for (std::size_t k = 0; k < ref.params.size(); ++k) {
        ASSERT_EQ(ref.params[k].first, got.params[k].first) << what;
        const auto& a = ref.params[k].second;
        const auto& b = got.params[k].second;
        ASSERT_EQ(a.size(), b.size());
        double diff = 0;
        double norm = 0;
        for (std::size_t i = 0; i < a.size(); ++i) {
            diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
            norm += double(a[i]) * double(a[i]);
        }
        const double rel = std::sqrt(diff) / std::max(1e-12, std::sqrt(norm));
        if (rel > worst) {
            worst = rel;
            worstId = ref.params[k].first.value;
        }
    }
    std::cout << "[ NOTE ] " << what << ": largest relative parameter difference " << worst << " (tensor " << worstId
              << ")\n";
    EXPECT_LT(worst, paramTolerance) << what << ": tensor " << worstId;
}

// Swap every other saved storage of each stage and recompute the rest that the stage produces.
std::vector<StageMemoryPlan> swapAndRecompute(const Graph& graph, const Partition& partition)
{
    const auto costs = computeOpCosts(graph);
    std::vector<StageMemoryPlan> plans;
    for (int s = 0; s < partition.stageCount(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        const auto begin = partition.stageBegin(id);
        const auto end = partition.stageEnd(id, graph.nodeCount());
        StageMemoryPlan p;
        std::vector<TensorId> seen;
        for (std::size_t n = begin; n < end; ++n) {
            for (auto t : costs[n].savedTensors) {
                const auto root = storageRoot(graph, t);
                if (std::find(seen.begin(), seen.end(), root) != seen.end())
                    continue;
                seen.push_back(root);
                const auto& rt = graph.tensor(root);
                if (rt.kind != TensorKind::Activation)
                    continue;
                const bool here = rt.producer.valid() && rt.producer.index() >= begin && rt.producer.index() < end;
                if (seen.size() % 2 == 0 || !here)
                    p.swappedTensors.push_back(root);
                else
                    p.recomputedTensors.push_back(root);
            }
        }
        plans.push_back(p);
    }
    return plans;
}

struct Case
{
    std::string schedule;
    int devices;
    int stages;
};

class PipelineEquivalence : public ::testing::TestWithParam<Case>
{
};

} // namespace

TEST_P(PipelineEquivalence, MatchesSingleDeviceOnTinyGpt)
{
    const auto& c = GetParam();
    const auto graph = tinyGpt();
    const int M = 4;
    const auto ref = singleDevice(graph, M);
    const auto got = pipeline(graph, configFor(graph, c.schedule, c.stages, M), "cpu:" + std::to_string(c.devices));
    expectSame(ref, got, c.schedule + " on " + std::to_string(c.devices) + " devices");
}

INSTANTIATE_TEST_SUITE_P(Schedules, PipelineEquivalence,
    ::testing::Values(Case { "gpipe", 2, 2 }, Case { "1f1b", 2, 2 }, Case { "kfkb:2", 2, 2 },
        Case { "interleaved:2", 2, 4 }, Case { "zb-h1", 2, 2 }, Case { "gpipe", 4, 4 }, Case { "1f1b", 4, 4 },
        Case { "kfkb:2", 4, 4 }, Case { "interleaved:2", 4, 8 }, Case { "zb-h1", 4, 4 }),
    [](const ::testing::TestParamInfo<Case>& param) {
        auto name = param.param.schedule + "_" + std::to_string(param.param.devices) + "dev";
        for (auto& ch : name) {
            if (!std::isalnum(static_cast<unsigned char>(ch)))
                ch = '_';
        }
        return name;
    });

TEST(Pipeline, FourLayerGptMatchesSingleDeviceWithSwapAndRecompute)
{
    const auto graph = gpt4x128();
    const int M = 4;
    const auto ref = singleDevice(graph, M, "adamw");
    for (const auto* schedule : { "1f1b", "zb-h1" }) {
        auto config = configFor(graph, schedule, 4, M, "adamw");
        expectSame(ref, pipeline(graph, config, "cpu:4"), std::string(schedule) + " keep-all", 1e-3);
        config.memory = swapAndRecompute(graph, config.partition);
        ASSERT_FALSE(config.memory[1].swappedTensors.empty());
        ASSERT_FALSE(config.memory[1].recomputedTensors.empty());
        expectSame(ref, pipeline(graph, config, "cpu:4"), std::string(schedule) + " with swap and recompute", 1e-3);
    }
}

TEST(Pipeline, SwapAndRecomputeLowerThePeak)
{
    const auto graph = gpt4x128();
    auto config = configFor(graph, "gpipe", 2, 4);
    TrainingRun keep(graph, corpus(), makeDevices("cpu:2", 0), config);
    const auto a = keep.step();
    config.memory = swapAndRecompute(graph, config.partition);
    TrainingRun planned(graph, corpus(), makeDevices("cpu:2", 0), config);
    const auto b = planned.step();
    for (std::size_t d = 0; d < 2; ++d)
        EXPECT_LT(b.devicePeakBytes[d], a.devicePeakBytes[d]) << "device " << d;
    bool sawSwap = false;
    bool sawRecompute = false;
    for (const auto& e : b.events) {
        sawSwap = sawSwap || e.action == ActionType::SwapOut;
        sawRecompute = sawRecompute || e.action == ActionType::Recompute;
    }
    EXPECT_TRUE(sawSwap);
    EXPECT_TRUE(sawRecompute);
}

TEST(Pipeline, NonAdjacentStagesShareADevice)
{
    // FTPipe's Mixed-pipe: device 0 holds stages 0 and 2, device 1 stages 1 and 3.
    const auto graph = tinyGpt();
    const auto ref = singleDevice(graph, 4);
    auto config = configFor(graph, "1f1b", 4, 4);
    config.stageDevices = { DeviceId(0), DeviceId(1), DeviceId(0), DeviceId(1) };
    expectSame(ref, pipeline(graph, config, "cpu:2"), "stage map 0,1,0,1");
}

TEST(Pipeline, PipeDreamStashesTheModelledWeightVersionsAndLearns)
{
    auto c = zooPreset("gpt2-tiny");
    c.seq = 32;
    c.microBatch = 4;
    const auto graph = buildZooModel(c);
    auto config = configFor(graph, "pipedream", 2, 4);
    config.optimizer = StageOptimizerConfig { "adamw", 1e-3 };
    TrainingRun run(graph, TokenData::fromTextFile(PS_SOURCE_DIR "/README.md"), makeDevices("cpu:2", 0), config);
    const double first = run.step().loss;
    double last = first;
    for (int s = 0; s < 30; ++s)
        last = run.step().loss;
    EXPECT_LT(last, first - 0.5) << "PipeDream's loss should fall";
    for (int s = 0; s < 2; ++s)
        EXPECT_EQ(run.runner().stages()[static_cast<std::size_t>(s)]->peakWeightVersions(),
            weightVersions(config.schedule, s))
            << "stage " << s;
}

TEST(Pipeline, StageOverCapacityFailsNamingDeviceStageAndNode)
{
    const auto graph = tinyGpt();
    auto config = configFor(graph, "1f1b", 2, 4);
    try {
        TrainingRun run(graph, corpus(), makeDevices("cpu:2", 900 * 1024), config);
        run.step();
        FAIL() << "expected an out-of-memory error";
    } catch (const OutOfMemoryError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("out of memory on cpu:"), std::string::npos) << what;
        EXPECT_NE(what.find("stage "), std::string::npos) << what;
        EXPECT_NE(what.find("node '"), std::string::npos) << what;
        EXPECT_NE(what.find("MiB"), std::string::npos) << what;
    }
}

TEST(Pipeline, ResumeContinuesTheSameLossSequence)
{
    const auto graph = tinyGpt();
    auto config = configFor(graph, "1f1b", 2, 4);
    config.warmupSteps = 3;
    config.decaySteps = 20;
    TrainingRun straight(graph, corpus(), makeDevices("cpu:2", 0), config);
    std::vector<double> expected;
    for (int s = 0; s < 20; ++s)
        expected.push_back(straight.step().loss);
    TrainingRun first(graph, corpus(), makeDevices("cpu:2", 0), config);
    for (int s = 0; s < 10; ++s)
        EXPECT_DOUBLE_EQ(first.step().loss, expected[static_cast<std::size_t>(s)]);
    const auto checkpoint = first.checkpoint();
    TrainingRun resumed(graph, corpus(), makeDevices("cpu:2", 0), config);
    resumed.restore(checkpoint);
    for (int s = 10; s < 20; ++s)
        EXPECT_DOUBLE_EQ(resumed.step().loss, expected[static_cast<std::size_t>(s)]) << "step " << s + 1;
}

TEST(Pipeline, PlaceStagesKeepsEveryActionAndDeviceOrder)
{
    const auto perStage = generateSchedule(parseScheduleSpec("1f1b", 4, 4));
    const auto placed = placeStages(perStage, { DeviceId(0), DeviceId(1), DeviceId(0), DeviceId(1) });
    ASSERT_EQ(placed.devices.size(), 2U);
    EXPECT_EQ(placed.actionCount(), perStage.actionCount());
    EXPECT_EQ(placed.deviceOf(StageId(2)), DeviceId(0));
    EXPECT_THROW((void)placeStages(perStage, { DeviceId(0), DeviceId(2), DeviceId(0), DeviceId(2) }), Error);
}

TEST(Pipeline, DeviceSpecs)
{
    EXPECT_EQ(makeDevices("cpu", 0).size(), 1U);
    const auto four = makeDevices("cpu:4", 1 << 20);
    ASSERT_EQ(four.size(), 4U);
    EXPECT_EQ(four[3].name, "cpu:3");
    EXPECT_EQ(four[3].memory->capacity(), 1 << 20);
    EXPECT_THROW((void)makeDevices("cpu:0", 0), Error);
    EXPECT_THROW((void)makeDevices("tpu:2", 0), Error);
}
