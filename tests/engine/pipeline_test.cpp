// The pipeline runtime against single-device training: every synchronous schedule, on 2 and 4 CPU
// devices, with and without swap and recompute plans, must give the single-device loss sequence and
// the same parameters (gradient accumulation over the same micro-batches in the same order).
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "graph/op_cost.h"
#include "onnx/onnx_import.h"
#include "plan/partition.h"
#include "runtime/training_run.h"
#include "sim/memory_model.h"
#include "sim/simulator.h"
#include "trainer.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
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

// The memory model against the allocator: what the planner promises is what the run uses. Bytes,
// unlike times, do not depend on the machine, so this holds on any host (the 5%).
TEST(Pipeline, MeasuredPeakMemoryIsTheSimulatorsPrediction)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 4;
    c.heads = 2;
    c.maxPositions = 128;
    c.seq = 128; // activations weigh as much as the weights and their optimizer state
    c.microBatch = 2;
    const auto graph = buildZooModel(c);
    const auto device = DeviceCatalog::builtin().find("a100-40gb");
    CostModelOptions options; // fp32 weights, Adam: what the runtime's AdamW holds
    const auto profile = estimateProfile(graph, device, options);
    for (const auto& [schedule, stages] : std::vector<std::pair<std::string, int>> { { "gpipe", 2 }, { "1f1b", 2 },
             { "kfkb:2", 2 }, { "interleaved:2", 4 }, { "zb-h1", 2 }, { "pipedream", 2 } }) {
        auto config = configFor(graph, schedule, stages, 4, "adamw");
        TrainingRun run(graph, corpus(), makeDevices("cpu:2", 0), config);
        std::vector<std::int64_t> measured(2, 0);
        std::vector<MemoryByUse> uses(2);
        for (int step = 0; step < 2; ++step) { // the first step creates the optimizer state
            const auto r = run.step();
            for (std::size_t d = 0; d < 2; ++d) {
                if (r.devicePeakBytes[d] > measured[d]) {
                    measured[d] = r.devicePeakBytes[d];
                    uses[d] = r.devicePeakByUse[d];
                }
            }
        }
        const auto costs = computeStageCosts(graph, profile, config.partition, c.microBatch);
        const auto predicted = simulate({ withCommunication(runtimeSchedule(config)), costs, makeCluster(device, 2),
            profile.setup, static_cast<double>(c.microBatch), config.memory, { true, true } });
        for (std::size_t d = 0; d < 2; ++d) {
            const double error = predicted.devices[d].peakBytes / static_cast<double>(measured[d]) - 1;
            const auto& m = predicted.devices[d].memory;
            std::string breakdown;
            for (std::size_t u = 0; u < kMemoryUses; ++u)
                breakdown += " " + std::string(toString(static_cast<MemoryUse>(u))) + " " + std::to_string(uses[d][u]);
            EXPECT_LT(std::abs(error), 0.05)
                << schedule << " device " << d << ": predicted " << predicted.devices[d].peakBytes << " B (parameters "
                << m.parameters + m.stashedWeights << ", gradients " << m.gradients << ", optimizer states "
                << m.optimizerStates << ", activations " << m.activations << ", workspace " << m.workspace
                << "), measured " << measured[d] << " B (" << breakdown << ")";
        }
    }
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

// ---- Every op family through the stage executor ----
//
// The runtime releases after forward what op_cost does not list as saved, swaps and recomputes
// storages, and feeds graph inputs per stage; each backward kernel must then read only what it
// kept. One SGD step of a 2-stage 1F1B pipeline (keep-all, and swap + recompute) is compared with
// the whole graph on one executor for the zoo families (GPT-2, BERT, T5, MLP) and, where the
// fixtures exist, PyTorch's ONNX exports (transformer layers, ResNet-18) with a mean-square loss.

