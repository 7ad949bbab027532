// The memory model against the allocator: each device's measured peak in a pipeline run on CPU
// devices against the simulation's prediction. Bytes, unlike times, do not depend on the machine,
// so these hold on any host (issue P15's 5%).
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "cpu_probe.h"
#include "pipeline_support.h"
#include "plan/partition.h"
#include "plan/planner.h"
#include "plan/stage_model.h"
#include "runtime/training_run.h"
#include "sim/simulator.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

struct MeasuredPeaks
{
    std::vector<std::int64_t> bytes;
    std::vector<MemoryByUse> uses; // at each device's peak
    std::vector<std::int64_t> withoutMessages; // Allocator::peakWithoutMessages
};

// Each device's peak over two steps (the first creates the optimizer state).
MeasuredPeaks measuredPeaks(TrainingRun& run)
{
    MeasuredPeaks p;
    for (int step = 0; step < 2; ++step) {
        const auto r = run.step();
        p.bytes.resize(r.devicePeakBytes.size(), 0);
        p.uses.resize(r.devicePeakBytes.size());
        p.withoutMessages.resize(r.devicePeakBytes.size(), 0);
        for (std::size_t d = 0; d < r.devicePeakBytes.size(); ++d) {
            p.withoutMessages[d] = std::max(p.withoutMessages[d], r.devicePeakWithoutMessages.at(d));
            if (r.devicePeakBytes[d] > p.bytes[d]) {
                p.bytes[d] = r.devicePeakBytes[d];
                p.uses[d] = r.devicePeakByUse[d];
            }
        }
    }
    return p;
}

std::string describeUses(const MemoryByUse& uses)
{
    std::string text;
    for (std::size_t u = 0; u < kMemoryUses; ++u)
        text += " " + std::string(toString(static_cast<MemoryUse>(u))) + " " + std::to_string(uses[u]);
    return text;
}

// Every micro-batch's messages from every stage to a stage on device `d`: the most that can wait
// there at once, whatever the timing.
double messageBound(const Schedule& schedule, const std::vector<StageCost>& costs, std::size_t d, int microBatches)
{
    double bytes = 0;
    const auto onDevice = [&](std::size_t stage) {
        return stage < costs.size() && schedule.deviceOf(StageId(static_cast<std::uint32_t>(stage))).index() == d;
    };
    for (std::size_t s = 0; s < costs.size(); ++s) {
        const auto& c = costs[s];
        if (!c.forwardSends.empty() || !c.backwardSends.empty()) { // dataflow: to each consumer
            for (const auto& send : c.forwardSends)
                bytes += onDevice(send.stage.index()) ? send.bytes : 0;
            for (const auto& send : c.backwardSends)
                bytes += onDevice(send.stage.index()) ? send.bytes : 0;
            continue;
        }
        bytes += onDevice(s + 1) ? c.sendForwardBytes : 0;
        bytes += s > 0 && onDevice(s - 1) ? c.sendBackwardBytes : 0;
    }
    return bytes * microBatches;
}

// Expects device `d`'s measured peak within `tolerance` of the prediction, messages aside: how
// many boundary tensors wait at a receiver depends on how far its senders run ahead, which on CPU
// devices sharing cores with other processes is the host's scheduling, not the plan (CI once saw
// a GPipe first device hold all four micro-batches' gradients where the timing predicted one).
// So the peaks of everything else are compared; the prediction counts each message from the
// earliest moment the schedule lets it arrive, so the whole measured peak is at most the whole
// predicted one, whatever the timing, and the messages waiting stay within every micro-batch's.
void expectPeakAsPredicted(const DeviceSimResult& predicted, const MeasuredPeaks& peaks, std::size_t d,
    const std::vector<StageCost>& costs, const Schedule& schedule, int microBatches, double tolerance,
    const std::string& label)
{
    const auto& uses = peaks.uses[d];
    const auto waiting = static_cast<double>(uses[static_cast<std::size_t>(MemoryUse::Messages)]);
    const double error = predicted.peakWithoutMessagesBytes / static_cast<double>(peaks.withoutMessages[d]) - 1;
    const auto& m = predicted.memory;
    const auto context = [&] {
        return label + ": predicted " + std::to_string(predicted.peakBytes) + " B (parameters "
            + std::to_string(m.parameters + m.stashedWeights) + ", gradients " + std::to_string(m.gradients)
            + ", optimizer states " + std::to_string(m.optimizerStates) + ", activations "
            + std::to_string(m.activations) + ", workspace " + std::to_string(m.workspace) + ", messages "
            + std::to_string(m.messages) + "; without messages " + std::to_string(predicted.peakWithoutMessagesBytes)
            + "), measured " + std::to_string(peaks.bytes[d]) + " B (" + describeUses(uses) + "; without messages "
            + std::to_string(peaks.withoutMessages[d]) + ")";
    };
    EXPECT_LT(std::abs(error), tolerance) << context();
    const double bound = messageBound(schedule, costs, d, microBatches);
    EXPECT_LE(waiting, bound) << context();
    EXPECT_LE(m.messages, bound) << context();
    EXPECT_LE(static_cast<double>(peaks.bytes[d]), predicted.peakBytes * (1 + tolerance)) << context();
}

