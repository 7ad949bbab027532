// Internal to the ONNX importer: ONNX node -> IR op, one rule per ONNX op type, with constant
// operands turned into attributes (the convolutional rules: op_mapping_conv.cpp; the helpers they
// share: op_mapping_support.h).
#include "onnx/op_mapping.h"

#include "graph/op_registry.h"
#include "onnx/op_mapping_support.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>

namespace ps::onnximport {
namespace {

    using namespace mapping;
    // ---- arithmetic and activations ---------------------------------------------------------

    Node matmul(const onnx::NodeProto&, Node n, const MappingContext&)
    {
        return n.inputs.size() == 2 ? as(std::move(n), OpType::MatMul) : n;
    }

    Node gemm(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (intAttr(node, "transA", 0) != 0 || floatAttr(node, "alpha", 1) != 1 || floatAttr(node, "beta", 1) != 1)
            return n;
        if (intAttr(node, "transB", 0) != 0)
            n.attrs["trans_b"] = std::int64_t { 1 };
        return as(std::move(n), OpType::MatMul);
    }

    Node binaryOp(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        if (n.inputs.size() != 2)
            return n;
        const auto& op = node.op_type();
        // x * c and x / c (attention's 1/sqrt(d), GELU's 1/sqrt 2 and 0.5) scale by a constant.
        if (op == "Mul" || op == "Div") {
            if (const auto c = scalarConstant(n.inputs[1], ctx); c && *c != 0) {
                n.attrs["scale"] = op == "Mul" ? *c : 1.0 / *c;
                n.inputs.resize(1);
                return as(std::move(n), OpType::Scale);
            }
        }
        if (op == "Add" && rankOf(n, 1, ctx) == 1 && ctx.graph.tensor(n.inputs[1]).kind == TensorKind::Parameter)
            return as(std::move(n), OpType::BiasAdd);
        const OpType type = op == "Add" ? OpType::Add
            : op == "Mul"               ? OpType::Mul
            : op == "Sub"               ? OpType::Sub
            : op == "Div"               ? OpType::Div
            : op == "Max"               ? OpType::Max
            : op == "Min"               ? OpType::Min
            : op == "Equal"             ? OpType::Equal
            : op == "Less"              ? OpType::Less
            : op == "LessOrEqual"       ? OpType::LessOrEqual
            : op == "Greater"           ? OpType::Greater
            : op == "GreaterOrEqual"    ? OpType::GreaterOrEqual
            : op == "And"               ? OpType::And
                                        : OpType::Or;
        return as(std::move(n), type);
    }

    Node pow(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto exponent = scalarInput(node, 1, ctx);
        if (!exponent)
            return n;
        n.attrs["exponent"] = *exponent;
        n.inputs.resize(1);
        return as(std::move(n), OpType::Pow);
    }

    Node unaryOp(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        static const std::unordered_map<std::string, OpType> kUnary {
            { "Sqrt", OpType::Sqrt },
            { "Erf", OpType::Erf },
            { "Relu", OpType::Relu },
            { "Tanh", OpType::Tanh },
            { "Sigmoid", OpType::Sigmoid },
            { "HardSwish", OpType::HardSwish },
            { "Exp", OpType::Exp },
            { "Log", OpType::Log },
            { "Neg", OpType::Neg },
            { "Abs", OpType::Abs },
            { "Not", OpType::Not },
            { "Reciprocal", OpType::Reciprocal },
            { "Sin", OpType::Sin },
            { "Cos", OpType::Cos },
            { "IsNaN", OpType::IsNaN },
        };
        if (n.inputs.size() != 1)
            return n;
        return as(std::move(n), kUnary.at(node.op_type()));
    }

    // Gelu (opset 20): exact, or the tanh approximation, as the IR's Gelu reads "approximate".
    Node gelu(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (n.inputs.size() != 1)
            return n;
        for (const auto& a : node.attribute()) {
            if (a.name() == "approximate" && a.s() == "tanh")
                n.attrs["approximate"] = std::string("tanh");
        }
        return as(std::move(n), OpType::Gelu);
    }

    Node hardSigmoid(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        n.attrs["alpha"] = static_cast<double>(floatAttr(node, "alpha", 0.2F));
        n.attrs["beta"] = static_cast<double>(floatAttr(node, "beta", 0.5F));
        return as(std::move(n), OpType::HardSigmoid);
    }

