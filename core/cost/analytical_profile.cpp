// Analytical profile: a roofline per kernel. time = launch + max(compute, memory), where compute is
// the kernel's FLOPs over the peak of the math pipe the training precision puts it on times that
// class's achievable fraction, and memory is the bytes it reads and writes over the memory
// bandwidth times an efficiency (streaming or windowed access).
//
// On GPUs the kernels are those PyTorch eager runs: cuDNN convolutions by algorithm class with the
// bias added by a kernel of its own, cuBLAS GEMMs with the bias in the epilogue (MatMuls priced by
// cost/gemm_model.h's tile and wave quantisation where the catalog gives the device's SMs), max pooling that
// writes int64 indices next to its output. On the CPU device (the engine's own kernels) a
// convolution is an im2col GEMM with its bias and a pooling writes only its output.
#include "cost/autocast.h"
#include "cost/gemm_model.h"
#include "cost/profile.h"
#include "graph/op_cost.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <variant>

namespace ps {
namespace {

    // Quantities of one node at micro-batch b, scaled from the graph's own micro-batch B0:
    // activation-sized terms scale with b/B0, parameter reads do not.
    struct Scaled
    {
        double forwardFlops;
        double backwardFlops;
        double weightGradFlops;
        double activationBytes; // read + written, excluding parameters
        double parameterBytes;
        double outputBytes;
    };

    // Bytes per element of what `node` reads and writes relative to the fp32 graph, under the
    // tensor types torch.autocast gives them (cost/autocast.h): a half-precision GEMM reads its
    // inputs' half copies, an fp32 op the fp32 ones.
    struct ByteScales
    {
        double read = 1; // activations and inputs
        double parameters = 1;
        double written = 1;
    };

    ByteScales byteScales(const Graph& g, const Node& node, const AutocastPlan& plan, bool mixed)
    {
        ByteScales s;
        if (!mixed)
            return s;
        const auto rule = autocastRule(g, node);
        const bool lower = rule == AutocastRule::Lower;
        const bool fp32 = rule == AutocastRule::Float32; // reads the fp32 copies its casts wrote
        double full = 0;
        double scaled = 0;
        for (const auto id : node.inputs) {
            const auto& t = g.tensor(id);
            if (t.kind == TensorKind::Parameter)
                continue;
            const auto bytes = static_cast<double>(numBytes(t.shape, t.dtype));
            full += bytes;
            scaled += bytes * (t.dtype != DType::F32 || fp32 ? 1.0 : lower ? 0.5 : plan.scale(id));
        }
        s.read = full > 0 ? scaled / full : 1;
        s.parameters = lower ? 0.5 : 1;
        full = scaled = 0;
        for (const auto id : node.outputs) {
            const auto bytes = static_cast<double>(numBytes(g.tensor(id).shape, g.tensor(id).dtype));
            full += bytes;
            scaled += bytes * plan.scale(id);
        }
        s.written = full > 0 ? scaled / full : 1;
        return s;
    }

    Scaled scaleTo(const OpCost& c, double ratio, const ByteScales& b)
    {
        const double actRead = static_cast<double>(c.bytesRead - c.parameterBytes) * b.read;
        return { c.forwardFlops * ratio, c.backwardFlops * ratio, c.weightGradFlops * ratio,
            (actRead + static_cast<double>(c.bytesWritten) * b.written) * ratio,
            static_cast<double>(c.parameterBytes) * b.parameters,
            static_cast<double>(c.outputBytes) * b.written * ratio };
    }

    double rooflineNs(double flops, double bytes, double peak, double bandwidth, double launchNs)
    {
        const double compute = peak > 0 ? flops / peak : 0;
        const double memory = bandwidth > 0 ? bytes / bandwidth : 0;
        return launchNs + 1e9 * std::max(compute, memory);
    }

    bool isCudaDevice(const DeviceSpec& d)
    {
        return d.id != "cpu";
    }

    // The fraction of a pipe's peak GEMMs reach, where the GEMM model does not price them by tiles:
    // a CPU's as measured (engine/cpu_probe.h), else the cost model's default.
    double gemmEfficiency(const DeviceSpec& d, const CostModelOptions& o)
    {
        return !isCudaDevice(d) && d.gemmEfficiencyFp32 > 0 ? d.gemmEfficiencyFp32 : o.matmulEfficiency;
    }