// Trains `graph` with `config` on `stages` CPU devices (one: "cpu") of `capBytes` each (0: no cap)
// and expects each device's measured peak within `tolerance` of the simulation's on `profile` for
// `device`.
void expectRunPeaksAsPredicted(const Graph& graph, const Profile& profile, const DeviceSpec& device,
    const RunConfig& config, int stages, int microBatches, double tolerance, const std::string& label,
    std::int64_t capBytes = 0)
{
    TrainingRun run(
        graph, randomCorpus(), makeDevices(stages == 1 ? "cpu" : "cpu:" + std::to_string(stages), capBytes), config);
    const auto measured = measuredPeaks(run);
    const auto costs = computeStageCosts(graph, profile, config.partition, graph.info().microBatch);
    const auto actions = withCommunication(runtimeSchedule(config));
    const auto predicted = simulate({ actions, costs, makeCluster(device, stages), profile.setup,
        static_cast<double>(graph.info().microBatch), config.memory, { true, true } });
    ASSERT_EQ(measured.bytes.size(), predicted.devices.size()) << label;
    for (std::size_t d = 0; d < measured.bytes.size(); ++d)
        expectPeakAsPredicted(predicted.devices[d], measured, d, costs, actions, microBatches, tolerance,
            label + " device " + std::to_string(d));
}

} // namespace

// The memory model against the allocator: what the planner promises is what the run uses. Bytes,
// unlike times, do not depend on the machine, so this holds on any host (the 5%).
// With dropout on too: its one-byte masks are what the memory model counts (issue P15 found the
// runtime keeping four-byte masks, 9% above the prediction).
TEST(Pipeline, MeasuredPeakMemoryIsTheSimulatorsPrediction)
{
    for (const double dropout : { 0.0, 0.1 }) {
        auto c = zooPreset("gpt2-tiny");
        c.layers = 4;
        c.heads = 2;
        c.maxPositions = 128;
        c.seq = 128; // activations weigh as much as the weights and their optimizer state
        c.microBatch = 2;
        c.dropout = dropout;
        const auto graph = buildZooModel(c);
        const auto device = DeviceCatalog::builtin().find("a100-40gb");
        CostModelOptions options; // fp32 weights, Adam: what the runtime's AdamW holds
        const auto profile = estimateProfile(graph, device, options);
        for (const auto& [schedule, stages] :
            std::vector<std::pair<std::string, int>> { { "gpipe", 2 }, { "1f1b", 2 }, { "kfkb:2", 2 },
                { "interleaved:2", 4 }, { "zb-h1", 2 }, { "pipedream", 2 }, { "ftpipe-async:2", 2 } }) {
            auto config = configFor(graph, schedule, stages, 4, "adamw");
            TrainingRun run(graph, randomCorpus(), makeDevices("cpu:2", 0), config);
            const auto measured = measuredPeaks(run);
            const auto costs = computeStageCosts(graph, profile, config.partition, c.microBatch);
            const auto actions = withCommunication(runtimeSchedule(config));
            const auto predicted = simulate({ actions, costs, makeCluster(device, 2), profile.setup,
                static_cast<double>(c.microBatch), config.memory, { true, true } });
            for (std::size_t d = 0; d < 2; ++d) {
                expectPeakAsPredicted(predicted.devices[d], measured, d, costs, actions, 4, 0.05,
                    schedule + " dropout " + std::to_string(dropout) + " device " + std::to_string(d));
            }
        }
    }
}

