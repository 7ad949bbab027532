#include "scale/scale_model.h"

#include "scale/scale_costs.h"
#include "scale/scale_sim.h"
#include "util/enum_names.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

namespace ps {

double GptShape::parameters() const
{
    const double l = static_cast<double>(layers);
    const double h = static_cast<double>(hidden);
    return 12 * l * h * h * (1 + 13 / (12 * h) + static_cast<double>(vocab + seq) / (12 * l * h));
}

std::string_view toString(Recompute r)
{
    switch (r) {
    case Recompute::None:
        return "none";
    case Recompute::Selective:
        return "selective";
    case Recompute::Full:
        return "full";
    }
    return "full";
}

Recompute parseRecompute(std::string_view text)
{
    return parseByName("recomputation", text, { Recompute::None, Recompute::Selective, Recompute::Full });
}

std::int64_t ScaleConfig::microBatches() const
{
    const auto perStep = static_cast<std::int64_t>(data) * microBatch;
    return perStep > 0 ? globalBatch / perStep : 0;
}

std::string ScaleConfig::scheduleText() const
{
    if (chunks > 1)
        return "interleaved:" + std::to_string(chunks);
    if (group > 1)
        return "kfkb:" + std::to_string(group);
    return zeroBubble ? "zb-h1" : "1f1b";
}

void setScaleSchedule(ScaleConfig& c, std::string_view text)
{
    const auto count = [&](std::string_view prefix) {
        const auto digits = text.substr(prefix.size());
        if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string_view::npos)
            return 0;
        return std::stoi(std::string(digits));
    };
    c.chunks = 1;
    c.group = 1;
    c.zeroBubble = false;
    if (text == "1f1b")
        return;
    if (text == "zb-h1") {
        c.zeroBubble = true;
        return;
    }
    if (text.starts_with("interleaved:") && count("interleaved:") >= 2) {
        c.chunks = count("interleaved:");
        return;
    }
    if (text.starts_with("kfkb:") && count("kfkb:") >= 2) {
        c.group = count("kfkb:");
        return;
    }
    throw Error("schedule '" + std::string(text) + "': 1f1b, interleaved:V (V >= 2), kfkb:K (K >= 2) or zb-h1");
}

std::string ScaleConfig::text() const
{
    return "t" + std::to_string(tensor) + " p" + std::to_string(pipeline) + " d" + std::to_string(data) + " b"
        + std::to_string(microBatch) + " " + scheduleText() + " " + std::string(toString(recompute))
        + (sequenceParallel ? " sp" : "") + (zero1 ? " zero1" : "") + (overlapGradientReduce ? " overlap" : "");
}

