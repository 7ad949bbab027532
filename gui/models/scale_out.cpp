#include "models/scale_out.h"

#include "scale/scale_sim.h"
#include "zoo/model_config.h"

#include <cmath>
#include <cstdio>

namespace ps::gui {

std::optional<GptShape> gptShapeOf(const Graph& graph)
{
    if (graph.info().family != "gpt2")
        return std::nullopt;
    const auto c = modelConfigFromJson(graph.info().configJson);
    return GptShape { c.layers, c.hidden, c.heads, c.seq, c.vocab };
}

ScaleOut scaleOut(const GptShape& model, const NodeSpec& node, int gpus, std::int64_t globalBatch, std::size_t keep,
    ScaleFeatures features)
{
    ScaleOut out;
    out.search = searchScale(model, gpus, globalBatch, node, keep, features);
    std::vector<int> counts;
    for (int n = node.gpus; n < gpus; n *= 2)
        counts.push_back(n);
    counts.push_back(gpus);
    for (int n : counts) {
        const auto s = n == gpus ? out.search : searchScale(model, n, globalBatch, node, 1, features);
        if (!s.ranked.empty())
            out.curve.push_back({ n, s.ranked.front() });
    }
    return out;
}

namespace {

    std::string fixed(double value, int digits)
    {
        char buffer[64];
        std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
        return buffer;
    }

    std::string describe(const ClusterScale& c, const NodeSpec& node)
    {
        const auto& e = c.estimate;
        const auto& k = c.config;
        std::string text = "t" + std::to_string(k.tensor) + " x p" + std::to_string(k.pipeline) + " x d"
            + std::to_string(k.data) + " = " + std::to_string(c.gpus) + " GPUs on " + std::to_string(c.nodes) + " "
            + node.id + " node" + (c.nodes == 1 ? "" : "s") + ", global batch " + std::to_string(k.globalBatch) + " ("
            + std::to_string(k.microBatches()) + " x " + std::to_string(k.microBatch) + " per replica): ";
        if (!e.valid)
            return text + e.reason + ".";
        constexpr double kGiB = 1024.0 * 1024 * 1024;
        const double capacity = static_cast<double>(DeviceCatalog::builtin().find(node.deviceId).memoryBytes);
        text += fixed(e.tflopsPerGpu, 1) + " TFLOP/s per GPU, " + fixed(e.samplesPerSecond, 1) + " samples/s; "
            + fixed(e.peakBytes / kGiB, 1) + " of " + fixed(capacity / kGiB, 0) + " GiB per GPU"
            + (e.fits ? "" : " (does not fit: " + e.reason + ")") + ". Iteration " + fixed(e.iterationSeconds * 1e3, 1)
            + " ms: compute " + fixed(e.computeSeconds * 1e3, 1) + ", tensor-parallel comm "
            + fixed(e.tensorCommSeconds * 1e3, 1) + ", pipeline comm " + fixed(e.pipelineCommSeconds * 1e3, 1)
            + ", bubble " + fixed(e.bubbleSeconds * 1e3, 1) + ", data-parallel comm "
            + fixed(e.dataCommSeconds * 1e3, 1) + ", optimizer " + fixed(e.optimizerSeconds * 1e3, 1)
            + " ms (bf16, Adam).";
        return text;
    }

} // namespace

ClusterScale priceClusterSizes(const std::optional<GptShape>& model, const ClusterSizes& sizes,
    const ScheduleSpec& schedule, std::int64_t microBatch, bool stagesShareDevices)
{
    ClusterScale c;
    const auto& node = findNode(sizes.node);
    auto& k = c.config;
    k.tensor = std::max(1, sizes.tensor);
    k.pipeline = std::max(1, schedule.devices());
    k.data = std::max(1, sizes.data);
    k.microBatch = std::max<std::int64_t>(1, microBatch);
    k.globalBatch = static_cast<std::int64_t>(k.data) * k.microBatch * std::max(1, schedule.microBatches);
    k.chunks = schedule.kind == ScheduleKind::Interleaved ? std::max(1, schedule.virtualStages) : 1;
    k.group = schedule.kind == ScheduleKind::KFKB ? std::max(1, schedule.groupSize) : 1;
    k.zeroBubble = schedule.kind == ScheduleKind::ZeroBubbleH1;
    k.recompute = sizes.recompute;
    c.gpus = k.gpus();
    c.nodes = (c.gpus + node.gpus - 1) / node.gpus;
    if (!model) {
        c.estimate.reason = "tensor and data parallel sizes are priced for GPT decoders (the zoo's GPT-2 family); "
                            "this model plans its pipeline only";
    } else if (stagesShareDevices) {
        c.estimate.reason = "stages sharing devices (a Mixed-pipe plan) are not Megatron-LM's layout";
    } else if (schedule.kind != ScheduleKind::OneFOneB && schedule.kind != ScheduleKind::Interleaved
        && schedule.kind != ScheduleKind::KFKB && schedule.kind != ScheduleKind::ZeroBubbleH1) {
        c.estimate.reason =
            "Megatron-LM's layout is priced for the 1F1B, interleaved, kFkB and ZB-H1 schedules, not this plan's";
    } else {
        c.estimate = simulateScale(*model, k, node);
    }
    c.estimate.config = k;
    c.text = describe(c, node);
    return c;
}

} // namespace ps::gui
