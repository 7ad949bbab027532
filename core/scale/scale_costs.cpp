#include "scale/scale_costs.h"

#include "cost/gemm_model.h"
#include "cost/runtime_memory.h"

#include <algorithm>

namespace ps::scale {

namespace {

    // Adam's memory traffic per parameter: master, m and v read and written (24), the fp32
    // gradient read (4), the bf16 weight written (2).
    constexpr double kAdamBytes = 30;

    struct Gemms
    {
        GemmDevice device;
        double forward = 0;
        double backward = 0;
        double weightGrad = 0;
        void add(double batch, double m, double n, double k, double* forwardOnly = nullptr, bool weights = true)
        {
            const double f = estimateGemm({ batch, m, n, k }, device).seconds;
            forward += f;
            // dX = dY W^T (m x k over n) and dW = X^T dY (k x n over m); attention's two batched
            // products have no weights: both of their gradients are input gradients.
            const double dW = estimateGemm({ batch, k, n, m }, device).seconds;
            backward += estimateGemm({ batch, m, k, n }, device).seconds + dW;
            weightGrad += weights ? dW : 0.0;
            if (forwardOnly)
                *forwardOnly += f;
        }
    };

} // namespace

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
    gemms.add(b * a / t, s, s, h / a, &attentionCore, false); // scores
    gemms.add(b * a / t, s, h / a, s, &attentionCore, false); // probabilities x V
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
    out.weightGrad = gemms.weightGrad;
    out.allReduce = ringAllReduceSeconds(c.tensor, kHalf * bsh, node.intra);
    switch (c.recompute) {
    case Recompute::Full:
        out.recompute = out.forward;
        out.backwardAllReduces += 2;
        break;
    case Recompute::Selective:
        out.recompute = attentionCore + softmaxBytes / bandwidth;
        break;
    case Recompute::None:
        break;
    }
    return out;
}

HeadCost headCost(const GptShape& g, const ScaleConfig& c, const DeviceSpec& device)
{
    const double bs = static_cast<double>(c.microBatch) * static_cast<double>(g.seq);
    const double vocab = static_cast<double>(g.vocab) / c.tensor;
    Gemms logits { gemmDevice(device, MathMode::Bf16) };
    logits.add(1, bs, vocab, static_cast<double>(g.hidden));
    const double lossBytes = 3 * 4 * bs * vocab; // fp32 logits read, softmax, gradient written
    return { logits.forward, logits.backward + lossBytes / device.memoryBandwidth, logits.weightGrad, lossBytes / 3 };
}