    // A kernel's fixed cost: the device's measured one (a CPU's dispatch and allocation), else the
    // cost model's launch.
    double launchNs(const DeviceSpec& d, const CostModelOptions& o)
    {
        return d.kernelOverheadNs > 0 ? d.kernelOverheadNs : o.kernelLaunchNs;
    }

    // The rate a kernel moving `bytes` streams at. A catalog GPU's is an efficiency times its
    // memory bandwidth; a measured CPU's rates come from a streaming kernel, within its cache share
    // (`cacheBytes`) or beyond it, and windowed access keeps the GPU's ratio to streaming.
    double streamBandwidth(const DeviceSpec& d, double bytes, bool windowedAccess, const CostModelOptions& o)
    {
        const double efficiency = windowedAccess ? o.windowedBandwidthEfficiency : o.bandwidthEfficiency;
        if (isCudaDevice(d))
            return d.memoryBandwidth * efficiency;
        const bool cached = d.cacheBytes > 0 && d.cacheBandwidth > 0 && bytes <= static_cast<double>(d.cacheBytes);
        return (cached ? d.cacheBandwidth : d.memoryBandwidth) * efficiency / o.bandwidthEfficiency;
    }

    // A pipe the device lacks (no TF32 before Ampere, no bf16 on V100) runs at the FP32 rate.
    double pipePeak(const DeviceSpec& d, MathMode mode)
    {
        const double p = d.peakFlops(mode);
        return p > 0 ? std::max(p, d.flopsFp32) : d.flopsFp32;
    }

    bool hasParameterOperand(const Graph& g, const Node& n)
    {
        return std::any_of(
            n.inputs.begin(), n.inputs.end(), [&g](TensorId t) { return g.tensor(t).kind == TensorKind::Parameter; });
    }

    KernelClass classOf(const Graph& g, const Node& n)
    {
        switch (n.op) {
        case OpType::MatMul:
        case OpType::Einsum:
            return hasParameterOperand(g, n) ? KernelClass::Gemm : KernelClass::Attention;
        case OpType::Conv:
            return KernelClass::Convolution;
        case OpType::Softmax:
        case OpType::Mask:
        case OpType::Attention:
            return KernelClass::Attention;
        case OpType::LayerNorm:
        case OpType::RMSNorm:
        case OpType::BatchNorm:
        case OpType::GroupNorm:
            return KernelClass::Normalization;
        case OpType::MaxPool:
        case OpType::AvgPool:
        case OpType::GlobalAvgPool:
            return KernelClass::Pooling;
        case OpType::Embedding:
            return KernelClass::Embedding;
        case OpType::ReduceMean:
        case OpType::ReduceSum:
        case OpType::ReduceMax:
        case OpType::CumSum:
        case OpType::TopK:
            return KernelClass::Reduction;
        case OpType::Reshape:
        case OpType::Transpose:
        case OpType::Split:
        case OpType::Slice:
        case OpType::Concat:
        case OpType::Select:
        case OpType::Expand:
        case OpType::Pad:
        case OpType::Resize:
        case OpType::Gather:
        case OpType::ScatterND:
        case OpType::GatherElements:
        case OpType::GatherND:
            return KernelClass::DataMovement;
        case OpType::CrossEntropy:
            return KernelClass::Loss;
        case OpType::Opaque:
            return KernelClass::Other;
        default:
            return KernelClass::Elementwise;
        }
    }

    // The arithmetic a branch-free special function costs per element where the engine's kernels
    // compute it in arithmetic (engine/kernel_math.h, run by the vector loops and the CUDA kernels),
    // which nominal FLOP counts (op_registry.cpp: GELU 8) leave out: e^x is a range reduction and a
    // degree-7 polynomial, about 20 operations (softmax and the loss's softmax, once per element);
    // tanh its odd series and its e^x side, both taken, about 45 (GELU's tanh form); the exact
    // GELU's erfc two e^x, a degree-9 polynomial and a division, about 50; dropout's counter hash
    // (SplitMix64: three 64-bit multiplies, shifts and xors on half-width lanes) about 25. Where
    // vector math sets an element-wise kernel's time (a CPU) these were 2-3x shorter than measured
    // without them; on a GPU such kernels stay memory-bound. Tanh, Erf, Exp, Log and Sigmoid nodes
    // call the C library's functions on the CPU (not priced here: their nominal FLOPs stand).
    struct SpecialFlops
    {
        double forward = 0;
        double backward = 0;
    };

