#include "scale/scale_sim.h"

#include "scale/scale_costs.h"
#include "sim/simulator.h"

#include <algorithm>

namespace ps {

ScheduleSpec scaleScheduleSpec(const ScaleConfig& c)
{
    ScheduleSpec spec;
    spec.stages = c.pipeline * c.chunks;
    spec.microBatches = static_cast<int>(c.microBatches());
    if (c.chunks > 1) {
        spec.kind = ScheduleKind::Interleaved;
        spec.virtualStages = c.chunks;
    } else if (c.group > 1) {
        spec.kind = ScheduleKind::KFKB;
        spec.groupSize = c.group;
    } else if (c.zeroBubble) {
        spec.kind = ScheduleKind::ZeroBubbleH1;
    }
    return spec;
}

namespace {

    // Each chunk stage of the replica, one micro-batch on one GPU of its tensor group.
    std::vector<StageCost> chunkCosts(
        const GptShape& g, const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device)
    {
        const auto layer = scale::layerCost(g, c, node, device);
        const auto head = scale::headCost(g, c, device);
        const int chunks = c.pipeline * c.chunks;
        const double layers = static_cast<double>(g.layers) / chunks;
        const double h = static_cast<double>(g.hidden);
        const double bsh = static_cast<double>(c.microBatch) * static_cast<double>(g.seq) * h;
        const double wordEmbedding = static_cast<double>(g.vocab) * h;
        std::vector<StageCost> out(static_cast<std::size_t>(chunks));
        for (int j = 0; j < chunks; ++j) {
            auto& s = out[static_cast<std::size_t>(j)];
            const bool first = j == 0;
            const bool last = j + 1 == chunks;
            s.forwardNs = 1e9 * layers * (layer.forward + layer.forwardAllReduces * layer.allReduce);
            s.backwardNs =
                1e9 * layers * (layer.backward + layer.recompute + layer.backwardAllReduces * layer.allReduce);
            s.weightGradNs = 1e9 * layers * layer.weightGrad;
            s.activationBytes = layers * scale::layerActivationBytes(g, c, c.recompute);
            s.workspaceBytes = scale::layerActivationBytes(g, c, Recompute::None);
            // What a split B keeps for its W: the weight GEMMs' inputs and output gradients.
            s.weightGradHeldBytes = layers * scale::kHalf * bsh * (4 + 12.0 / c.tensor);
            double params = layers * scale::layerParameters(g) + (first ? wordEmbedding + g.seq * h : 0.0)
                + (last && !first ? wordEmbedding : 0.0);
            s.parameterCount = static_cast<std::int64_t>(params / c.tensor);
            if (last) {
                s.forwardNs += 1e9 * head.forward;
                s.backwardNs += 1e9 * head.backward;
                s.weightGradNs += 1e9 * head.weightGrad;
                s.workspaceBytes += head.logitBytes;
            }
            s.splitWorkspaceBytes = s.workspaceBytes; // ZB-H1's B and W hold the same working set
            s.sendForwardBytes = last ? 0.0 : scale::stageSendBytes(g, c);
            s.sendBackwardBytes = first ? 0.0 : scale::stageSendBytes(g, c);
        }
        return out;
    }