namespace {

std::int64_t indexBound(const Graph& g, TensorId input)
{
    std::int64_t bound = 0;
    for (const auto& node : g.nodes()) {
        std::int64_t b = 0;
        if (node.op == OpType::Embedding && node.inputs[0] == input)
            b = g.tensor(node.inputs[1]).shape.front();
        if (node.op == OpType::CrossEntropy && node.inputs.size() > 1 && node.inputs[1] == input)
            b = g.tensor(node.inputs[0]).shape.back();
        if (b > 0)
            bound = bound == 0 ? b : std::min(bound, b);
    }
    return bound == 0 ? 2 : bound;
}

std::vector<HostBatch> randomBatches(const Graph& g, int microBatches)
{
    std::mt19937_64 rng(17);
    std::normal_distribution<float> normal(0.0F, 1.0F);
    std::vector<HostBatch> batches(static_cast<std::size_t>(microBatches));
    for (auto& b : batches) {
        for (const auto& t : g.tensors()) {
            if (t.kind != TensorKind::Input)
                continue;
            const auto n = static_cast<std::size_t>(numElements(t.shape));
            if (t.dtype == DType::I64) {
                std::vector<std::int64_t> v(n);
                const auto bound = static_cast<std::uint64_t>(indexBound(g, t.id));
                for (auto& x : v)
                    x = static_cast<std::int64_t>(rng() % bound);
                b.inputs.emplace_back(t.name, std::move(v));
            } else {
                std::vector<float> v(n);
                const bool mask = t.name.find("mask") != std::string::npos;
                for (std::size_t i = 0; i < n; ++i)
                    v[i] = mask ? (i % 5 == 4 ? 0.0F : 1.0F) : normal(rng);
                b.floatInputs.emplace_back(t.name, std::move(v));
            }
        }
    }
    return batches;
}

using ParamValues = std::map<std::uint32_t, std::vector<float>>;

StageOptimizerConfig plainSgd()
{
    StageOptimizerConfig o;
    o.kind = "sgd";
    o.lr = 0.5;
    o.momentum = 0;
    o.weightDecay = 0;
    return o;
}

// Initial parameters, the per-micro-batch losses and the parameters after one step on one executor.
struct WholeGraph
{
    ParamValues initial, updated;
    std::vector<double> losses;
};

WholeGraph wholeGraphStep(const Graph& g, const std::vector<HostBatch>& batches)
{
    GraphExecutor ex(g, ExecutorOptions { 5, 0, true });
    const auto sgd = plainSgd();
    engine::Optimizer opt(
        ex, OptimizerConfig { sgd.kind, sgd.lr, sgd.beta1, sgd.beta2, sgd.eps, sgd.weightDecay, sgd.momentum });
    WholeGraph out;
    for (auto id : ex.parameterIds())
        out.initial[id.value] = asFloats(ex.backend().toHost(ex.parameter(id)));
    for (const auto& b : batches) {
        const auto shapeOf = [&](const std::string& name) {
            for (const auto& t : g.tensors()) {
                if (t.kind == TensorKind::Input && t.name == name)
                    return t.shape;
            }
            throw Error("no input " + name);
        };
        for (const auto& [name, v] : b.inputs)
            ex.setInput(
                name, ex.backend().fromHost(ex.allocator(), shapeOf(name), DType::I64, std::as_bytes(std::span(v))));
        for (const auto& [name, v] : b.floatInputs)
            ex.setInput(
                name, ex.backend().fromHost(ex.allocator(), shapeOf(name), DType::F32, std::as_bytes(std::span(v))));
        out.losses.push_back(ex.forward());
        ex.backward();
        ex.releaseActivations();
    }
    opt.step(1.0F / static_cast<float>(batches.size()));
    for (auto id : ex.parameterIds())
        out.updated[id.value] = asFloats(ex.backend().toHost(ex.parameter(id)));
    return out;
}

// Compares the pipeline's update (its parameters minus the initial ones) with the whole graph's,
// per parameter by relative L2 norm; a kernel that read a released value throws instead.
void expectSameStep(const Graph& g, const std::vector<StageMemoryPlan>& memory, const std::string& what)
{
    const int M = 3;
    const auto batches = randomBatches(g, M);
    const auto ref = wholeGraphStep(g, batches);
    RunConfig config;
    config.schedule = parseScheduleSpec("1f1b", 2, M);
    config.partition = evenCuts(g, 2);
    config.memory = memory;
    auto devices = makeDevices("cpu:2", 0);
    PipelineRunner runner(g, PipelineSpec { config.partition, runtimeSchedule(config), memory }, devices,
        RunnerOptions { 5, plainSgd(), false });
    for (auto id : runner.parameterIds())
        runner.setParameter(id, std::as_bytes(std::span(ref.initial.at(id.value))));
    const auto result = runner.run(batches, plainSgd().lr, 0);
    for (int m = 0; m < M; ++m)
        EXPECT_NEAR(result.microBatchLosses[static_cast<std::size_t>(m)], ref.losses[static_cast<std::size_t>(m)],
            1e-5 * std::max(1.0, std::abs(ref.losses[static_cast<std::size_t>(m)])))
            << what << " micro-batch " << m;
    double worst = 0;
    std::string worstName;
    int compared = 0;
    for (auto id : runner.parameterIds()) {
        const auto got = asFloats(runner.parameterBytes(id));
        const auto& p0 = ref.initial.at(id.value);
        const auto& p1 = ref.updated.at(id.value);
        double diff = 0;
        double norm = 0;
        for (std::size_t i = 0; i < p0.size(); ++i) {
            const double want = double(p1[i]) - double(p0[i]);
            const double have = double(got[i]) - double(p0[i]);
            diff += (want - have) * (want - have);
            norm += want * want;
        }
        if (norm < 1e-20)
            continue; // no gradient reaches it (GPT's key bias under softmax is rounding only)
        const double rel = std::sqrt(diff / norm);
        ++compared;
        if (rel >= worst) {
            worst = rel;
            worstName = g.tensor(id).name;
        }
    }
    std::cout << "[ NOTE ] " << what << ": " << compared << " of " << runner.parameterIds().size()
              << " parameters updated, largest relative update difference " << worst << " (" << worstName << ")\n";
    EXPECT_GT(compared, 0) << what;
    EXPECT_LT(worst, 1e-3) << what << ": " << worstName;
}

void expectEveryPlanMatches(const Graph& g, const std::string& what)
{
    expectSameStep(g, {}, what + ", keep everything");
    const auto plans = swapAndRecompute(g, evenCuts(g, 2));
    ASSERT_FALSE(plans[0].recomputedTensors.empty()) << what;
    expectSameStep(g, plans, what + ", swap and recompute");
}

ModelConfig small(const std::string& preset)
{
    auto c = zooPreset(preset);
    c.layers = 2;
    c.decoderLayers = c.family == ModelFamily::T5 ? 2 : 0;
    c.hidden = 64;
    c.heads = 4;
    c.headDim = 0;
    c.ffn = 0;
    c.seq = 16;
    c.decoderSeq = 0;
    c.vocab = c.family == ModelFamily::Mlp ? 10 : 300;
    c.maxPositions = c.family == ModelFamily::Mlp ? 0 : 32;
    c.relativeBuckets = 8;
    c.microBatch = 2;
    c.dropout = 0;
    return c;
}

} // namespace