    SpecialFlops specialFlops(const Node& n)
    {
        constexpr double kExp = 20;
        constexpr double kTanh = 45;
        constexpr double kErfc = 50;
        switch (n.op) {
        case OpType::Gelu: {
            const auto it = n.attrs.find("approximate");
            const bool tanh = it != n.attrs.end() && std::holds_alternative<std::string>(it->second)
                && std::get<std::string>(it->second) == "tanh";
            return tanh ? SpecialFlops { kTanh, kTanh } : SpecialFlops { kErfc, kErfc + kExp };
        }
        case OpType::Dropout:
            return { 25, 0 };
        case OpType::Softmax:
        case OpType::CrossEntropy: // e^x of every logit
            return { kExp, 0 };
        default:
            return {};
        }
    }

    bool windowed(OpType op)
    {
        return op == OpType::MaxPool || op == OpType::AvgPool || op == OpType::Resize || op == OpType::Pad;
    }

    struct ConvGeometry
    {
        std::int64_t channelsPerGroup = 1;
        std::int64_t group = 1;
        std::int64_t kernelArea = 1;
        std::int64_t kernelSide = 1; // the larger side
        bool unitStride = true;
        bool threeD = false; // over (D, H, W)
    };

    ConvGeometry convGeometry(const Graph& g, const Node& n)
    {
        ConvGeometry c;
        const auto& w = g.tensor(n.inputs[1]).shape; // (F, C / group, k...)
        c.channelsPerGroup = w.size() > 1 ? w[1] : 1;
        c.group = n.intAttr("group", 1);
        c.threeD = w.size() == 5;
        for (std::size_t d = 2; d < w.size(); ++d) {
            c.kernelArea *= w[d];
            c.kernelSide = std::max(c.kernelSide, w[d]);
        }
        for (auto s : n.intsAttr("strides"))
            c.unitStride = c.unitStride && s == 1;
        for (auto s : n.intsAttr("dilations"))
            c.unitStride = c.unitStride && s == 1;
        return c;
    }

    // The rate (FLOP/s) a convolution's multiplies run at, and the share of its FLOPs it computes.
    struct ConvRate
    {
        ConvAlgorithm algorithm;
        double flopsPerSecond;
        double flopScale = 1;
    };

    ConvRate convRate(const Graph& g, const Node& n, const DeviceSpec& d, const CostModelOptions& o)
    {
        const auto geo = convGeometry(g, n);
        const auto mode = convMathMode(o.setup);
        const double gemm = pipePeak(d, mode) * o.matmulEfficiency;
        if (!isCudaDevice(d)) // the CPU engine: im2col and its GEMM
            return { ConvAlgorithm::ImplicitGemm, d.flopsFp32 * gemmEfficiency(d, o) };
        if (geo.group > 1 && geo.channelsPerGroup < 16)
            return { ConvAlgorithm::Grouped, d.flopsFp32 * o.vectorEfficiency };
        if (geo.channelsPerGroup <= 4) {
            // Tensor-core tiles take 8 channels: a 3-channel image fills 3/8 of them under fp16/bf16;
            // under fp32/tf32 cuDNN picks FP32 kernels for such layers.
            if (o.setup.mixedPrecision())
                return { ConvAlgorithm::FewChannels, gemm * static_cast<double>(geo.channelsPerGroup) / 8.0 };
            return { ConvAlgorithm::FewChannels, d.flopsFp32 * o.fewChannelConvEfficiency };
        }
        ConvRate best { ConvAlgorithm::ImplicitGemm, gemm };
        // Winograd and FFT trade multiplies for transforms and run on FP32 cores; cuDNN's
        // autotuner takes them where they beat the implicit GEMM (2-D windows: its 3-D
        // convolutions are implicit GEMMs).
        if (geo.unitStride && geo.kernelSide >= 3 && !geo.threeD && !o.setup.mixedPrecision()) {
            const double reduction =
                geo.kernelSide == 3 ? o.winogradReduction : static_cast<double>(geo.kernelArea) / o.fftKernelArea;
            const double rate = d.flopsFp32 * o.matmulEfficiency * reduction;
            if (rate > best.flopsPerSecond)
                best = { ConvAlgorithm::Transform, rate };
        }
        return best;
    }

