#include "scale/scale_model.h"

#include "cost/gemm_model.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace ps {

namespace {

    constexpr double kHalf = 2; // bytes per bf16 element
    // Per parameter: bf16 weight, fp32 main gradient, fp32 master weight, Adam's m and v.
    constexpr double kStateBytes = 2 + 4 + 4 + 4 + 4;
    // Adam's memory traffic per parameter: master, m and v read and written (24), the fp32
    // gradient read (4), the bf16 weight written (2).
    constexpr double kAdamBytes = 30;

    struct LayerCost
    {
        double forward = 0; // seconds, one layer, one micro-batch, one GPU of the tensor group
        double backward = 0;
        double recompute = 0; // what backward adds to rebuild the saved activations
        double tensorComm = 0; // its all-reduces, forward + backward + recompute
    };

    struct Gemms
    {
        GemmDevice device;
        double forward = 0;
        double backward = 0;
        void add(double batch, double m, double n, double k, double* forwardOnly = nullptr)
        {
            const double f = estimateGemm({ batch, m, n, k }, device).seconds;
            forward += f;
            // dX = dY W^T (m x k over n) and dW = X^T dY (k x n over m).
            backward +=
                estimateGemm({ batch, m, k, n }, device).seconds + estimateGemm({ batch, k, n, m }, device).seconds;
            if (forwardOnly)
                *forwardOnly += f;
        }
    };

    LayerCost layerCost(const GptShape& g, const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device)
    {
        const double t = c.tensor;
        const double b = static_cast<double>(c.microBatch);
        const double s = static_cast<double>(g.seq);
        const double h = static_cast<double>(g.hidden);
        const double a = static_cast<double>(g.heads);
        Gemms gemms { gemmDevice(device, MathMode::Bf16) };
        double attentionCore = 0; // selective recomputation re-runs these
        gemms.add(1, b * s, 3 * h / t, h); // QKV
        gemms.add(b * a / t, s, s, h / a, &attentionCore); // scores
        gemms.add(b * a / t, s, h / a, s, &attentionCore); // probabilities x V
        gemms.add(1, b * s, h, h / t); // attention output projection
        gemms.add(1, b * s, 4 * h / t, h); // MLP up
        gemms.add(1, b * s, h, 4 * h / t); // MLP down
        // Memory-bound kernels (Megatron's fusions): two LayerNorms, the fused scale-mask-softmax,
        // attention dropout (with its 1-byte mask), two bias-dropout-adds, bias-GELU. With sequence
        // parallelism the LayerNorms and bias-dropout-adds see 1/t of the sequence.
        const double bsh = b * s * h;
        const double sharded = c.sequenceParallel ? bsh / t : bsh;
        const double scores = b * a * s * s / t;
        const double softmaxBytes = kHalf * 2 * scores + (2 * kHalf + 1) * scores;
        const double forwardBytes =
            kHalf * 2 * 2 * sharded + softmaxBytes + 2 * (3 * kHalf + 1) * sharded + kHalf * 2 * 4 * bsh / t;
        const double bandwidth = device.memoryBandwidth;
        LayerCost out;
        out.forward = gemms.forward + forwardBytes / bandwidth;
        out.backward = gemms.backward + 2 * forwardBytes / bandwidth;
        const double allReduce = ringAllReduceSeconds(c.tensor, kHalf * bsh, node.intra);
        int allReduces = 4; // two in forward, two in backward
        switch (c.recompute) {
        case Recompute::Full:
            out.recompute = out.forward;
            allReduces += 2;
            break;
        case Recompute::Selective:
            out.recompute = attentionCore + softmaxBytes / bandwidth;
            break;
        case Recompute::None:
            break;
        }
        out.tensorComm = allReduces * allReduce;
        return out;
    }

    // Activation bytes one layer keeps per micro-batch (Korthikanti et al., Table 2): s b h (10 + 24 /
    // t + 5 a s / (h t)) in full, its input alone under full recomputation, all but the attention
    // core under selective; with sequence parallelism the 10 s b h of LayerNorm and dropout (and the
    // saved input) are sharded too: s b h (34 / t + 5 a s / (h t)).
    double layerActivationBytes(const GptShape& g, const ScaleConfig& c, Recompute r)
    {
        const double sbh =
            static_cast<double>(g.seq) * static_cast<double>(c.microBatch) * static_cast<double>(g.hidden);
        const double t = c.tensor;
        const double attention =
            5.0 * static_cast<double>(g.heads) * static_cast<double>(g.seq) / (static_cast<double>(g.hidden) * t);
        const double sequenceShare = c.sequenceParallel ? 1 / t : 1;
        switch (r) {
        case Recompute::Full:
            return 2 * sbh * sequenceShare;
        case Recompute::Selective:
            return sbh * (10 * sequenceShare + 24 / t);
        case Recompute::None:
            break;
        }
        return sbh * (10 * sequenceShare + 24 / t + attention);
    }