TEST(PipelineOps, ZooFamiliesMatchTheWholeGraph)
{
    for (const auto* preset : { "gpt2-small", "bert-base", "t5-small", "mlp" })
        expectEveryPlanMatches(buildZooModel(small(preset)), preset);
}

TEST(PipelineOps, OnnxExportsMatchTheWholeGraph)
{
    const char* dir = std::getenv("PS_ONNX_FIXTURES");
    if (!dir || !std::filesystem::exists(std::filesystem::path(dir) / "manifest.json"))
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    const auto manifest = nlohmann::json::parse(std::ifstream(std::filesystem::path(dir) / "manifest.json"));
    int checked = 0;
    for (const auto& e : manifest) {
        const auto name = e["name"].get<std::string>();
        if (name == "vit_b_16" || e["opset"].get<int>() != 17)
            continue;
        const auto input = e["input_shapes"][0];
        OnnxImportOptions o;
        o.batch = input[0].get<std::int64_t>();
        o.sequence = input.size() > 2 ? input[1].get<std::int64_t>() : 1;
        auto g = importOnnx(std::filesystem::path(dir) / e["file"].get<std::string>(), o).graph;
        // loss = mean(output^2): a scalar to backpropagate from
        const auto out = g.outputs().front();
        Tensor sqTensor;
        sqTensor.name = "loss.square";
        sqTensor.shape = g.tensor(out).shape;
        const auto sq = g.addTensor(sqTensor);
        Tensor lossTensor;
        lossTensor.name = "loss";
        const auto loss = g.addTensor(lossTensor);
        Node square;
        square.name = "loss.square";
        square.op = OpType::Mul;
        square.inputs = { out, out };
        square.outputs = { sq };
        g.addNode(square);
        Node mean;
        mean.name = "loss.mean";
        mean.op = OpType::ReduceMean;
        mean.attrs["keepdims"] = std::int64_t(0);
        mean.inputs = { sq };
        mean.outputs = { loss };
        g.addNode(mean);
        g.setOutputs({ loss });
        expectEveryPlanMatches(g, name);
        ++checked;
    }
    EXPECT_EQ(checked, 4);
}