    // A MatMul's GEMMs at `ratio` times the graph's micro-batch: forward C = A B (A (..., M, K); B
    // (K, N), or (N, K) with trans_b, or batched like A), backward dA = dC B^T and dB = A^T dC
    // where those need a gradient. A flat B folds A's leading axes into M; batched operands keep
    // them as the batch. The micro-batch scales M (flat) or the batch.
    struct MatmulGemms
    {
        GemmShape forward;
        std::optional<GemmShape> inputGrad;
        std::optional<GemmShape> otherGrad; // B's gradient: the weight gradient when B is a parameter
    };

    std::optional<MatmulGemms> matmulGemms(
        const Graph& g, const Node& node, double ratio, const std::vector<bool>& requiresGrad)
    {
        if (node.op != OpType::MatMul || node.inputs.size() < 2)
            return std::nullopt;
        const auto& a = g.tensor(node.inputs[0]).shape;
        const auto& b = g.tensor(node.inputs[1]).shape;
        if (a.size() < 2 || b.size() < 2)
            return std::nullopt;
        const bool transB = node.intAttr("trans_b", 0) != 0;
        const auto leading = [](const Shape& s) {
            double p = 1;
            for (std::size_t i = 0; i + 2 < s.size(); ++i)
                p *= static_cast<double>(s[i]);
            return p;
        };
        const double m = static_cast<double>(a[a.size() - 2]);
        const double k = static_cast<double>(a.back());
        const double n = static_cast<double>(transB ? b[b.size() - 2] : b.back());
        MatmulGemms gm;
        const bool flat = leading(b) == 1;
        const double batch = flat ? 1 : std::max(leading(a), leading(b)) * ratio;
        const double rows = flat ? leading(a) * m * ratio : m;
        gm.forward = { batch, rows, n, k };
        if (requiresGrad[node.inputs[0].index()])
            gm.inputGrad = GemmShape { batch, rows, k, n };
        if (requiresGrad[node.inputs[1].index()])
            gm.otherGrad = GemmShape { batch, transB ? n : k, transB ? k : n, rows };
        return gm;
    }

    // The cast kernels autocast launches for a node's inputs, forward and (the gradients) backward.
    std::optional<KernelTime> castKernels(
        const Node& node, const AutocastPlan& plan, double ratio, const DeviceSpec& d, const CostModelOptions& o)
    {
        const auto i = node.id.index();
        const int count = plan.castKernels.empty() ? 0 : plan.castKernels[i];
        if (count == 0)
            return std::nullopt;
        const double launches = count * launchNs(d, o);
        const double bytes = plan.castActivationBytes[i] * ratio + plan.castParameterBytes[i];
        const double bandwidth = streamBandwidth(d, bytes, false, o);
        const double ns = rooflineNs(0, bytes, 0, bandwidth, launches);
        return KernelTime { KernelClass::Elementwise, ns, ns, 1e9 * plan.castParameterBytes[i] / bandwidth };
    }