    // Memory of each stage: model states (the first stage with the embeddings; the last, where p > 1,
    // with its copy of the tied word embedding `wordEmbedding` (V h) for the logits, and the logits'
    // fp32 working set `logitBytes`), the activations of the micro-batches in flight (1F1B: p - i on
    // stage i, at most m; interleaved: Megatron's warm-up of 2(p - i - 1) + (v - 1) p chunk passes
    // plus one), one layer's full working set while it is recomputed and back-propagated. ZeRO-1
    // keeps 1/d of the fp32 master weights and Adam's m and v (12 of the 18 bytes).
    std::vector<double> stagePeakBytes(
        const GptShape& g, const ScaleConfig& c, double layerParams, double wordEmbedding, double logitBytes)
    {
        const double p = c.pipeline;
        const double v = c.chunks;
        const double layersPerStage = static_cast<double>(g.layers) / p;
        const double positions = static_cast<double>(g.seq) * static_cast<double>(g.hidden);
        const double stateBytes = c.zero1 ? kStateBytes - 12 + 12 / static_cast<double>(c.data) : kStateBytes;
        const double layerBytes = layerActivationBytes(g, c, c.recompute);
        std::vector<double> out(static_cast<std::size_t>(c.pipeline));
        for (int i = 0; i < c.pipeline; ++i) {
            const bool first = i == 0;
            const bool last = i + 1 == c.pipeline;
            const double params = (layersPerStage * layerParams + (first ? wordEmbedding + positions : 0.0)
                                      + (last && !first ? wordEmbedding : 0.0))
                / c.tensor;
            const double m = static_cast<double>(c.microBatches());
            const double chunks =
                c.chunks > 1 ? std::min(2 * (p - i - 1) + (v - 1) * p + 1, m * v) : std::min(p - i, m);
            const double activations = chunks * (layersPerStage / v) * layerBytes
                + layerActivationBytes(g, c, Recompute::None) + (last ? logitBytes : 0.0);
            out[static_cast<std::size_t>(i)] = stateBytes * params + activations;
        }
        return out;
    }

} // namespace

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
    for (auto r : { Recompute::None, Recompute::Selective, Recompute::Full }) {
        if (toString(r) == text)
            return r;
    }
    throw Error("unknown recomputation '" + std::string(text) + "' (none, selective, full)");
}

std::int64_t ScaleConfig::microBatches() const
{
    const auto perStep = static_cast<std::int64_t>(data) * microBatch;
    return perStep > 0 ? globalBatch / perStep : 0;
}