    Node leakyRelu(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        n.attrs["alpha"] = static_cast<double>(floatAttr(node, "alpha", 0.01F));
        return as(std::move(n), OpType::LeakyRelu);
    }

    // Clip's bounds are optional scalar inputs (opset 11+); torch's Relu6 is Clip(x, 0, 6).
    Node clip(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        for (int i : { 1, 2 }) {
            if (!present(node, i))
                continue;
            const auto bound = scalarInput(node, i, ctx);
            if (!bound)
                return n; // a bound computed at run time
            n.attrs[i == 1 ? "min" : "max"] = *bound;
        }
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Clip);
    }

    Node where(const onnx::NodeProto&, Node n, const MappingContext&)
    {
        return n.inputs.size() == 3 ? as(std::move(n), OpType::Where) : n;
    }

    Node cast(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        using T = onnx::TensorProto;
        static const std::unordered_map<std::int64_t, DType> kTypes { { T::FLOAT, DType::F32 },
            { T::FLOAT16, DType::F16 }, { T::BFLOAT16, DType::BF16 }, { T::DOUBLE, DType::F64 },
            { T::INT64, DType::I64 }, { T::INT32, DType::I32 }, { T::INT8, DType::I8 }, { T::UINT8, DType::U8 },
            { T::BOOL, DType::Bool } };
        const auto it = kTypes.find(intAttr(node, "to", 0));
        if (it == kTypes.end())
            return n;
        n.attrs["to"] = std::string(toString(it->second));
        return as(std::move(n), OpType::Cast);
    }

    // ReduceMean/ReduceMax take axes as an attribute below opset 18, ReduceSum as input 1 from 13.
    Node reduce(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        auto axes = intsAttr(node, "axes");
        if (present(node, 1)) {
            const auto folded = foldedInput(node, 1, ctx);
            if (!folded)
                return n;
            axes = *folded;
        }
        if (axes.empty() && intAttr(node, "noop_with_empty_axes", 0) != 0)
            return n;
        n.attrs["axes"] = axes;
        n.attrs["keepdims"] = intAttr(node, "keepdims", 1);
        n.inputs = inputsAt(node, ctx, { 0 });
        const auto& op = node.op_type();
        return as(std::move(n),
            op == "ReduceMean"      ? OpType::ReduceMean
                : op == "ReduceSum" ? OpType::ReduceSum
                                    : OpType::ReduceMax);
    }

    Node softmax(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto axis = intAttr(node, "axis", -1);
        if (n.inputs.size() != 1 || (axis != -1 && axis != static_cast<std::int64_t>(rankOf(n, 0, ctx)) - 1))
            return n;
        return as(std::move(n), OpType::Softmax);
    }

    Node layerNorm(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto axis = intAttr(node, "axis", -1);
        if (axis != -1 && axis != static_cast<std::int64_t>(rankOf(n, 0, ctx)) - 1)
            return n;
        n.attrs["epsilon"] = static_cast<double>(floatAttr(node, "epsilon", 1e-5F));
        return as(std::move(n), OpType::LayerNorm);
    }

    Node dropout(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        if (n.outputs.size() != 1)
            return n; // the mask output is read
        n.attrs["p"] = scalarInput(node, 1, ctx).value_or(0.5);
        n.inputs = inputsAt(node, ctx, { 0 }); // ratio and training_mode are constants
        return as(std::move(n), OpType::Dropout);
    }