    // Fused attention (graph/attention_fusion.h) as the engine runs it (engine/attention_kernel.cpp):
    // its GEMMs (scores and context; in the backward the scores again, dP, dV, dQ and dK) at the
    // GEMM rate, priced by the GEMM model on a catalog GPU, and the passes over the scores in memory
    // at the type the node runs in (bf16 under mixed precision, where autocast lowers attention):
    // softmax, forward, the scores written and read and the probabilities written and read, and as
    // much again for its backward and for the recomputation before it. With dropout in training,
    // the forward reads the probabilities and writes the dropped ones and the one-byte keep mask;
    // the backward applies that mask twice (to the probabilities for dV, to dP before the softmax).
    KernelTime attentionKernels(
        const Graph& g, const Node& node, const OpCost& c, double ratio, const DeviceSpec& d, const CostModelOptions& o)
    {
        const Shape& q = g.tensor(node.inputs[0]).shape;
        const Shape& k = g.tensor(node.inputs[1]).shape;
        const double heads =
            static_cast<double>(numElements(q)) / static_cast<double>(q[q.size() - 2] * q.back()) * ratio;
        const double tq = static_cast<double>(q[q.size() - 2]);
        const double tk = static_cast<double>(k[k.size() - 2]);
        const double dq = static_cast<double>(q.back());
        const double dv = static_cast<double>(g.tensor(node.inputs[2]).shape.back());
        const auto pipe = gemmDevice(d, matmulMathMode(o.setup));
        const bool model = isCudaDevice(d) && pipe.multiprocessors > 0 && pipe.efficiency > 0;
        const double rate = pipePeak(d, matmulMathMode(o.setup)) * gemmEfficiency(d, o);
        const double launch = launchNs(d, o);
        const auto gemm = [&](double m, double n, double kk) {
            const GemmShape shape { heads, m, n, kk };
            return launch + (model ? 1e9 * estimateGemm(shape, pipe).seconds : 1e9 * 2 * heads * m * n * kk / rate);
        };
        const double scores = heads * tq * tk;
        const double element = o.setup.mixedPrecision() && autocastRule(g, node) == AutocastRule::Lower ? 2.0 : 4.0;
        const double peak = d.flopsFp32 * o.vectorEfficiency;
        // One kernel over every score: `bytes` moved and `flops` done per score.
        const auto pass = [&](double bytes, double flops) {
            const double total = bytes * scores;
            return rooflineNs(flops * scores, total, peak, streamBandwidth(d, total, false, o), launch);
        };
        const double softmax = pass(4 * element, 25);
        const bool dropout = node.floatAttr("dropout", 0.0) > 0;
        const double maskBytes = 2 * element + 1; // probabilities in and out, the keep mask
        KernelTime t { KernelClass::Attention,
            gemm(tq, tk, dq) + softmax + (dropout ? pass(maskBytes, 25) : 0) + gemm(tq, dv, tk), 0, 0 };
        if (c.backwardFlops > 0)
            t.backwardNs = gemm(tq, tk, dq) + softmax + (dropout ? 2 * pass(maskBytes, 1) : 0) + gemm(tq, tk, dv)
                + gemm(tk, dv, tq) + softmax + gemm(tq, dq, tk) + gemm(tk, dq, tq);
        return t;
    }

