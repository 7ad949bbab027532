// One entry per IR op (see op_registry.h). Entries are grouped by family; the few custom cost and
// saved-state rules sit above the table that names them, the shape rules in op_shapes.cpp.
#include "graph/op_registry.h"

#include "graph/attention_fusion.h"
#include "graph/group_norm.h"
#include "graph/op_shapes.h"
#include "graph/shape_inference.h"
#include "util/error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

namespace ps {
namespace {
    using namespace opshapes;

    // ---- custom costs and saved state ------------------------------------------------------

    void saveIfPerMicroBatch(const Graph& g, OpCost& cost, TensorId id)
    {
        if (isPerMicroBatch(g, id))
            cost.savedTensors.push_back(id);
    }

    void matmulCost(const OpCostContext& ctx, const Node& node, OpCost& cost)
    {
        const auto& a = ctx.graph.tensor(node.inputs[0]);
        const auto& out = ctx.graph.tensor(node.outputs[0]);
        const double macs = static_cast<double>(numElements(out.shape)) * static_cast<double>(a.shape.back());
        const double bias = node.inputs.size() > 2 ? static_cast<double>(numElements(out.shape)) : 0.0;
        cost.forwardFlops = 2 * macs + bias;
        if (node.inputs.size() > 2 && ctx.requiresGrad[node.inputs[2].index()]) { // bias gradient: a reduction
            cost.backwardFlops += bias;
            cost.weightGradFlops += bias;
        }
        // dA = dY @ B^T needs B; dB = A^T @ dY needs A. Each is one more matmul of the same size.
        if (ctx.requiresGrad[node.inputs[0].index()]) {
            cost.backwardFlops += 2 * macs;
            saveIfPerMicroBatch(ctx.graph, cost, node.inputs[1]);
        }
        if (ctx.requiresGrad[node.inputs[1].index()]) {
            cost.backwardFlops += 2 * macs;
            saveIfPerMicroBatch(ctx.graph, cost, node.inputs[0]);
            // dW = A^T dY: with a parameter as B this is the weight gradient, and A is kept only for it.
            if (ctx.graph.tensor(node.inputs[1]).kind == TensorKind::Parameter) {
                cost.weightGradFlops += 2 * macs;
                if (isPerMicroBatch(ctx.graph, node.inputs[0]))
                    cost.savedForWeightGrad.push_back(node.inputs[0]);
            }
        }
    }

    // A Conv whose one-tap window visits every pixel once (a 1x1 kernel, unit strides, no pads, the
    // image's size out): its column matrix is the image itself, which the CPU kernels read in place.
    bool columnsAreTheImage(const Graph& g, const Node& node)
    {
        if (node.op != OpType::Conv)
            return false;
        const auto& w = g.tensor(node.inputs[1]).shape;
        const auto& in = g.tensor(node.inputs[0]).shape;
        const auto& out = g.tensor(node.outputs[0]).shape;
        const auto pads = node.intsAttr("pads");
        const auto strides = node.intsAttr("strides");
        return in.size() == out.size()
            && std::all_of(
                w.begin() + std::min<std::ptrdiff_t>(2, std::ssize(w)), w.end(), [](auto k) { return k == 1; })
            && std::equal(in.begin() + 2, in.end(), out.begin() + 2)
            && std::all_of(pads.begin(), pads.end(), [](auto p) { return p == 0; })
            && std::all_of(strides.begin(), strides.end(), [](auto s) { return s == 1; });
    }