    Node cumSum(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto axis = foldedInput(node, 1, ctx);
        if (!axis || axis->size() != 1)
            return n;
        n.attrs["axis"] = axis->front();
        n.attrs["exclusive"] = intAttr(node, "exclusive", 0);
        n.attrs["reverse"] = intAttr(node, "reverse", 0);
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::CumSum);
    }

    Node trilu(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        std::int64_t k = 0;
        if (present(node, 1)) {
            const auto folded = foldedInput(node, 1, ctx);
            if (!folded || folded->size() != 1)
                return n;
            k = folded->front();
        }
        n.attrs["upper"] = intAttr(node, "upper", 1);
        n.attrs["k"] = k;
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Trilu);
    }

    // An ellipsis and broadcast dims are written out in letters (the operands' shapes are known here).
    Node einsum(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        std::vector<Shape> shapes;
        for (const auto id : n.inputs)
            shapes.push_back(ctx.graph.tensor(id).shape);
        try {
            n.attrs["equation"] = explicitEinsumEquation(stringAttr(node, "equation", ""), shapes);
        } catch (const Error&) {
            return n;
        }
        return as(std::move(n), OpType::Einsum);
    }

    // ---- layout -------------------------------------------------------------------------------

    // Shape-like ops whose target comes from a folded input: the IR carries the ONNX-inferred
    // output shape as an attribute, and the constant inputs are dropped.
    Node reshape(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto* out = inferredOutput(node, ctx);
        if (out == nullptr)
            throw Error("ONNX node '" + node.name() + "' (" + node.op_type()
                + "): no shape was inferred for its output '" + node.output(0) + "'");
        n.attrs["shape"] = *out;
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Reshape);
    }

    Node expand(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto shape = foldedInput(node, 1, ctx);
        if (!shape)
            return n;
        n.attrs["shape"] = *shape;
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Expand);
    }

    // One axis with step 1 is a Slice (a view); another step (x[:, ::2], a flip) gathers the
    // positions it selects.
    Node slice(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto starts = foldedInput(node, 1, ctx);
        const auto ends = foldedInput(node, 2, ctx);
        const auto axes = foldedInput(node, 3, ctx);
        const auto steps = foldedInput(node, 4, ctx);
        if (!starts || !ends || starts->size() != 1 || ends->size() != 1 || (present(node, 3) && !axes)
            || (present(node, 4) && (!steps || steps->size() != 1 || steps->at(0) == 0)))
            return n;
        const auto& in = ctx.graph.tensor(n.inputs[0]).shape;
        const auto axis = normalizedAxis(axes ? axes->at(0) : 0, in.size());
        if (!axis)
            return n;
        const auto size = in[static_cast<std::size_t>(*axis)];
        const auto step = steps ? steps->at(0) : 1;
        if (step != 1) {
            // ONNX Slice: clamp to [0, size] for positive steps, [-1, size - 1] for negative ones.
            const auto lo = step > 0 ? std::int64_t { 0 } : std::int64_t { -1 };
            const auto hi = step > 0 ? size : size - 1;
            const auto bound = [&](std::int64_t i) { return std::clamp(i < 0 ? i + size : i, lo, hi); };
            std::vector<std::int64_t> picked;
            for (auto i = bound(starts->at(0)); step > 0 ? i < bound(ends->at(0)) : i > bound(ends->at(0)); i += step)
                picked.push_back(i);
            if (picked.empty() || !ctx.addIndices)
                return n;
            n.inputs = { ctx.tensors.at(node.input(0)), ctx.addIndices(node.output(0) + ".indices", picked) };
            n.attrs["axis"] = *axis;
            return as(std::move(n), OpType::Gather);
        }
        const auto clampIndex = [size](std::int64_t i) {
            return std::clamp(i < 0 ? i + size : i, std::int64_t { 0 }, size);
        };
        n.attrs["axis"] = *axis;
        n.attrs["start"] = clampIndex(starts->at(0));
        n.attrs["end"] = clampIndex(ends->at(0));
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Slice);
    }

    Node split(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        std::vector<std::int64_t> sizes = intsAttr(node, "split");
        if (present(node, 1)) {
            const auto folded = foldedInput(node, 1, ctx);
            if (!folded)
                return n;
            sizes = *folded;
        }
        const auto& in = ctx.graph.tensor(n.inputs[0]).shape;
        if (sizes.empty()) { // equal parts
            const auto axis = normalizedAxis(intAttr(node, "axis", 0), in.size());
            const auto parts = static_cast<std::int64_t>(node.output_size());
            if (!axis || in[static_cast<std::size_t>(*axis)] % parts != 0)
                return n;
            sizes.assign(static_cast<std::size_t>(parts), in[static_cast<std::size_t>(*axis)] / parts);
        }
        n.attrs["axis"] = intAttr(node, "axis", 0);
        n.attrs["sizes"] = sizes;
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Split);
    }

    Node concat(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        n.attrs["axis"] = intAttr(node, "axis", 0);
        return as(std::move(n), OpType::Concat);
    }

    Node transpose(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        auto perm = intsAttr(node, "perm");
        if (perm.empty()) { // default: reverse the axes
            for (auto i = static_cast<std::int64_t>(rankOf(n, 0, ctx)); i-- > 0;)
                perm.push_back(i);
        }
        n.attrs["perm"] = perm;
        return as(std::move(n), OpType::Transpose);
    }

    // A parameter table read by indices is an embedding; one constant index is a Select (a class
    // token); anything else a Gather.
    Node gather(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        if (n.inputs.size() != 2)
            return n;
        const auto& data = ctx.graph.tensor(n.inputs[0]);
        const auto index = foldedInput(node, 1, ctx);
        const auto axis = normalizedAxis(intAttr(node, "axis", 0), data.shape.size());
        if (!axis)
            return n;
        if (data.kind == TensorKind::Parameter && data.shape.size() == 2 && *axis == 0 && !index) {
            std::swap(n.inputs[0], n.inputs[1]); // (ids, table)
            return as(std::move(n), OpType::Embedding);
        }
        const auto size = data.shape[static_cast<std::size_t>(*axis)];
        if (index && index->size() == 1 && ctx.graph.tensor(n.inputs[1]).shape.empty()) {
            n.attrs["axis"] = *axis;
            n.attrs["index"] = index->at(0) < 0 ? index->at(0) + size : index->at(0);
            n.inputs.resize(1);
            return as(std::move(n), OpType::Select);
        }
        n.attrs["axis"] = *axis;
        return as(std::move(n), OpType::Gather);
    }

    const std::unordered_map<std::string, Rule>& rules()
    {
        static const std::unordered_map<std::string, Rule> kRules {
            { "MatMul", matmul },
            { "Gemm", gemm },
            { "Add", binaryOp },
            { "Sub", binaryOp },
            { "Mul", binaryOp },
            { "Div", binaryOp },
            { "Max", binaryOp },
            { "Min", binaryOp },
            { "Equal", binaryOp },
            { "Less", binaryOp },
            { "LessOrEqual", binaryOp },
            { "Greater", binaryOp },
            { "GreaterOrEqual", binaryOp },
            { "And", binaryOp },
            { "Or", binaryOp },
            { "Pow", pow },
            { "Sqrt", unaryOp },
            { "Erf", unaryOp },
            { "Reciprocal", unaryOp },
            { "Sin", unaryOp },
            { "Cos", unaryOp },
            { "IsNaN", unaryOp },
            { "Gelu", gelu },
            { "Relu", unaryOp },
            { "Tanh", unaryOp },
            { "Sigmoid", unaryOp },
            { "HardSwish", unaryOp },
            { "Exp", unaryOp },
            { "Log", unaryOp },
            { "Neg", unaryOp },
            { "Abs", unaryOp },
            { "Not", unaryOp },
            { "HardSigmoid", hardSigmoid },
            { "LeakyRelu", leakyRelu },
            { "Clip", clip },
            { "Where", where },
            { "Cast", cast },
            { "ReduceMean", reduce },
            { "ReduceSum", reduce },
            { "ReduceMax", reduce },
            { "Softmax", softmax },
            { "LayerNormalization", layerNorm },
            { "Dropout", dropout },
            { "CumSum", cumSum },
            { "Trilu", trilu },
            { "Einsum", einsum },
            { "Conv", conv },
            { "ConvTranspose", convTranspose },
            { "ScatterElements", scatterElements },
            { "MaxPool", pool },
            { "AveragePool", pool },
            { "GlobalAveragePool", globalAvgPool },
            { "BatchNormalization", batchNorm },
            { "Pad", pad },
            { "Resize", resize },
            { "ScatterND", scatterNd },
            { "GatherElements", gatherElements },
            { "GatherND", gatherNd },
            { "TopK", topK },
            { "Reshape", reshape },
            { "Flatten", reshape },
            { "Squeeze", reshape },
            { "Unsqueeze", reshape },
            { "Expand", expand },
            { "Slice", slice },
            { "Split", split },
            { "Concat", concat },
            { "Transpose", transpose },
            { "Gather", gather },
        };
        return kRules;
    }

} // namespace

Node mapNode(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
{
    if (n.inputs.empty() || node.output_size() == 0)
        return n;
    const auto it = rules().find(node.op_type());
    return it == rules().end() ? n : it->second(node, std::move(n), ctx);
}

std::vector<std::string> mappedOnnxOps()
{
    std::vector<std::string> ops;
    for (const auto& [name, rule] : rules())
        ops.push_back(name);
    std::sort(ops.begin(), ops.end());
    return ops;
}

} // namespace ps::onnximport