    // One GPU per stage: as many stages share a node as their tensor and data groups leave room for.
    Cluster replicaCluster(const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device)
    {
        const int stagesPerNode = std::max(1, node.gpus / (c.tensor * c.data));
        Cluster cluster;
        cluster.name = node.id + " pipeline replica";
        cluster.devicesPerNode = std::min(c.pipeline, stagesPerNode);
        cluster.nodes = (c.pipeline + cluster.devicesPerNode - 1) / cluster.devicesPerNode;
        cluster.device = device;
        cluster.intraNode = node.intra;
        cluster.interNode = nicShare(node, node.gpus);
        cluster.nicsPerNode = cluster.devicesPerNode; // each stage's GPUs send over NICs of their own
        return cluster;
    }

} // namespace

ScaleEstimate simulateScale(const GptShape& g, const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device)
{
    auto e = estimateScale(g, c, node, device);
    // Beyond a few million actions (2 p v m) the simulation costs seconds and gigabytes: such a
    // configuration keeps the closed form's numbers (simulated stays false).
    if (!e.valid || 2.0 * c.pipeline * c.chunks * static_cast<double>(c.microBatches()) > kMaxSimulatedActions)
        return e;
    const auto schedule = generateSchedule(scaleScheduleSpec(c));
    const auto stages = chunkCosts(g, c, node, device);
    const auto cluster = replicaCluster(c, node, device);
    TrainingSetup setup;
    setup.precision = Precision::Bf16;
    setup.fp32Gradients = true; // Megatron-LM's main_grad
    setup.optimizerShards = c.zero1 ? c.data : 1;
    setup.gradientBuffers = true;
    SimulationInput input { schedule, stages, cluster, setup, static_cast<double>(c.microBatch), {}, {} };
    input.options.optimizerStep = false;
    input.options.messagesAtEarliest = false; // Megatron-LM receives at its schedule's steps
    const auto withSends = simulate(input);
    input.options.communication = false;
    const auto computeOnly = simulate(input);
    // Each stage reduces its gradients and steps as its own pipeline work ends (its last backward),
    // while earlier stages still drain theirs; the iteration ends with the last stage to finish.
    // The split is that stage's: its compute stream (its layers with their tensor-parallel
    // all-reduces), the transfers the pipeline waited for, its idle time, its reduction and step.
    const auto layer = scale::layerCost(g, c, node, device);
    const double layersPerGpu = static_cast<double>(g.layers) / c.pipeline;
    const double lastBackward = layersPerGpu * (layer.backward + layer.recompute);
    std::vector<double> ends(withSends.devices.size(), 0.0);
    for (const auto& ev : withSends.events) {
        if (ev.stream == Stream::Compute)
            ends[ev.device.index()] = std::max(ends[ev.device.index()], ev.endNs / 1e9);
    }
    std::size_t critical = 0;
    scale::AfterPipeline after;
    double end = -1;
    for (std::size_t i = 0; i < ends.size(); ++i) {
        const auto a = scale::afterPipeline(g, c, node, device, lastBackward, static_cast<int>(i));
        if (ends[i] + a.dataComm + a.optimizer > end) {
            end = ends[i] + a.dataComm + a.optimizer;
            critical = i;
            after = a;
        }
    }
    const double busy = withSends.devices[critical].busyNs / 1e9;
    const double idle = std::max(0.0, ends[critical] - busy);
    const double m = static_cast<double>(c.microBatches());
    e.tensorCommSeconds = std::min(busy, m * layersPerGpu * layer.tensorComm());
    e.computeSeconds = busy - e.tensorCommSeconds;
    e.pipelineCommSeconds = std::min(idle, std::max(0.0, (withSends.iterationNs - computeOnly.iterationNs) / 1e9));
    e.bubbleSeconds = idle - e.pipelineCommSeconds;
    e.dataCommSeconds = after.dataComm;
    e.optimizerSeconds = after.optimizer;
    e.iterationSeconds = end;
    e.tflopsPerGpu = megatronIterationFlops(g, c.globalBatch) / e.iterationSeconds / c.gpus() / 1e12;
    e.samplesPerSecond = static_cast<double>(c.globalBatch) / e.iterationSeconds;
    // Memory by the simulator's model (sim/memory_model.h, the one `compare` holds against the CPU
    // runtime): each GPU's states, its chunks' activations walked through its action list, gradients
    // held in their buffers, received messages, the largest working set.
    e.stagePeakBytes.clear();
    for (const auto& gpu : withSends.devices)
        e.stagePeakBytes.push_back(gpu.peakBytes);
    e.stagePeakBytes.resize(static_cast<std::size_t>(c.pipeline));
    e.peakBytes = *std::max_element(e.stagePeakBytes.begin(), e.stagePeakBytes.end());
    e.fits = e.peakBytes <= scale::usableBytes(device);
    e.reason = e.fits ? std::string() : scale::notFitting(e.peakBytes, device);
    e.simulated = true;
    return e;
}

ScaleEstimate simulateScale(const GptShape& g, const ScaleConfig& c, const NodeSpec& node)
{
    return simulateScale(g, c, node, DeviceCatalog::builtin().find(node.deviceId));
}

} // namespace ps