    // Conv: each output element is a dot product over C_in / groups x kernel taps. ConvTranspose (the
    // Conv whose input gradient it is): each input element meets C_out / groups x kernel taps. The
    // column matrix of one image is those taps by the positions of `perElementOf` (Conv: backward
    // holds it and its gradient; ConvTranspose: one at a time).
    void windowedGemmCost(const OpCostContext& ctx, const Node& node, OpCost& cost, TensorId perElementOf)
    {
        const auto& g = ctx.graph;
        const auto& w =
            g.tensor(node.inputs[1]).shape; // Conv (C_out, C_in/groups, k...), ConvTranspose (C_in, C_out/groups, k...)
        double taps = 1;
        for (std::size_t d = 1; d < w.size(); ++d)
            taps *= static_cast<double>(w[d]);
        const double elements = static_cast<double>(numElements(g.tensor(perElementOf).shape));
        const bool anyGrad = ctx.requiresGrad[node.outputs[0].index()];
        cost.forwardFlops = 2 * elements * taps;
        cost.backwardFlops = anyGrad ? 2 * cost.forwardFlops : 0;
        const auto& perShape = g.tensor(perElementOf).shape;
        const double images = perShape.size() > 1 ? static_cast<double>(perShape[0] * perShape[1]) : 1;
        const double positions = images > 0 ? elements / images : 0; // of one image, per channel
        // The CPU kernels' columns: Conv's backward holds the input's columns for dW and their
        // gradient for dX, each only where needed; ConvTranspose's the output gradient's columns once.
        const auto columns = columnsAreTheImage(g, node) ? 0 : static_cast<std::int64_t>(4 * taps * positions);
        const bool dx = anyGrad && ctx.requiresGrad[node.inputs[0].index()];
        const bool dw = anyGrad && ctx.requiresGrad[node.inputs[1].index()];
        const int backwardColumns = node.op == OpType::Conv ? (dx ? 1 : 0) + (dw ? 1 : 0) : (dx || dw ? 1 : 0);
        cost.fixedWorkspaceBytes = columns * std::max(1, backwardColumns);
        cost.fixedInputGradWorkspaceBytes = dx ? columns : 0;
        cost.fixedWeightGradWorkspaceBytes = dw ? columns : 0;
        cost.weightGradFlops = anyGrad ? cost.forwardFlops : 0;
        if (anyGrad && isPerMicroBatch(g, node.inputs[0])) { // kept for the weight gradient
            cost.savedTensors.push_back(node.inputs[0]);
            cost.savedForWeightGrad.push_back(node.inputs[0]);
        }
    }

    void convCost(const OpCostContext& ctx, const Node& node, OpCost& cost)
    {
        windowedGemmCost(ctx, node, cost, node.outputs[0]);
    }

    void convTransposeCost(const OpCostContext& ctx, const Node& node, OpCost& cost)
    {
        windowedGemmCost(ctx, node, cost, node.inputs[0]);
    }

    void einsumCost(const OpCostContext& ctx, const Node& node, OpCost& cost)
    {
        const auto& g = ctx.graph;
        ShapeInputs in;
        for (auto t : node.inputs)
            in.push_back(&g.tensor(t));
        const auto spec = parseEinsum(std::get<std::string>(node.attrs.at("equation")), in.size());
        double product = 1; // one multiply-add per combination of every letter
        for (const auto& [letter, size] : einsumSizes(spec, in))
            product *= static_cast<double>(size);
        cost.forwardFlops = 2 * product;
        bool trainsWeight = false;
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (!ctx.requiresGrad[node.inputs[i].index()])
                continue;
            cost.backwardFlops += 2 * product; // the gradient of an operand is an einsum of the same size
            if (g.tensor(node.inputs[i]).kind == TensorKind::Parameter) {
                cost.weightGradFlops += 2 * product;
                trainsWeight = true;
            }
            for (std::size_t j = 0; j < node.inputs.size(); ++j) {
                if (j != i)
                    saveIfPerMicroBatch(g, cost, node.inputs[j]);
            }
        }
        if (trainsWeight && isPerMicroBatch(g, node.inputs[0]))
            cost.savedForWeightGrad.push_back(node.inputs[0]);
    }

    std::int64_t rowsOf(const Graph& g, const Node& node)
    {
        const auto& x = g.tensor(node.inputs[0]).shape;
        return x.empty() ? 1 : numElements(x) / x.back();
    }

    void layerNormState(const Graph& g, const Node& node, OpCost& cost)
    {
        cost.savedExtraBytes += 2 * rowsOf(g, node) * 4; // mean, rstd (fp32)
    }

    void rmsNormState(const Graph& g, const Node& node, OpCost& cost)
    {
        cost.savedExtraBytes += rowsOf(g, node) * 4; // rstd
    }

    void batchNormState(const Graph& g, const Node& node, OpCost& cost)
    {
        const auto& x = g.tensor(node.inputs[0]).shape;
        cost.savedExtraBytes += 2 * (x.size() > 1 ? x[1] : 1) * 4; // batch mean, rstd
    }

    // Where each window's maximum was: one int64 per output element (the engine's kernels and
    // PyTorch's max_pool2d_with_indices both keep it for the backward).
    void maxPoolState(const Graph& g, const Node& node, OpCost& cost)
    {
        cost.savedExtraBytes += 8 * numElements(g.tensor(node.outputs[0]).shape);
    }