std::string ScaleConfig::text() const
{
    return "t" + std::to_string(tensor) + " p" + std::to_string(pipeline) + " d" + std::to_string(data) + " b"
        + std::to_string(microBatch) + " " + (chunks > 1 ? "interleaved:" + std::to_string(chunks) : "1f1b") + " "
        + std::string(toString(recompute)) + (sequenceParallel ? " sp" : "") + (zero1 ? " zero1" : "")
        + (overlapGradientReduce ? " overlap" : "");
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
        if (c.tensor < 1 || c.pipeline < 1 || c.data < 1 || c.microBatch < 1 || c.chunks < 1)
            return "sizes must be positive";
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
    const auto layer = layerCost(g, c, node, device);
    const double b = static_cast<double>(c.microBatch);
    const double s = static_cast<double>(g.seq);
    const double h = static_cast<double>(g.hidden);
    const double V = static_cast<double>(g.vocab);
    // The logits and cross-entropy on the last stage (vocabulary split over the tensor group).
    Gemms logits { gemmDevice(device, MathMode::Bf16) };
    logits.add(1, b * s, V / c.tensor, h);
    const double lossBytes = 3 * 4 * b * s * V / c.tensor; // fp32 logits read, softmax, gradient written
    const double head = logits.forward + logits.backward + lossBytes / device.memoryBandwidth;
    const double compute = layersPerStage * (layer.forward + layer.backward + layer.recompute);
    const double tensorComm = layersPerStage * layer.tensorComm;
    // Each chunk sends its activation forward and receives its gradient back, 1/t of it per GPU
    // (Megatron's scatter-gather). Ranks are tensor-, then data-, then pipeline-major, so once a
    // pipeline spans more than one node some stage boundary crosses the NICs and paces the rest.
    const bool crossNode = c.tensor * c.data * c.pipeline > node.gpus;
    const auto link = crossNode ? nicShare(node, node.gpus) : node.intra;
    const double pipeComm = p > 1 ? 2 * v * pointToPointSeconds(kHalf * b * s * h / c.tensor, link) : 0;
    const double perMicroBatch = compute + tensorComm + pipeComm; // a middle stage's
    const double slowest = perMicroBatch + head;
    const double mb = static_cast<double>(m);
    const double bubble = (p - 1) / v * perMicroBatch;
    // Data parallelism: the stage's fp32 gradients all-reduced over d replicas after the backward
    // (not overlapped, as in the paper's runs, unless asked); ranks are tensor-major, so 8/t replicas
    // share a node. ZeRO-1: a reduce-scatter of the fp32 gradients and an all-gather of the bf16
    // weights, each half an all-reduce of its bytes, and 1/d of Adam's work.
    const double layerParams = 12 * h * h + 13 * h;
    const double stageParams = (layersPerStage * layerParams + (V + s) * h) / c.tensor; // first stage (embeddings)
    const int perNode = std::max(1, std::min(c.data, node.gpus / c.tensor));
    const CommGroup dataGroup { perNode, (c.data + perNode - 1) / perNode };
    const double d = c.data;
    const double gradientReduce = c.zero1
        ? (allReduceSeconds(dataGroup, 4 * stageParams, node) + allReduceSeconds(dataGroup, kHalf * stageParams, node))
            / 2
        : allReduceSeconds(dataGroup, 4 * stageParams, node);
    // Overlapped: the gradients' reduction hidden behind the last micro-batch's backward on the
    // stage, but for the last bucket; ZeRO-1's all-gather of the updated weights follows the
    // optimizer step and is never hidden.
    const double lastBackward = layersPerStage * (layer.backward + layer.recompute);
    const double afterStep = c.zero1 ? allReduceSeconds(dataGroup, kHalf * stageParams, node) / 2 : 0.0;
    const double reduction = gradientReduce - afterStep;
    e.dataCommSeconds = c.overlapGradientReduce && c.data > 1
        ? std::max(reduction / layersPerStage, reduction - lastBackward) + afterStep
        : gradientReduce;
    e.optimizerSeconds = kAdamBytes * stageParams / device.memoryBandwidth / (c.zero1 ? d : 1.0);
    e.computeSeconds = mb * (compute + head);
    e.tensorCommSeconds = mb * tensorComm;
    e.pipelineCommSeconds = mb * pipeComm;
    e.bubbleSeconds = bubble;
    e.iterationSeconds = mb * slowest + bubble + e.dataCommSeconds + e.optimizerSeconds;
    e.tflopsPerGpu = megatronIterationFlops(g, c.globalBatch) / e.iterationSeconds / c.gpus() / 1e12;
    e.samplesPerSecond = static_cast<double>(c.globalBatch) / e.iterationSeconds;
    e.stagePeakBytes = stagePeakBytes(g, c, layerParams, V * h, lossBytes / 3);
    e.peakBytes = *std::max_element(e.stagePeakBytes.begin(), e.stagePeakBytes.end());
    e.fits = e.peakBytes <= static_cast<double>(device.memoryBytes);
    if (!e.fits)
        e.reason = "needs " + std::to_string(static_cast<long long>(e.peakBytes / (1 << 30)))
            + " GiB per GPU, more than " + device.name + "'s " + std::to_string(device.memoryBytes >> 30) + " GiB";
    return e;
}

ScaleSearch searchScale(const GptShape& g, int gpus, std::int64_t globalBatch, const NodeSpec& node, std::size_t keep,
    ScaleFeatures features)
{
    ScaleSearch out { gpus, globalBatch, {}, 0, {} };
    for (int t = 1; t <= node.gpus; t *= 2) {
        if (node.gpus % t != 0 || g.heads % t != 0 || gpus % t != 0)
            continue;
        for (int p = 1; p <= g.layers && t * p <= gpus; ++p) {
            if (g.layers % p != 0 || gpus % (t * p) != 0)
                continue;
            const int d = gpus / (t * p);
            std::optional<ScaleEstimate> best; // of this (t, p, d)
            const auto better = [](const ScaleEstimate& e, const ScaleEstimate& than) {
                if (e.fits != than.fits)
                    return e.fits;
                return e.fits ? e.samplesPerSecond > than.samplesPerSecond : e.peakBytes < than.peakBytes;
            };
            for (std::int64_t b = 1; b <= 16; b *= 2) {
                if (globalBatch % (d * b) != 0)
                    continue;
                for (int v = 1; v <= 8; ++v) {
                    if (v > 1 && (p < 2 || g.layers % (static_cast<std::int64_t>(p) * v) != 0))
                        continue;
                    for (auto r : { Recompute::None, Recompute::Selective, Recompute::Full }) {
                        ScaleConfig c { t, p, d, b, globalBatch, v, r };
                        c.sequenceParallel = features.sequenceParallel && t > 1;
                        c.zero1 = features.zero1;
                        c.overlapGradientReduce = features.overlapGradientReduce;
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
    std::sort(out.ranked.begin(), out.ranked.end(),
        [](const ScaleEstimate& a, const ScaleEstimate& b) { return a.samplesPerSecond > b.samplesPerSecond; });
    if (out.ranked.size() > keep)
        out.ranked.resize(keep);
    return out;
}

} // namespace ps