    std::vector<KernelTime> opKernels(const Graph& g, const Node& node, const OpCost& c, double ratio,
        const ByteScales& scales, const DeviceSpec& d, const CostModelOptions& o, const std::vector<bool>& requiresGrad)
    {
        auto s = scaleTo(c, ratio, scales);
        if (const auto special = specialFlops(node); special.forward > 0 && !node.inputs.empty()) {
            // Per element of the larger of the first input and the first output (a loss's logits).
            const auto& in = g.tensor(node.inputs[0]).shape;
            const auto out = node.outputs.empty() ? Shape {} : g.tensor(node.outputs[0]).shape;
            const double elements =
                static_cast<double>(std::max(numElements(in), node.outputs.empty() ? 0 : numElements(out))) * ratio;
            s.forwardFlops += special.forward * elements;
            if (s.backwardFlops > 0)
                s.backwardFlops += special.backward * elements;
        }
        const auto kind = classOf(g, node);
        const bool cuda = isCudaDevice(d);
        double peak = d.flopsFp32 * o.vectorEfficiency;
        const double launch = launchNs(d, o);
        if (kind == KernelClass::Gemm || kind == KernelClass::Attention) {
            if (node.op == OpType::MatMul || node.op == OpType::Einsum)
                peak = pipePeak(d, matmulMathMode(o.setup)) * gemmEfficiency(d, o);
        } else if (kind == KernelClass::Convolution) {
            peak = convRate(g, node, d, o).flopsPerSecond;
        } else if (kind == KernelClass::Embedding) {
            s.parameterBytes = std::min(s.parameterBytes, s.outputBytes); // the rows gathered, not the table
        }
        if (node.op == OpType::MaxPool && cuda)
            s.activationBytes += 2 * s.outputBytes / scales.written; // int64 indices, one per output
        const double fwdBytes = s.activationBytes + s.parameterBytes;
        const double bw = streamBandwidth(d, fwdBytes, windowed(node.op), o);
        std::vector<KernelTime> kernels;
        // On a catalog GPU with the GEMM model's inputs, a MatMul's GEMMs are priced by tile and wave
        // quantisation (cost/gemm_model.h) instead of a flat fraction of peak.
        const auto pipe = gemmDevice(d, matmulMathMode(o.setup));
        if (cuda && pipe.multiprocessors > 0 && pipe.efficiency > 0) {
            if (const auto gm = matmulGemms(g, node, ratio, requiresGrad)) {
                const auto ns = [&pipe](const GemmShape& shape) { return 1e9 * estimateGemm(shape, pipe).seconds; };
                KernelTime t { kind, launch + ns(gm->forward), 0, 0 };
                if (gm->inputGrad)
                    t.backwardNs += launch + ns(*gm->inputGrad);
                if (gm->otherGrad) {
                    const double other = launch + ns(*gm->otherGrad);
                    t.backwardNs += other;
                    if (g.tensor(node.inputs[1]).kind == TensorKind::Parameter)
                        t.weightGradNs = other;
                }
                if (node.inputs.size() > 2 && requiresGrad[node.inputs[2].index()]) { // bias: dY summed over rows
                    const double bias = rooflineNs(0, s.outputBytes, 0, bw, launch);
                    t.backwardNs += bias;
                    t.weightGradNs += bias;
                }
                kernels.push_back(t);
                return kernels;
            }
        }
        KernelTime t { kind, rooflineNs(s.forwardFlops, fwdBytes, peak, bw, launch), 0, 0 };
        if (s.backwardFlops > 0) {
            // Backward reads the output gradient and saved inputs and writes input (and weight)
            // gradients: about twice the forward traffic.
            t.backwardNs = rooflineNs(s.backwardFlops, 2 * fwdBytes, peak,
                streamBandwidth(d, 2 * fwdBytes, windowed(node.op), o), 2 * launch);
            t.weightGradNs = t.backwardNs * (s.weightGradFlops / s.backwardFlops);
        }
        // A cuDNN convolution's bias is a separate kernel: read and write the output, then in
        // backward reduce the output gradient.
        if (node.op == OpType::Conv && node.inputs.size() > 2 && cuda && !o.fusedEpilogues) {
            const double biasBw = d.memoryBandwidth * o.bandwidthEfficiency;
            KernelTime bias { KernelClass::Elementwise, rooflineNs(0, 2 * s.outputBytes, 0, biasBw, o.kernelLaunchNs),
                0, 0 };
            if (s.backwardFlops > 0) {
                bias.backwardNs = rooflineNs(0, s.outputBytes, 0, biasBw, o.kernelLaunchNs);
                bias.weightGradNs = bias.backwardNs;
            }
            kernels.push_back(t);
            kernels.push_back(bias);
            return kernels;
        }
        kernels.push_back(t);
        return kernels;
    }

    std::vector<KernelTime> nodeKernels(const Graph& g, const Node& node, const OpCost& c, double ratio,
        const AutocastPlan& plan, const DeviceSpec& d, const CostModelOptions& o, const std::vector<bool>& requiresGrad)
    {
        auto kernels = node.op == OpType::Attention
            ? std::vector { attentionKernels(g, node, c, ratio, d, o) }
            : opKernels(g, node, c, ratio, byteScales(g, node, plan, o.setup.mixedPrecision()), d, o, requiresGrad);
        if (const auto cast = castKernels(node, plan, ratio, d, o))
            kernels.push_back(*cast);
        return kernels;
    }