// FTPipe's asynchronous schedule with its checkpointing (§4.2.1: every stage but the last keeps
// only its border inputs and recomputes inside backward), planned as `train` plans it, on two and
// three devices: each stage's fill of forwards differs (3, 2, 1). Every checkpointed stage held
// 44-48% more than predicted while the runtime kept each recomputed producer's inputs from F to
// B; the middle stage of three 7% more while the model left out its kept border inputs during B.
TEST(Pipeline, FtpipeCheckpointedStagesPeakAsPredicted)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 4;
    c.heads = 2;
    c.maxPositions = 128;
    c.seq = 128;
    c.microBatch = 2;
    c.dropout = 0;
    const auto graph = buildZooModel(c);
    const auto device = DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = estimateProfile(graph, device, CostModelOptions {});
    for (const int stages : { 2, 3 }) {
        auto config = configFor(graph, "ftpipe-async:2", stages, 6, "adamw");
        const StageModel model(graph, profile, config.schedule, makeCluster(device, stages),
            static_cast<double>(c.microBatch), { 0, true, true });
        const auto plan = findPlan(model, PlannerOptions {});
        ASSERT_TRUE(plan.feasible) << plan.reason;
        config.partition = plan.partition;
        config.memory = plan.memoryPlans();
        ASSERT_FALSE(config.memory.at(0).recomputedTensors.empty()) << "stage 0 is not checkpointed";
        expectRunPeaksAsPredicted(graph, profile, device, config, stages, 6, 0.05,
            "ftpipe-async:2 on " + std::to_string(stages) + " devices,");
    }
}

// A CNN whose first op is a ReLU over the images (AmoebaNet's stem), planned with recomputation
// under a memory limit: recomputing that ReLU keeps the images of every micro-batch in flight,
// which the planner counts with the stage inputs a recompute reads; where no backward and no
// recompute reads the images, the runtime lets them go after forward, as the model has it. Both
// ways device 0 measured 2-4% above the prediction (a plan made for a 9 MiB cap ran out of memory).
TEST(Pipeline, ImagesARecomputeReadsPeakAsPredicted)
{
    auto c = zooPreset("amoebanet-tiny");
    c.microBatch = 16;
    const auto graph = buildZooModel(c);
    const auto device = engine::measureCpuDevice(1);
    const auto profile = estimateProfile(graph, device, CostModelOptions {});
    for (const double limitMiB : { 0.0, 9.0 }) {
        auto config = configFor(graph, "1f1b", 2, 4, "adamw");
        const StageModel model(graph, profile, config.schedule, makeCluster(device, 2),
            static_cast<double>(c.microBatch), { limitMiB * 1024 * 1024, false, limitMiB > 0, false });
        const auto plan = findPlan(model, PlannerOptions {});
        ASSERT_TRUE(plan.feasible) << plan.reason;
        config.partition = plan.partition;
        config.memory = plan.memoryPlans();
        const auto label = "amoebanet-tiny, limit " + std::to_string(limitMiB) + " MiB";
        if (limitMiB > 0) {
            ASSERT_GT(config.memory.at(0).keptInputBytes, 0) << label << ": the stem's ReLU is not recomputed";
        }
        // With a limit the devices have that capacity: the plan runs in it however far either
        // device runs ahead (before messages counted from their earliest arrival, a capped CLI run
        // of this model ran out of memory in 2 of 6 tries under load).
        expectRunPeaksAsPredicted(
            graph, profile, device, config, 2, 4, 0.02, label + ",", static_cast<std::int64_t>(limitMiB * 1024 * 1024));
    }
}

namespace {

// Trains `graph` under `schedule` on `stages` CPU devices (one: "cpu") with AdamW and expects
// each device's measured peak within `tolerance` of the simulation's, on the CPU device's
// analytical profile (the one that counts the kernels' columns).
void expectPeaksAsPredicted(const Graph& graph, const std::string& schedule, int stages, int microBatches,
    double tolerance, const std::string& label)
{
    const auto device = engine::measureCpuDevice(1);
    const auto profile = estimateProfile(graph, device, CostModelOptions {});
    const auto config = configFor(graph, schedule, stages, microBatches, "adamw");
    expectRunPeaksAsPredicted(graph, profile, device, config, stages, microBatches, tolerance, label + " " + schedule);
}

} // namespace

// Fused attention (graph/attention_fusion.h): the runtime holds the probabilities only inside
// each Attention node's forward and backward (two and three score-sized arrays), which the
// memory model counts as that node's workspace, never as saved activations.
TEST(Pipeline, FusedAttentionPeaksAsPredicted)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 4;
    c.heads = 2;
    c.maxPositions = 128;
    c.seq = 128; // the probabilities (2 x 2 x 128 x 128 floats a layer) outweigh a layer's other activations
    c.microBatch = 2;
    c.fusedAttention = true;
    for (const double dropout : { 0.0, 0.1 }) { // with dropout, each node keeps its keep mask
        c.dropout = dropout;
        const auto graph = buildZooModel(c);
        const auto label = "fused attention, dropout " + std::to_string(dropout);
        for (const auto* schedule : { "gpipe", "1f1b", "zb-h1" })
            expectPeaksAsPredicted(graph, schedule, 2, 4, 0.05, label);
        expectPeaksAsPredicted(graph, "1f1b", 1, 2, 0.05, label);
    }
}