    void dropoutState(const Graph& g, const Node& node, OpCost& cost)
    {
        cost.savedExtraBytes += numElements(g.tensor(node.inputs[0]).shape); // one-byte keep mask
    }

    void crossEntropyState(const Graph& g, const Node& node, OpCost& cost)
    {
        cost.savedExtraBytes += numBytes(g.tensor(node.inputs[0]).shape, DType::F32); // softmax probabilities
        cost.savedTensors.push_back(node.inputs[1]); // labels
    }

    void embeddingState(const Graph&, const Node& node, OpCost& cost)
    {
        cost.savedTensors.push_back(node.inputs[0]); // indices
        cost.savedForWeightGrad.push_back(node.inputs[0]); // the table's gradient scatters by them
    }

    void topKState(const Graph& g, const Node& node, OpCost& cost)
    {
        if (node.outputs.size() > 1) // where the values came from
            cost.savedExtraBytes += numBytes(g.tensor(node.outputs[1]).shape, DType::I64);
    }

    void reduceMaxState(const Graph& g, const Node& node, OpCost& cost)
    {
        cost.savedExtraBytes += numBytes(g.tensor(node.outputs[0]).shape, DType::I64); // where each maximum was
    }

    constexpr double kNormWeightShare = 2.0 / 14.0; // gamma/beta reductions: 2 of ~14 FLOPs per element

    // A normalization: its backward reads x (kept until the scale's gradient) and its statistics.
    OpDef normalization(OpDef d, double forwardFlops, double backwardFlops, SavedRule saved)
    {
        d.forwardFlops = forwardFlops;
        d.backwardFlops = backwardFlops;
        d.savedInputs = saveInput(0);
        d.weightGradReadsInput = true;
        d.saved = saved;
        d.weightGradShare = kNormWeightShare;
        return d;
    }

    // ---- the table --------------------------------------------------------------------------

    OpDef unary(OpType type, std::string_view name, std::string_view signature, double fwd, double bwd,
        std::uint8_t saved, bool output = false)
    {
        OpDef d { type, name, signature };
        d.shapes = sameShape;
        d.forwardFlops = fwd;
        d.backwardFlops = bwd;
        d.savedInputs = saved;
        d.savesOutput = output;
        return d;
    }

    OpDef binary(OpType type, std::string_view name, std::string_view signature, double fwd, double bwd,
        std::uint8_t saved = kSaveNoInputs)
    {
        OpDef d { type, name, signature, 2, 2, broadcastAll };
        d.forwardFlops = fwd;
        d.backwardFlops = bwd;
        d.savedInputs = saved;
        return d;
    }

    // One FLOP per element of `basis` forward and one backward (a copy, a reduction, a pool).
    OpDef onePass(OpDef d, CostBasis basis = CostBasis::Output)
    {
        d.forwardFlops = 1;
        d.backwardFlops = 1;
        d.basis = basis;
        return d;
    }