    std::vector<std::vector<KernelTime>> kernelsAt(const Graph& graph, const std::vector<OpCost>& costs,
        const DeviceSpec& device, const CostModelOptions& options, double microBatch)
    {
        const double base = static_cast<double>(std::max<std::int64_t>(1, graph.info().microBatch));
        const auto plan = planAutocast(graph, options.setup.mixedPrecision());
        const auto requiresGrad = tensorsRequiringGrad(graph);
        std::vector<std::vector<KernelTime>> out;
        out.reserve(graph.nodeCount());
        for (const auto& node : graph.nodes())
            out.push_back(nodeKernels(
                graph, node, costs[node.id.index()], microBatch / base, plan, device, options, requiresGrad));
        return out;
    }

    KernelTime total(const std::vector<KernelTime>& kernels)
    {
        KernelTime t;
        for (const auto& k : kernels) {
            t.forwardNs += k.forwardNs;
            t.backwardNs += k.backwardNs;
            t.weightGradNs += k.weightGradNs;
        }
        return t;
    }

} // namespace

std::string_view toString(KernelClass k)
{
    static constexpr std::array<std::string_view, kKernelClassCount> names { "gemm", "convolution", "attention",
        "elementwise", "normalization", "pooling", "embedding", "reduction", "data-movement", "loss", "other" };
    return names[static_cast<std::size_t>(k)];
}

std::string_view toString(ConvAlgorithm a)
{
    switch (a) {
    case ConvAlgorithm::ImplicitGemm:
        return "implicit-gemm";
    case ConvAlgorithm::Transform:
        return "winograd/fft";
    case ConvAlgorithm::FewChannels:
        return "few-channels";
    case ConvAlgorithm::Grouped:
        return "grouped";
    }
    return "implicit-gemm";
}

LinearModel LinearModel::through(double b1, double v1, double b2, double v2)
{
    const double slope = (v2 - v1) / (b2 - b1);
    return { v1 - slope * b1, slope };
}

ConvAlgorithm convAlgorithm(
    const Graph& graph, const Node& node, const DeviceSpec& device, const CostModelOptions& options)
{
    return convRate(graph, node, device, options).algorithm;
}

std::vector<std::vector<KernelTime>> estimateKernels(
    const Graph& graph, const DeviceSpec& device, const CostModelOptions& options, double microBatch)
{
    return kernelsAt(graph, computeOpCosts(graph), device, options, microBatch);
}

Profile estimateProfile(const Graph& graph, const DeviceSpec& device, const CostModelOptions& options)
{
    // The line through micro-batch 1 and the model's own (16 at least): exact where the model is
    // planned, close between (a roofline bends where a kernel turns compute-bound).
    const auto costs = computeOpCosts(graph);
    const double base = static_cast<double>(std::max<std::int64_t>(1, graph.info().microBatch));
    const double kB1 = 1;
    const double kB2 = std::max(16.0, base);
    const double actScale = activationScale(options.setup);
    const bool mixed = options.setup.mixedPrecision();
    const auto types = planAutocast(graph, mixed);
    const auto at1 = kernelsAt(graph, costs, device, options, kB1);
    const auto at2 = kernelsAt(graph, costs, device, options, kB2);
    Profile profile { device.id, "analytical", options.setup, 0, {}, {} };
    profile.nodes.reserve(graph.nodeCount());
    for (const auto& node : graph.nodes()) {
        const auto& c = costs[node.id.index()];
        const auto t1 = total(at1[node.id.index()]);
        const auto t2 = total(at2[node.id.index()]);
        NodeProfile p;
        p.forwardNs = LinearModel::through(kB1, t1.forwardNs, kB2, t2.forwardNs);
        p.backwardNs = LinearModel::through(kB1, t1.backwardNs, kB2, t2.backwardNs);
        p.weightGradNs = LinearModel::through(kB1, t1.weightGradNs, kB2, t2.weightGradNs);
        // Memory at autocast's tensor types (the planner's stage model counts the same).
        p.outputBytes = { 0,
            static_cast<double>(c.outputBytes) * byteScales(graph, node, types, mixed).written / base };
        p.savedBytes = { 0, types.savedBytes(graph, node, c) / base };
        p.workspaceBytes = { cpuEngineScratch(device.id) ? static_cast<double>(c.fixedWorkspaceBytes) : 0.0,
            static_cast<double>(c.workspaceBytes) * actScale / base };
        p.parameterCount = c.parameterCount;
        profile.nodes.push_back(p);
    }
    return profile;
}

} // namespace ps