// The same for a CNN. Its first convolution keeps the loader's image batch for its weight
// gradient; each convolution's backward holds the columns of one image for each gradient it
// computes, counted at that node against what the backward has released by then; and the first
// backward after an optimizer step allocates the gradients as it goes. Before these were counted
// (issue P15) the ResNet's first device was predicted 10% below its measured peak under GPipe and
// 1F1B within 10% only by adding the columns to every in-flight activation. Zero-bubble's W passes
// are walked node by node too (weightPassProfile): with every new weight gradient counted beside
// all a W keeps, device 0 measured 7% below the prediction.
TEST(Pipeline, ConvolutionalStagesPeakAsPredicted)
{
    auto c = zooPreset("resnet-tiny");
    c.microBatch = 8;
    const auto graph = buildZooModel(c);
    expectPeaksAsPredicted(graph, "1f1b", 1, 1, 0.05, "resnet-tiny, one device");
    for (const std::string schedule : { "gpipe", "1f1b" })
        expectPeaksAsPredicted(graph, schedule, 2, 4, 0.05, "resnet-tiny");
    expectPeaksAsPredicted(graph, "zb-h1", 2, 4, 0.05, "resnet-tiny");
    // AmoebaNet's cells keep states alive across two cells and concatenate them.
    auto amoeba = zooPreset("amoebanet-tiny");
    amoeba.microBatch = 4;
    const auto cells = buildZooModel(amoeba);
    expectPeaksAsPredicted(cells, "1f1b", 1, 1, 0.05, "amoebanet-tiny, one device");
    expectPeaksAsPredicted(cells, "1f1b", 2, 4, 0.05, "amoebanet-tiny");
}

// Data the loader feeds and a backward reads: an MLP's feature batch (its first MatMul's weight
// gradient), BERT's padding mask (the fused masked softmax's backward) and token ids (the
// embedding's gradient, in zero-bubble's W). Kept per micro-batch in flight and counted so.
TEST(Pipeline, LoaderDataPeaksAsPredicted)
{
    auto mlp = zooPreset("mlp");
    mlp.layers = 4;
    mlp.hidden = 256;
    mlp.microBatch = 16;
    const auto mlpGraph = buildZooModel(mlp);
    expectPeaksAsPredicted(mlpGraph, "1f1b", 1, 1, 0.05, "mlp, one device");
    expectPeaksAsPredicted(mlpGraph, "gpipe", 2, 3, 0.05, "mlp");
    auto bert = zooPreset("bert-base");
    bert.layers = 2;
    bert.hidden = 128;
    bert.heads = 2;
    bert.ffn = 256;
    bert.seq = 64;
    bert.vocab = 1000;
    bert.maxPositions = 64;
    bert.microBatch = 2;
    const auto bertGraph = buildZooModel(bert);
    for (const std::string schedule : { "gpipe", "1f1b", "zb-h1" })
        expectPeaksAsPredicted(bertGraph, schedule, 2, 4, 0.05, "bert");
}

// Zero-bubble's W runs a stage's nodes last first and frees what each read once it is done, so the
// largest new weight gradient, a T5 stage's shared embedding table at its first node, comes when
// little of that micro-batch is left. Counted beside everything W keeps (a CLI sweep of T5 under
// zb-h1 on two CPU devices), device 0 was predicted 6.4% above its measured peak.
TEST(Pipeline, ZeroBubbleWeightPassesPeakAsPredicted)
{
    auto c = zooPreset("t5-small");
    c.layers = 2;
    c.decoderLayers = 2;
    c.hidden = 128;
    c.heads = 4;
    c.seq = 64;
    c.decoderSeq = 64;
    c.microBatch = 2;
    c.dropout = 0.1;
    const auto graph = buildZooModel(c);
    // Stage 0 holds both embeddings' lookups and every block, as the planner cut it on that sweep.
    std::size_t cut = 0;
    while (cut < graph.nodeCount() && graph.nodes()[cut].name != "decoder.block.1.layer.2.dropout")
        ++cut;
    ASSERT_LT(cut, graph.nodeCount());
    const auto device = engine::measureCpuDevice(1);
    const auto profile = estimateProfile(graph, device, CostModelOptions {});
    for (const auto* schedule : { "zb-h1", "1f1b" }) {
        auto config = configFor(graph, schedule, 2, 4, "adamw");
        config.partition = Partition { { 0, cut } };
        expectRunPeaksAsPredicted(graph, profile, device, config, 2, 4, 0.02, std::string("t5 ") + schedule);
    }
}