    std::vector<OpDef> buildTable()
    {
        std::vector<OpDef> t;
        const auto add = [&t](OpDef d) { t.push_back(d); };
        // Transformer ops (the zoo's graphs).
        {
            OpDef d { OpType::Embedding, "Embedding", "(ids (...), table (V, C)) -> (..., C)", 2, 2, embeddingShape };
            d.backwardFlops = 1; // scatter-add into the table gradient
            d.saved = embeddingState;
            d.weightGradShare = 1.0;
            add(d);
        }
        {
            OpDef d { OpType::MatMul, "MatMul", "(a (..., M, K), b (..., K, N)[, bias (N)]) -> (..., M, N); trans_b", 2,
                3, matmulShape };
            d.cost = matmulCost;
            add(d);
        }
        {
            auto d = onePass({ OpType::BiasAdd, "BiasAdd", "(x (..., N), bias (N)) -> x", 2, 2, biasAddShape });
            d.weightGradShare = 1.0;
            add(d);
        }
        add(binary(OpType::Add, "Add", "a + b, broadcasting", 1, 1));
        add(binary(OpType::Mul, "Mul", "a * b, broadcasting", 1, 2, kSaveAllInputs));
        add(unary(OpType::Scale, "Scale", "x * scale", 1, 1, kSaveNoInputs));
        add(normalization({ OpType::LayerNorm, "LayerNorm",
                              "(x, gamma (C)[, beta (C)]) -> x over the last dim; epsilon", 2, 3, normShape },
            8, 14, layerNormState));
        add(normalization(
            { OpType::RMSNorm, "RMSNorm", "(x, gamma (C)) -> x over the last dim; epsilon", 2, 2, normShape }, 5, 10,
            rmsNormState));
        {
            auto d = unary(OpType::Softmax, "Softmax", "softmax over the last dim", 5, 4, kSaveNoInputs, true);
            d.outputWorkspace = true;
            add(d);
        }
        add(unary(OpType::Gelu, "Gelu", "GELU (erf form)", 8, 13, kSaveAllInputs));
        add(unary(OpType::Relu, "Relu", "max(x, 0)", 1, 1, kSaveNoInputs, true));
        add(unary(OpType::Tanh, "Tanh", "tanh x", 4, 3, kSaveNoInputs, true));
        {
            auto d = unary(OpType::Dropout, "Dropout", "x * mask / (1 - p); p", 2, 1, kSaveNoInputs);
            d.saved = dropoutState;
            add(d);
        }
        {
            auto d = onePass({ OpType::Mask, "Mask", "scores with a causal mask (causal) and/or a (B, T) padding mask",
                1, 2, maskShape });
            d.savedInputs = 0b10; // the padding mask: the masked scores get no gradient
            add(d);
        }
        {
            OpDef d { OpType::Reshape, "Reshape", "x viewed as shape (one -1 allowed)", 1, 1, reshapeShape, true };
            add(d);
        }
        add({ OpType::Transpose, "Transpose", "x permuted by perm", 1, 1, transposeShape });
        add({ OpType::Split, "Split", "x -> parts of sizes along axis", 1, 1, splitShapes, true });
        add({ OpType::Slice, "Slice", "x[start:end] along axis", 1, 1, sliceShape, true });
        add({ OpType::Concat, "Concat", "inputs joined along axis", 1, 255, concatShape });
        {
            OpDef d { OpType::CrossEntropy, "CrossEntropy", "(logits (..., V), labels (...)) -> mean loss", 2, 2,
                crossEntropyShape };
            d.forwardFlops = 5;
            d.backwardFlops = 3;
            d.basis = CostBasis::Input;
            d.saved = crossEntropyState;
            d.outputWorkspace = true;
            add(d);
        }
        // Ops of traced models (ONNX decompositions and convolutional networks).
        add(binary(OpType::Sub, "Sub", "a - b, broadcasting", 1, 2));
        add(binary(OpType::Div, "Div", "a / b, broadcasting", 1, 3, kSaveAllInputs));
        add(unary(OpType::Pow, "Pow", "x ^ exponent", 2, 3, saveInput(0)));
        add(unary(OpType::Sqrt, "Sqrt", "sqrt x", 1, 2, kSaveNoInputs, true));
        add(unary(OpType::Reciprocal, "Reciprocal", "1 / x", 1, 2, kSaveNoInputs, true));
        add(unary(OpType::Erf, "Erf", "erf x", 8, 4, saveInput(0)));
        add(unary(OpType::Sin, "Sin", "sin x", 8, 9, saveInput(0)));
        add(unary(OpType::Cos, "Cos", "cos x", 8, 9, saveInput(0)));
        add(onePass({ OpType::ReduceMean, "ReduceMean", "mean over axes (empty: all); keepdims", 1, 1, reduceShape },
            CostBasis::Input));
        add({ OpType::Select, "Select", "x[..., index, ...] on axis; the axis is removed", 1, 1, selectShape });
        {
            OpDef d { OpType::Expand, "Expand", "x broadcast to shape", 1, 1, expandShape };
            d.backwardFlops = 1; // sums the broadcast copies
            add(d);
        }
        {
            OpDef d { OpType::Conv, "Conv",
                "(x (N, C, [D,] H, W), w (F, C / group, [kD,] kH, kW)[, bias (F)]); strides, pads, dilations, group", 2,
                3, convShape };
            d.cost = convCost;
            add(d);
        }
        add(normalization({ OpType::BatchNorm, "BatchNorm",
                              "(x (N, C, ...), gamma, beta, running mean, running var (C)); epsilon, momentum", 5, 5,
                              batchNormShape },
            8, 14, batchNormState));
        {
            auto d = onePass({ OpType::MaxPool, "MaxPool",
                                 "(N, C, [D,] H, W); kernel, strides, pads, dilations, ceil_mode", 1, 1, poolShape },
                CostBasis::Input);
            d.savedInputs = saveInput(0);
            d.saved = maxPoolState;
            add(d);
        }
        add(onePass(
            { OpType::GlobalAvgPool, "GlobalAvgPool",
                "(N, C, spatial...) -> (N, C, 1, ...): the mean of every plane or volume", 1, 1, globalPoolShape },
            CostBasis::Input));
        // Activations and elementwise math of traced models.
        add(unary(OpType::Sigmoid, "Sigmoid", "1 / (1 + exp(-x))", 4, 3, kSaveNoInputs, true));
        add(unary(
            OpType::HardSigmoid, "HardSigmoid", "max(0, min(1, alpha x + beta)); alpha, beta", 3, 1, saveInput(0)));
        add(unary(OpType::HardSwish, "HardSwish", "x * max(0, min(1, x / 6 + 1 / 2))", 4, 3, saveInput(0)));
        add(unary(OpType::LeakyRelu, "LeakyRelu", "x < 0 ? alpha x : x; alpha", 1, 1, saveInput(0)));
        add(unary(OpType::Clip, "Clip", "min(max(x, min), max); an absent bound is open", 2, 1, saveInput(0)));
        add(unary(OpType::Exp, "Exp", "exp x", 4, 1, kSaveNoInputs, true));
        add(unary(OpType::Log, "Log", "ln x", 4, 1, saveInput(0)));
        add(unary(OpType::Neg, "Neg", "-x", 1, 1, kSaveNoInputs));
        add(unary(OpType::Abs, "Abs", "|x|", 1, 1, saveInput(0)));
        add(binary(OpType::Max, "Max", "max(a, b), broadcasting", 1, 2, kSaveAllInputs));
        add(binary(OpType::Min, "Min", "min(a, b), broadcasting", 1, 2, kSaveAllInputs));
        {
            OpDef d { OpType::Where, "Where", "(condition, a, b) -> condition ? a : b, broadcasting", 3, 3,
                broadcastAll };
            d.forwardFlops = 1;
            d.backwardFlops = 2;
            d.savedInputs = saveInput(0);
            add(d);
        }
        // Comparisons and logic: Bool outputs, no gradient.
        add(binary(OpType::Equal, "Equal", "a == b -> bool", 1, 0));
        add(binary(OpType::Less, "Less", "a < b -> bool", 1, 0));
        add(binary(OpType::LessOrEqual, "LessOrEqual", "a <= b -> bool", 1, 0));
        add(binary(OpType::Greater, "Greater", "a > b -> bool", 1, 0));
        add(binary(OpType::GreaterOrEqual, "GreaterOrEqual", "a >= b -> bool", 1, 0));
        add(unary(OpType::Not, "Not", "!x (bool)", 1, 0, kSaveNoInputs));
        add(unary(OpType::IsNaN, "IsNaN", "x is NaN -> bool", 1, 0, kSaveNoInputs));
        add(binary(OpType::And, "And", "a && b (bool)", 1, 0));
        add(binary(OpType::Or, "Or", "a || b (bool)", 1, 0));
        add(onePass({ OpType::Cast, "Cast", "x converted to the element type to", 1, 1, castShape }));
        add(onePass({ OpType::ReduceSum, "ReduceSum", "sum over axes (empty: all); keepdims", 1, 1, reduceShape },
            CostBasis::Input));
        {
            auto d =
                onePass({ OpType::ReduceMax, "ReduceMax", "max over axes (empty: all); keepdims", 1, 1, reduceShape },
                    CostBasis::Input);
            d.saved = reduceMaxState;
            add(d);
        }
        add(onePass({ OpType::CumSum, "CumSum", "running sum along axis; exclusive, reverse", 1, 1, cumSumShape }));
        add(onePass(
            { OpType::Trilu, "Trilu", "lower (upper 0) or upper triangle of the last two dims; k", 1, 1, triluShape }));
        // Pools, padding, resampling and indexing.
        add(onePass({ OpType::AvgPool, "AvgPool",
                        "(N, C, [D,] H, W); kernel, strides, pads, ceil_mode, count_include_pad", 1, 1, poolShape },
            CostBasis::Input));
        {
            OpDef d { OpType::Pad, "Pad", "x padded by pads (begins, then ends); mode, value", 1, 1, padShape };
            d.backwardFlops = 1;
            add(d);
        }
        {
            OpDef d { OpType::Resize, "Resize",
                "(N, C, H, W) -> (N, C, sizes); mode, coordinate_transformation_mode, nearest_mode", 1, 1,
                resizeShape };
            d.forwardFlops = 4; // bilinear: four taps per output element
            d.backwardFlops = 4;
            add(d);
        }
        {
            OpDef d { OpType::Gather, "Gather", "(data, indices) -> data[..., indices, ...] along axis", 2, 2,
                gatherShape };
            d.backwardFlops = 1; // scatter-add
            d.savedInputs = saveInput(1);
            add(d);
        }
        {
            auto d = onePass({ OpType::ScatterND, "ScatterND",
                "(data, indices (..., k), updates) -> data with updates written", 3, 3, scatterNdShape });
            d.savedInputs = saveInput(1);
            add(d);
        }
        {
            OpDef d { OpType::GatherElements, "GatherElements",
                "(data, indices of data's rank) -> data[..., indices, ...] element-wise along axis", 2, 2,
                gatherElementsShape };
            d.backwardFlops = 1; // scatter-add
            d.savedInputs = saveInput(1);
            add(d);
        }
        {
            OpDef d { OpType::GatherND, "GatherND", "(data, indices (..., r)) -> slices data[indices]; batch_dims", 2,
                2, gatherNdShape };
            d.backwardFlops = 1;
            d.savedInputs = saveInput(1);
            add(d);
        }
        {
            OpDef d { OpType::TopK, "TopK", "x -> (values, indices) of the k largest along axis; k, largest", 1, 1,
                topKShape };
            d.forwardFlops = 2;
            d.backwardFlops = 1;
            d.basis = CostBasis::Input;
            d.saved = topKState;
            add(d);
        }
        {
            OpDef d { OpType::Einsum, "Einsum", "one or two operands contracted by equation", 1, 2, einsumShape };
            d.cost = einsumCost;
            add(d);
        }
        {
            OpDef d { OpType::ConvTranspose, "ConvTranspose",
                "(x (N, C, [D,] H, W), w (C, F / group, [kD,] kH, kW)[, bias (F)]); strides, pads, "
                "dilations, group, "
                "output_padding",
                2, 3, convTransposeShape };
            d.cost = convTransposeCost;
            add(d);
        }
        {
            auto d = onePass({ OpType::ScatterElements, "ScatterElements",
                                 "(data, indices, updates) -> data with updates written (or added) at indices on axis; "
                                 "axis, add",
                                 3, 3, scatterElementsShape },
                CostBasis::Input);
            d.savedInputs = saveInput(1);
            add(d);
        }
        {
            OpDef d { OpType::Attention, "Attention",
                "(q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv)[, padding (B, Tk)]) -> (..., Tq, Dv); "
                "scale, causal, "
                "dropout",
                3, 4, attentionShape };
            d.cost = attentionCost;
            add(d);
        }
        add(normalization(
            { OpType::GroupNorm, "GroupNorm",
                "(x (N, C, ...)[, gamma (C)[, beta (C)]]) -> x over each channel group with every position; groups, "
                "epsilon",
                1, 3, groupNormShape },
            8, 14, groupNormState));
        {
            OpDef d { OpType::Opaque, "Opaque", "an imported op without a mapping; costed from its shapes", 0, 255 };
            d.forwardFlops = 1;
            d.backwardFlops = 2;
            d.savedInputs = kSaveAllInputs;
            add(d);
        }
        std::sort(t.begin(), t.end(), [](const OpDef& a, const OpDef& b) { return a.type < b.type; });
        for (std::size_t i = 0; i < t.size(); ++i) {
            if (static_cast<std::size_t>(t[i].type) != i)
                throw Error("op registry: OpType #" + std::to_string(i) + " has no entry or two");
        }
        return t;
    }

    const std::vector<OpDef>& table()
    {
        static const std::vector<OpDef> kTable = buildTable();
        return kTable;
    }

} // namespace

const OpDef& opDef(OpType op)
{
    const auto& t = table();
    const auto i = static_cast<std::size_t>(op);
    if (i >= t.size())
        throw Error("op registry: no entry for OpType #" + std::to_string(i));
    return t[i];
}

std::span<const OpDef> opDefs()
{
    return table();
}
} // namespace ps