double layerActivationBytes(const GptShape& g, const ScaleConfig& c, Recompute r)
{
    // Korthikanti et al., Table 2: s b h (10 + 24 / t + 5 a s / (h t)) in full, its input alone
    // under full recomputation, all but the attention core under selective; with sequence
    // parallelism the 10 s b h of LayerNorm and dropout (and the saved input) are sharded too.
    const double sbh = static_cast<double>(g.seq) * static_cast<double>(c.microBatch) * static_cast<double>(g.hidden);
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

double layerParameters(const GptShape& g)
{
    const double h = static_cast<double>(g.hidden);
    return 12 * h * h + 13 * h;
}

double stageSendBytes(const GptShape& g, const ScaleConfig& c)
{
    return kHalf * static_cast<double>(c.microBatch) * static_cast<double>(g.seq) * static_cast<double>(g.hidden)
        / c.tensor;
}

LinkSpec pipelineLink(const ScaleConfig& c, const NodeSpec& node)
{
    // Once a pipeline spans more than one node some stage boundary crosses the NICs and paces the rest.
    const bool crossNode = c.tensor * c.data * c.pipeline > node.gpus;
    return crossNode ? nicShare(node, node.gpus) : node.intra;
}

AfterPipeline afterPipeline(const GptShape& g, const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device,
    double lastBackward, int stage)
{
    // The stage's fp32 gradients all-reduced over d replicas after the backward (not overlapped, as
    // in the paper's runs, unless asked); ranks are tensor-major, so 8/t replicas share a node.
    // ZeRO-1: a reduce-scatter of the fp32 gradients and an all-gather of the bf16 weights, each half
    // an all-reduce of its bytes, and 1/d of Adam's work.
    const double layersPerStage = static_cast<double>(g.layers) / c.pipeline;
    const double h = static_cast<double>(g.hidden);
    const double embeddings = stage == 0 ? static_cast<double>(g.vocab + g.seq) * h
        : stage + 1 == c.pipeline        ? static_cast<double>(g.vocab) * h
                                         : 0.0;
    const double stageParams = (layersPerStage * layerParameters(g) + embeddings) / c.tensor;
    const int perNode = std::max(1, std::min(c.data, node.gpus / c.tensor));
    const CommGroup dataGroup { perNode, (c.data + perNode - 1) / perNode };
    const double gradientReduce = c.zero1
        ? (allReduceSeconds(dataGroup, 4 * stageParams, node) + allReduceSeconds(dataGroup, kHalf * stageParams, node))
            / 2
        : allReduceSeconds(dataGroup, 4 * stageParams, node);
    // Overlapped: the gradients' reduction hidden behind the last micro-batch's backward on the
    // stage, but for the last bucket (one layer's); ZeRO-1's all-gather of the updated weights
    // follows the optimizer step and is never hidden.
    const double afterStep = c.zero1 ? allReduceSeconds(dataGroup, kHalf * stageParams, node) / 2 : 0.0;
    const double reduction = gradientReduce - afterStep;
    AfterPipeline out;
    out.dataComm = c.overlapGradientReduce && c.data > 1
        ? std::max(reduction / layersPerStage, reduction - lastBackward) + afterStep
        : gradientReduce;
    out.optimizer = kAdamBytes * stageParams / device.memoryBandwidth / (c.zero1 ? c.data : 1.0);
    return out;
}

double usableBytes(const DeviceSpec& device)
{
    return RuntimeMemory {}.usableBytes(static_cast<double>(device.memoryBytes));
}

std::string notFitting(double peakBytes, const DeviceSpec& device)
{
    const auto gib = [](double bytes) { return std::to_string(static_cast<long long>(bytes / (1 << 30))); };
    return "needs " + gib(peakBytes) + " GiB per GPU, more than the " + gib(usableBytes(device)) + " GiB of "
        + device.name + "'s " + gib(static_cast<double>(device.memoryBytes))
        + " GiB a PyTorch process leaves for tensors (CUDA context and allocator, as measured)";
}

std::vector<double> stagePeakBytes(const GptShape& g, const ScaleConfig& c, double logitBytes)
{
    // Model states (the first stage with the embeddings; the last, where p > 1, with its copy of the
    // tied word embedding for the logits, and the logits' fp32 working set), the activations of the
    // micro-batches in flight (1F1B and ZB-H1: p - i on stage i, at most m; kFkB: k (p - i);
    // interleaved: Megatron's warm-up of 2(p - i - 1) + (v - 1) p chunk passes plus one), one
    // layer's full working set while it is recomputed and back-propagated. ZeRO-1 keeps 1/d of the
    // fp32 master weights and Adam's m and v (12 of the 18 bytes).
    const double p = c.pipeline;
    const double v = c.chunks;
    const double layersPerStage = static_cast<double>(g.layers) / p;
    const double h = static_cast<double>(g.hidden);
    const double wordEmbedding = static_cast<double>(g.vocab) * h;
    const double positions = static_cast<double>(g.seq) * h;
    const double stateBytes = c.zero1 ? kStateBytes - 12 + 12 / static_cast<double>(c.data) : kStateBytes;
    const double layerBytes = layerActivationBytes(g, c, c.recompute);
    const double m = static_cast<double>(c.microBatches());
    std::vector<double> out(static_cast<std::size_t>(c.pipeline));
    for (int i = 0; i < c.pipeline; ++i) {
        const bool first = i == 0;
        const bool last = i + 1 == c.pipeline;
        const double params = (layersPerStage * layerParameters(g) + (first ? wordEmbedding + positions : 0.0)
                                  + (last && !first ? wordEmbedding : 0.0))
            / c.tensor;
        const double inFlight =
            c.chunks > 1 ? std::min(2 * (p - i - 1) + (v - 1) * p + 1, m * v) : std::min(c.group * (p - i), m);
        const double activations = inFlight * (layersPerStage / v) * layerBytes
            + layerActivationBytes(g, c, Recompute::None) + (last ? logitBytes : 0.0);
        out[static_cast<std::size_t>(i)] = stateBytes * params + activations;
    }
    return out;
}

} // namespace ps::scale