double megatronIterationFlops(const GptShape& g, std::int64_t globalBatch)
{
    const double B = static_cast<double>(globalBatch);
    const double s = static_cast<double>(g.seq);
    const double l = static_cast<double>(g.layers);
    const double h = static_cast<double>(g.hidden);
    const double V = static_cast<double>(g.vocab);
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

ScaleEstimate estimateScale(const GptShape& g, const ScaleConfig& c, const NodeSpec& node)
{
    return estimateScale(g, c, node, DeviceCatalog::builtin().find(node.deviceId));
}

namespace {

    // Why a configuration cannot run (sizes that do not divide, a batch that does not split), or
    // nothing.
    std::optional<std::string> invalidReason(const GptShape& g, const ScaleConfig& c, const NodeSpec& node)
    {
        if (c.tensor < 1 || c.pipeline < 1 || c.data < 1 || c.microBatch < 1 || c.chunks < 1 || c.group < 1)
            return "sizes must be positive";
        if ((c.chunks > 1) + (c.group > 1) + c.zeroBubble > 1)
            return "one schedule at a time: interleaved, kFkB or ZB-H1";
        if (node.gpus % c.tensor != 0)
            return "tensor parallelism " + std::to_string(c.tensor) + " does not divide a node's "
                + std::to_string(node.gpus) + " GPUs";
        if (g.heads % c.tensor != 0 || g.hidden % c.tensor != 0)
            return "tensor parallelism " + std::to_string(c.tensor) + " does not divide the heads and width";
        if (g.layers % (static_cast<std::int64_t>(c.pipeline) * c.chunks) != 0)
            return std::to_string(g.layers) + " layers do not split into " + std::to_string(c.pipeline) + " x "
                + std::to_string(c.chunks) + " equal chunks";
        const auto m = c.microBatches();
        if (m < 1 || m * c.data * c.microBatch != c.globalBatch)
            return "global batch " + std::to_string(c.globalBatch)
                + " is not a multiple of d x b = " + std::to_string(c.data * c.microBatch);
        if (c.chunks > 1 && (c.pipeline < 2 || m % c.pipeline != 0))
            return "the interleaved schedule needs p > 1 and micro-batches a multiple of p";
        if (c.group > m)
            return "kFkB's k = " + std::to_string(c.group) + " is more than the " + std::to_string(m)
                + " micro-batches";
        return std::nullopt;
    }

} // namespace

ScaleEstimate estimateScale(const GptShape& g, const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device)
{
    ScaleEstimate e;
    e.config = c;
    if (auto why = invalidReason(g, c, node)) {
        e.reason = std::move(*why);
        return e;
    }
    e.valid = true;
    const auto m = c.microBatches();
    const double p = c.pipeline;
    const double v = c.chunks;
    const double layersPerStage = static_cast<double>(g.layers) / p;
    const auto layer = scale::layerCost(g, c, node, device);
    const auto head = scale::headCost(g, c, device);
    const double compute = layersPerStage * (layer.forward + layer.backward + layer.recompute);
    const double tensorComm = layersPerStage * layer.tensorComm();
    // Each chunk sends its activation forward and receives its gradient back.
    const double pipeComm =
        p > 1 ? 2 * v * pointToPointSeconds(scale::stageSendBytes(g, c), scale::pipelineLink(c, node)) : 0;
    const double perMicroBatch = compute + tensorComm + pipeComm; // a middle stage's
    const double mb = static_cast<double>(m);
    // The bubble: (p - 1) / v micro-batches (1F1B, interleaved; kFkB's cross-merged copies of 1F1B
    // fill and drain the same, its gain being sends overlapped with a group's compute, which the
    // simulation shows); ZB-H1 fills the drain with the deferred weight gradients, (p - 1)(F + B - W)
    // where 1F1B idles (p - 1)(F + B + W) (Qi et al. 2024, §3).
    double bubble = (p - 1) / v * perMicroBatch;
    if (c.zeroBubble)
        bubble = std::max(0.0, bubble - (p - 1) * 2 * layersPerStage * layer.weightGrad);
    const auto after = scale::afterPipeline(g, c, node, device, layersPerStage * (layer.backward + layer.recompute));
    e.dataCommSeconds = after.dataComm;
    e.optimizerSeconds = after.optimizer;
    e.computeSeconds = mb * (compute + head.forward + head.backward);
    e.tensorCommSeconds = mb * tensorComm;
    e.pipelineCommSeconds = mb * pipeComm;
    e.bubbleSeconds = bubble;
    e.iterationSeconds = e.computeSeconds + e.tensorCommSeconds + e.pipelineCommSeconds + bubble + e.dataCommSeconds
        + e.optimizerSeconds;
    e.tflopsPerGpu = megatronIterationFlops(g, c.globalBatch) / e.iterationSeconds / c.gpus() / 1e12;
    e.samplesPerSecond = static_cast<double>(c.globalBatch) / e.iterationSeconds;
    e.stagePeakBytes = scale::stagePeakBytes(g, c, head.logitBytes);
    e.peakBytes = *std::max_element(e.stagePeakBytes.begin(), e.stagePeakBytes.end());
    e.fits = e.peakBytes <= scale::usableBytes(device);
    if (!e.fits)
        e.reason = scale::notFitting(e.peakBytes, device);
    return e;
}

namespace {

    // The schedules searched for one (t, p, d, b): 1F1B, interleaved with v = 2..8 chunks splitting
    // the layers evenly, kFkB with k = 2 and 4, ZB-H1.
    std::vector<ScaleConfig> scheduleVariants(const GptShape& g, ScaleConfig c)
    {
        std::vector<ScaleConfig> out { c };
        for (int v = 2; v <= 8; ++v) {
            if (c.pipeline >= 2 && g.layers % (static_cast<std::int64_t>(c.pipeline) * v) == 0) {
                auto i = c;
                i.chunks = v;
                out.push_back(i);
            }
        }
        if (c.pipeline >= 2) {
            for (int k : { 2, 4 }) {
                auto kfkb = c;
                kfkb.group = k;
                out.push_back(kfkb);
            }
            c.zeroBubble = true;
            out.push_back(c);
        }
        return out;
    }

    bool better(const ScaleEstimate& e, const ScaleEstimate& than)
    {
        if (e.fits != than.fits)
            return e.fits;
        return e.fits ? e.samplesPerSecond > than.samplesPerSecond : e.peakBytes < than.peakBytes;
    }

} // namespace

ScaleSearch searchScale(const GptShape& g, int gpus, std::int64_t globalBatch, const NodeSpec& node, std::size_t keep,
    ScaleFeatures features)
{
    ScaleSearch out { gpus, globalBatch, {}, 0, 0, {} };
    for (int t = 1; t <= node.gpus; ++t) {
        if (node.gpus % t != 0 || g.heads % t != 0 || gpus % t != 0)
            continue;
        for (int p = 1; p <= g.layers && t * p <= gpus; ++p) {
            if (g.layers % p != 0 || gpus % (t * p) != 0)
                continue;
            const int d = gpus / (t * p);
            std::optional<ScaleEstimate> best; // of this (t, p, d)
            for (std::int64_t b = 1; b <= 16; b *= 2) {
                if (globalBatch % (d * b) != 0)
                    continue;
                for (auto r : { Recompute::None, Recompute::Selective, Recompute::Full }) {
                    ScaleConfig base { t, p, d, b, globalBatch, 1, r };
                    base.sequenceParallel = features.sequenceParallel && t > 1;
                    base.zero1 = features.zero1;
                    base.overlapGradientReduce = features.overlapGradientReduce;
                    for (const auto& c : scheduleVariants(g, base)) {
                        const auto e = estimateScale(g, c, node);
                        ++out.evaluated;
                        if (e.valid && e.fits)
                            out.ranked.push_back(e);
                        if (e.valid && (!best || better(e, *best)))
                            best = e;
                    }
                }
            }
            if (best)
                out.bestPerShape.push_back(*best);
        }
    }
    // Memory prunes, the closed form ranks; the simulation re-ranks the leaders and prices each
    // shape's best (the closed form misses how a schedule overlaps sends and fills its bubble).
    const auto faster = [](const ScaleEstimate& a, const ScaleEstimate& b) {
        return a.samplesPerSecond > b.samplesPerSecond;
    };
    std::sort(out.ranked.begin(), out.ranked.end(), faster);
    out.ranked.resize(std::min(out.ranked.size(), std::max<std::size_t>(keep, 32)));
    std::map<std::string, ScaleEstimate> simulated; // by configuration text: each simulated once
    const auto simulateOnce = [&](ScaleEstimate& e) {
        const auto key = e.config.text();
        auto it = simulated.find(key);
        if (it == simulated.end())
            it = simulated.emplace(key, simulateScale(g, e.config, node)).first;
        e = it->second;
    };
    for (auto& e : out.ranked)
        simulateOnce(e);
    for (auto& e : out.bestPerShape)
        simulateOnce(e);
    out.simulated = static_cast<int>(simulated.size());
    // What fits goes by the simulator's memory model, the one `compare` holds against measured runs.
    std::erase_if(out.ranked, [](const ScaleEstimate& e) { return !e.fits; });
    std::sort(out.ranked.begin(), out.ranked.end(), faster);
    if (out.ranked.size() > keep)
        out.ranked.resize(keep);
    return out;
}

} // namespace ps
