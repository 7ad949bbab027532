// The pipeline runtime against single-device training: every synchronous schedule, on 2 and 4 CPU
// devices, with and without swap and recompute plans, must give the single-device loss sequence and
// the same parameters (gradient accumulation over the same micro-batches in the same order).
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "cpu/thread_affinity.h"
#include "cpu_probe.h"
#include "cuda/cuda_probe.h"
#include "graph/op_cost.h"
#include "pipeline_support.h"
#include "plan/partition.h"
#include "plan/stage_model.h"
#include "runtime/run_prediction.h"
#include "runtime/training_run.h"
#include "sim/memory_model.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "trainer.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unistd.h>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

constexpr int kSteps = 20;

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

struct Outcome
{
    std::vector<double> losses;
    std::vector<std::pair<TensorId, std::vector<float>>> params;
};

Outcome singleDevice(const Graph& graph, int microBatches, const std::string& optimizer = "sgd")
{
    TrainOptions o;
    o.accumulation = microBatches;
    o.optimizer.kind = optimizer;
    o.optimizer.lr = optimizer == "sgd" ? 0.05 : 3e-3;
    o.seed = 5;
    Trainer trainer(graph, randomCorpus(), o);
    Outcome out;
    for (int s = 0; s < kSteps; ++s)
        out.losses.push_back(trainer.step().loss);
    for (const auto& [id, bytes] : trainer.parameterBytes())
        out.params.emplace_back(id, asFloats(bytes));
    return out;
}

Outcome pipeline(const Graph& graph, const RunConfig& config, const std::string& devices)
{
    TrainingRun run(graph, randomCorpus(), makeDevices(devices, 0), config);
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

// With dropout on, a stage's boundary output can be a tensor its memory plan drops or swaps after
// forward; the send must read it first (it once threw "a kernel read a value that is swapped out
// or dropped" at SEND_F). Recompute regenerates the same masks, so the losses stay those of the
// run that keeps everything. With fused attention too (its node draws and keeps its probabilities'
// mask).
TEST(Pipeline, SwapAndRecomputeWithDropoutKeepTheLosses)
{
    for (const bool fused : { false, true }) {
        auto c = zooPreset("gpt2-tiny");
        c.seq = 32;
        c.microBatch = 2;
        c.dropout = 0.1;
        c.fusedAttention = fused;
        const auto graph = buildZooModel(c);
        auto config = configFor(graph, "1f1b", 2, 4, "adamw");
        const auto keepAll = pipeline(graph, config, "cpu:2");
        const std::string label = std::string("1f1b, dropout 0.1") + (fused ? ", fused attention" : "");
        config.memory = swapAndRecompute(graph, config.partition);
        expectSame(keepAll, pipeline(graph, config, "cpu:2"), label + ", with swap and recompute", 1e-6);
        // Every storage recomputed: each node that draws draws the forward's mask again.
        config.memory = swapAndRecompute(graph, config.partition, true);
        expectSame(keepAll, pipeline(graph, config, "cpu:2"), label + ", everything recomputed", 1e-6);
    }
}

// Devices with several cores split their GEMMs across a team of threads (one per core): the
// numbers stay those of one device. Both devices get every core here, so the split runs on any host.
TEST(Pipeline, DevicesWithSeveralCoresSplitTheirGemms)
{
    const auto graph = gpt4x128();
    const int M = 4;
    const auto ref = singleDevice(graph, M);
    auto cores = allowedCores();
    cores.resize(std::min<std::size_t>(cores.size(), 2));
    while (cores.size() < 2)
        cores.push_back(cores.front());
    auto devices = makeDevices("cpu:2", 0);
    for (auto& d : devices)
        d.cores = cores;
    TrainingRun run(graph, randomCorpus(), std::move(devices), configFor(graph, "1f1b", 2, M));
    Outcome got;
    for (int s = 0; s < kSteps; ++s)
        got.losses.push_back(run.step().loss);
    for (auto id : run.runner().parameterIds())
        got.params.emplace_back(id, asFloats(run.runner().parameterBytes(id)));
    expectSame(ref, got, "1f1b on 2 devices of 2 cores");
}

// GPipe's rematerialisation as the planner writes it (every storage a stage produces recomputed
// before its backward) runs, and computes what keeping everything does.
TEST(Pipeline, CheckpointedStagesMatchSingleDevice)
{
    const auto graph = gpt4x128();
    const int M = 4;
    const auto ref = singleDevice(graph, M);
    auto config = configFor(graph, "gpipe", 2, M);
    const auto device = DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = estimateProfile(graph, device, {});
    const auto cluster = makeCluster(device, 2);
    const StageModel model(graph, profile, config.schedule, cluster, 2, { 0, false, false, true });
    for (int s = 0; s < 2; ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        config.memory.push_back(
            model.evaluate(config.partition.stageBegin(id), config.partition.stageEnd(id, graph.nodeCount()), s)
                .memoryPlan);
        ASSERT_FALSE(config.memory.back().recomputedTensors.empty()) << "stage " << s;
    }
    expectSame(ref, pipeline(graph, config, "cpu:2"), "gpipe with checkpointed stages");
}

TEST(Pipeline, SwapAndRecomputeLowerThePeak)
{
    const auto graph = gpt4x128();
    auto config = configFor(graph, "gpipe", 2, 4);
    TrainingRun keep(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    const auto a = keep.step();
    config.memory = swapAndRecompute(graph, config.partition);
    TrainingRun planned(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    const auto b = planned.step();
    for (std::size_t d = 0; d < 2; ++d)
        EXPECT_LT(b.devicePeakBytes[d], a.devicePeakBytes[d]) << "device " << d;
    bool sawRecompute = false;
    int swaps = 0;
    for (const auto& e : b.events) {
        sawRecompute = sawRecompute || e.action == ActionType::Recompute;
        if (e.action != ActionType::SwapOut && e.action != ActionType::SwapIn)
            continue;
        ++swaps;
        // Copies run on the device's copy streams, beside the worker, as the simulator has them.
        EXPECT_EQ(e.stream, e.action == ActionType::SwapOut ? Stream::CopyToHost : Stream::CopyFromHost);
        EXPECT_GT(e.bytes, 0);
        const auto find = [&](ActionType type) {
            return std::find_if(b.events.begin(), b.events.end(), [&](const SimEvent& o) {
                return o.action == type && o.stage == e.stage && o.microBatch == e.microBatch;
            });
        };
        if (e.action == ActionType::SwapIn) { // after its swap-out, and its backward after it
            const auto out = find(ActionType::SwapOut);
            ASSERT_NE(out, b.events.end());
            EXPECT_LE(out->endNs, e.startNs);
            const auto backward = find(ActionType::Backward);
            ASSERT_NE(backward, b.events.end());
            EXPECT_LE(e.endNs, backward->endNs);
        }
    }
    EXPECT_EQ(swaps % 2, 0);
    EXPECT_GT(swaps, 0);
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

TEST(Pipeline, AWeightTiedAcrossThreeStagesGetsOneSumOnEach)
{
    // T5's shared embedding is read by the encoder's embedding, the decoder's and the LM head: cut
    // so that each is on its own stage, the three gradients are summed in stage order on every
    // stage (the first in place, the second added to its own, the third into an uploaded copy).
    auto c = zooPreset("t5-small");
    c.layers = 1;
    c.decoderLayers = 1;
    c.hidden = 32;
    c.heads = 2;
    c.seq = 8;
    c.vocab = 256; // randomCorpus()'s
    c.relativeBuckets = 8;
    c.microBatch = 2;
    c.dropout = 0;
    const auto graph = buildZooModel(c);
    std::map<std::uint32_t, std::vector<std::size_t>> readers;
    for (const auto& n : graph.nodes()) {
        for (auto in : n.inputs) {
            if (graph.tensor(in).kind == TensorKind::Parameter)
                readers[in.value].push_back(n.id.index());
        }
    }
    const auto shared =
        std::find_if(readers.begin(), readers.end(), [](const auto& r) { return r.second.size() == 3; });
    ASSERT_NE(shared, readers.end()) << "no parameter read by three nodes";
    auto config = configFor(graph, "1f1b", 3, 4);
    config.partition.stageStarts = { 0, shared->second[1], shared->second[2] };
    const auto ref = singleDevice(graph, 4);
    TrainingRun run(graph, randomCorpus(), makeDevices("cpu:3", 0), config);
    Outcome got;
    for (int s = 0; s < kSteps; ++s)
        got.losses.push_back(run.step().loss);
    for (auto id : run.runner().parameterIds())
        got.params.emplace_back(id, asFloats(run.runner().parameterBytes(id)));
    expectSame(ref, got, "t5 on three stages");
    const TensorId id(shared->first);
    std::vector<std::vector<std::byte>> copies;
    for (const auto& stage : run.runner().stages()) {
        const auto& ids = stage->parameterIds();
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            copies.push_back(stage->parameterBytes(id));
    }
    ASSERT_EQ(copies.size(), 3U);
    EXPECT_EQ(copies[0], copies[1]);
    EXPECT_EQ(copies[0], copies[2]);
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
    const auto [first, last] = firstAndLastLoss(run, 30);
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
        TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 900 * 1024), config);
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
    TrainingRun straight(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    std::vector<double> expected;
    for (int s = 0; s < 20; ++s)
        expected.push_back(straight.step().loss);
    TrainingRun first(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
    for (int s = 0; s < 10; ++s)
        EXPECT_DOUBLE_EQ(first.step().loss, expected[static_cast<std::size_t>(s)]);
    const auto checkpoint = first.checkpoint();
    TrainingRun resumed(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
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

TEST(Pipeline, Tf32IsRefusedOnCpuDevices)
{
    const auto graph = tinyGpt();
    auto config = configFor(graph, "1f1b", 2, 2);
    config.gemm = GemmPrecision::Tf32;
    try {
        TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
        FAIL() << "expected a refusal";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("cpu:0"), std::string::npos) << e.what();
    }
}

// A GPU run is predicted on its catalog entry at its GEMM precision (what `compare` and the
// planner of `train --devices cuda:...` use), a CPU run on this machine's CPU.
TEST(Pipeline, GpuRunsArePredictedOnTheirCatalogDeviceAndPrecision)
{
    // Wide enough for the GEMMs to set the step (at 4 x 128, seq 32, both are launch-bound and an
    // A100 is predicted about as fast as this CPU's engine).
    auto c = zooPreset("gpt2-tiny");
    c.layers = 4;
    c.hidden = 512;
    c.heads = 8;
    c.seq = 256;
    c.maxPositions = 256;
    c.microBatch = 4;
    const auto graph = buildZooModel(c);
    RunShape shape;
    shape.schedule = parseScheduleSpec("1f1b", 2, 4);
    shape.partition = evenCuts(graph, 2);
    const auto cpu = predictRun(graph, nullptr, shape);
    shape.deviceKind = "a100-40gb";
    const auto fp32 = predictRun(graph, nullptr, shape);
    shape.precision = "bf16";
    const auto bf16 = predictRun(graph, nullptr, shape);
    EXPECT_LT(fp32.simulation.iterationNs, cpu.simulation.iterationNs / 4) << "an A100 against this CPU";
    EXPECT_LT(bf16.simulation.iterationNs, fp32.simulation.iterationNs) << "bf16 GEMMs against fp32";
    EXPECT_EQ(fp32.profileSource, "analytical");
    // The engine's bf16 GEMMs cast their operands per call and keep fp32 values: the same bytes.
    ASSERT_EQ(bf16.simulation.devices.size(), fp32.simulation.devices.size());
    for (std::size_t d = 0; d < fp32.simulation.devices.size(); ++d)
        EXPECT_NEAR(bf16.simulation.devices[d].peakBytes, fp32.simulation.devices[d].peakBytes,
            1e-9 * fp32.simulation.devices[d].peakBytes)
            << "device " << d;
}

TEST(Pipeline, CudaDeviceSpecs)
{
    EXPECT_EQ(parseDeviceSpec("cuda").gpus, std::vector<int> { 0 });
    const auto two = parseDeviceSpec("cuda:0,cuda:1");
    EXPECT_TRUE(two.cuda);
    EXPECT_EQ(two.gpus, (std::vector<int> { 0, 1 }));
    EXPECT_EQ(two.split, 1);
    const auto split = parseDeviceSpec("cuda:1x3");
    EXPECT_EQ(split.gpus, std::vector<int> { 1 });
    EXPECT_EQ(split.split, 3);
    for (const auto* bad :
        { "cuda:", "cuda:a", "cuda:0,cuda:0", "cuda:0x0", "cuda:0x2,cuda:1", "cuda:0,gpu:1", "cuda0" })
        EXPECT_THROW((void)parseDeviceSpec(bad), Error) << bad;
    EXPECT_EQ(parseDeviceSpec("cpu:3").cpuDevices, 3);
    // The names train gives the devices, which compare, the monitor and refusals show.
    EXPECT_EQ(runtimeDeviceNames("cpu"), std::vector<std::string> { "cpu" });
    EXPECT_EQ(runtimeDeviceNames("cpu:2"), (std::vector<std::string> { "cpu:0", "cpu:1" }));
    EXPECT_EQ(runtimeDeviceNames("cuda:1"), std::vector<std::string> { "cuda:1" });
    EXPECT_EQ(runtimeDeviceNames("cuda:0,cuda:1"), (std::vector<std::string> { "cuda:0", "cuda:1" }));
    EXPECT_EQ(runtimeDeviceNames("cuda:0x2"), (std::vector<std::string> { "cuda:0.0", "cuda:0.1" }));
}

// A prediction names its devices as the run does: an out-of-memory refusal of a split GPU says
// "cuda:0.1", not "cpu:1".
TEST(Pipeline, PredictionsNameTheRunsDevices)
{
    const auto graph = gpt4x128();
    RunShape shape;
    shape.schedule = parseScheduleSpec("1f1b", 2, 4);
    shape.partition = evenCuts(graph, 2);
    shape.deviceKind = "a100-40gb";
    shape.deviceMemoryBytes = 1 << 20; // far too small
    shape.deviceNames = runtimeDeviceNames("cuda:0x2");
    const auto p = predictRun(graph, nullptr, shape);
    ASSERT_EQ(p.deviceNames, shape.deviceNames);
    ASSERT_FALSE(p.overflows.empty());
    const auto message = overflowMessage(p);
    EXPECT_NE(message.find("cuda:0.0 is predicted to need"), std::string::npos) << message;
    EXPECT_EQ(message.find("cpu:"), std::string::npos) << message;
    shape.deviceNames.clear(); // a shape without names: named by kind
    EXPECT_EQ(deviceLabel(predictRun(graph, nullptr, shape), 1), "gpu:1");
}

// Where no GPU can be used (this build without CUDA, or no driver), asking for one names the
// device and the reason instead of training on something else.
TEST(Pipeline, CudaDevicesWithoutAGpuSayWhy)
{
    if (!engine::cuda::probeGpus().devices.empty())
        GTEST_SKIP() << "this machine has a GPU";
    try {
        (void)makeDevices("cuda:0x2", 0);
        FAIL() << "expected an error";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
        const bool reason = what.find("no CUDA backend") != std::string::npos
            || what.find("no NVIDIA driver") != std::string::npos || what.find("no usable GPU") != std::string::npos;
        EXPECT_TRUE(reason) << what;
    }
}

// A GPU run is predicted with the profile measured at its GEMM precision (profile --precision):
// a bf16 run with measured-cuda-bf16, an fp32 one with measured-cuda, a tf32 one with neither.
TEST(RunPrediction, AGpuRunUsesTheProfileOfItsPrecision)
{
    const auto graph = tinyGpt();
    const auto path =
        std::filesystem::temp_directory_path() / ("ps-precision-" + std::to_string(::getpid()) + ".pstudio");
    writeNewProject(path, graph, true);
    {
        auto store = ProjectStore::open(path);
        auto profile = estimateProfile(graph, DeviceCatalog::builtin().find("h100-80gb"), {});
        for (const auto precision : { Precision::Fp32, Precision::Bf16 }) {
            profile.source = measuredCudaSource(precision);
            store.saveProfile(profile, 1, 2);
        }
        RunShape shape;
        shape.deviceKind = "h100-80gb";
        shape.precision = "bf16";
        const auto bf16 = measuredProfileFor(store, shape);
        ASSERT_TRUE(bf16.has_value());
        EXPECT_EQ(bf16->profile.source, "measured-cuda-bf16");
        shape.precision = "fp32";
        const auto fp32 = measuredProfileFor(store, shape);
        ASSERT_TRUE(fp32.has_value());
        EXPECT_EQ(fp32->profile.source, "measured-cuda");
        shape.precision = "tf32";
        EXPECT_FALSE(measuredProfileFor(store, shape).has_value());
    }
    std::filesystem::remove(path);
}
