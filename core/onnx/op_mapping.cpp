// Internal to the ONNX importer: ONNX node -> IR op, one rule per ONNX op type, with constant
// operands turned into attributes.
#include "onnx/op_mapping.h"

#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>

namespace ps::onnximport {
namespace {

    using Rule = Node (*)(const onnx::NodeProto& node, Node n, const MappingContext& ctx);

    const onnx::AttributeProto* findAttr(const onnx::NodeProto& node, std::string_view name)
    {
        for (const auto& a : node.attribute()) {
            if (a.name() == name)
                return &a;
        }
        return nullptr;
    }

    std::int64_t intAttr(const onnx::NodeProto& node, std::string_view name, std::int64_t fallback)
    {
        const auto* a = findAttr(node, name);
        return a != nullptr ? a->i() : fallback;
    }

    float floatAttr(const onnx::NodeProto& node, std::string_view name, float fallback)
    {
        const auto* a = findAttr(node, name);
        return a != nullptr ? a->f() : fallback;
    }

    std::vector<std::int64_t> intsAttr(const onnx::NodeProto& node, std::string_view name)
    {
        const auto* a = findAttr(node, name);
        return a != nullptr ? std::vector<std::int64_t>(a->ints().begin(), a->ints().end())
                            : std::vector<std::int64_t> {};
    }

    std::string stringAttr(const onnx::NodeProto& node, std::string_view name, std::string fallback)
    {
        const auto* a = findAttr(node, name);
        return a != nullptr ? a->s() : std::move(fallback);
    }

    bool present(const onnx::NodeProto& node, int input)
    {
        return input < node.input_size() && !node.input(input).empty();
    }

    // The folded integer value of input `input` (a shape, axes, pads, k), if it has one.
    std::optional<std::vector<std::int64_t>> foldedInput(
        const onnx::NodeProto& node, int input, const MappingContext& ctx)
    {
        if (!present(node, input))
            return std::nullopt;
        const auto it = ctx.folded.find(node.input(input));
        if (it == ctx.folded.end())
            return std::nullopt;
        return it->second.ints();
    }

    // The value of a one-element constant tensor (a Constant node's scalar or a folded value).
    std::optional<double> scalarConstant(TensorId id, const MappingContext& ctx)
    {
        const auto& t = ctx.graph.tensor(id);
        if (t.kind != TensorKind::Constant || numElements(t.shape) != 1 || !t.data
            || t.data->size() != static_cast<std::size_t>(bytesPerElement(t.dtype)))
            return std::nullopt;
        const auto* p = t.data->data();
        switch (t.dtype) {
        case DType::F32: {
            float v = 0;
            std::memcpy(&v, p, sizeof v);
            return v;
        }
        case DType::F64: {
            double v = 0;
            std::memcpy(&v, p, sizeof v);
            return v;
        }
        case DType::I64: {
            std::int64_t v = 0;
            std::memcpy(&v, p, sizeof v);
            return static_cast<double>(v);
        }
        case DType::I32: {
            std::int32_t v = 0;
            std::memcpy(&v, p, sizeof v);
            return static_cast<double>(v);
        }
        default:
            return std::nullopt;
        }
    }

    std::optional<double> scalarInput(const onnx::NodeProto& node, int input, const MappingContext& ctx)
    {
        if (!present(node, input))
            return std::nullopt;
        const auto it = ctx.tensors.find(node.input(input));
        return it == ctx.tensors.end() ? std::nullopt : scalarConstant(it->second, ctx);
    }

    // The graph tensors of the ONNX inputs at `positions` (the constant operands dropped).
    std::vector<TensorId> inputsAt(
        const onnx::NodeProto& node, const MappingContext& ctx, std::initializer_list<int> positions)
    {
        std::vector<TensorId> ids;
        for (int p : positions) {
            if (present(node, p))
                ids.push_back(ctx.tensors.at(node.input(p)));
        }
        return ids;
    }

    std::size_t rankOf(const Node& n, std::size_t input, const MappingContext& ctx)
    {
        return input < n.inputs.size() ? ctx.graph.tensor(n.inputs[input]).shape.size() : 0;
    }

    const Shape* inferredOutput(const onnx::NodeProto& node, const MappingContext& ctx)
    {
        const auto it = ctx.shapes.find(node.output(0));
        return it == ctx.shapes.end() ? nullptr : &it->second.first;
    }

    std::optional<std::int64_t> normalizedAxis(std::int64_t axis, std::size_t rank)
    {
        const auto r = static_cast<std::int64_t>(rank);
        const auto a = axis < 0 ? axis + r : axis;
        if (a < 0 || a >= r)
            return std::nullopt;
        return a;
    }

    Node as(Node n, OpType op)
    {
        n.op = op;
        return n;
    }

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

    Node einsum(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        n.attrs["equation"] = stringAttr(node, "equation", "");
        return as(std::move(n), OpType::Einsum);
    }

    // ---- convolutional networks ---------------------------------------------------------------

    void copyInts(const onnx::NodeProto& node, Node& n, const char* from, const char* to)
    {
        if (auto v = intsAttr(node, from); !v.empty())
            n.attrs[to] = std::move(v);
    }

    bool explicitPadding(const onnx::NodeProto& node)
    {
        const auto* autoPad = findAttr(node, "auto_pad");
        return autoPad == nullptr || autoPad->s() == "NOTSET";
    }

    Node conv(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (!explicitPadding(node))
            return n;
        copyInts(node, n, "strides", "strides");
        copyInts(node, n, "pads", "pads");
        copyInts(node, n, "dilations", "dilations");
        n.attrs["group"] = intAttr(node, "group", 1);
        return as(std::move(n), OpType::Conv);
    }

    Node pool(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (!explicitPadding(node) || n.outputs.size() > 1) // MaxPool's indices output is read
            return n;
        copyInts(node, n, "kernel_shape", "kernel");
        copyInts(node, n, "strides", "strides");
        copyInts(node, n, "pads", "pads");
        n.attrs["ceil_mode"] = intAttr(node, "ceil_mode", 0);
        if (node.op_type() == "MaxPool") {
            copyInts(node, n, "dilations", "dilations");
            return as(std::move(n), OpType::MaxPool);
        }
        n.attrs["count_include_pad"] = intAttr(node, "count_include_pad", 0);
        return as(std::move(n), OpType::AvgPool);
    }

    Node globalAvgPool(const onnx::NodeProto&, Node n, const MappingContext&)
    {
        return as(std::move(n), OpType::GlobalAvgPool);
    }

    Node batchNorm(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (n.inputs.size() != 5)
            return n;
        n.attrs["epsilon"] = static_cast<double>(floatAttr(node, "epsilon", 1e-5F));
        n.attrs["momentum"] = static_cast<double>(floatAttr(node, "momentum", 0.9F));
        return as(std::move(n), OpType::BatchNorm);
    }

    // Pad's pads (begins, then ends) and constant value are inputs from opset 11.
    Node pad(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto pads = foldedInput(node, 1, ctx);
        if (!pads || present(node, 3)) // the axes input (opset 18) is not used by torch
            return n;
        const auto mode = stringAttr(node, "mode", "constant");
        if (mode != "constant" && mode != "reflect" && mode != "edge")
            return n;
        n.attrs["pads"] = *pads;
        n.attrs["mode"] = mode;
        n.attrs["value"] = scalarInput(node, 2, ctx).value_or(0.0);
        if (present(node, 2) && !scalarInput(node, 2, ctx))
            return n;
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Pad);
    }

    // Resize to the output size shape inference found (from scales or sizes), over H and W only.
    Node resize(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto* out = inferredOutput(node, ctx);
        const auto& in = ctx.graph.tensor(n.inputs[0]).shape;
        const auto mode = stringAttr(node, "mode", "nearest");
        if (out == nullptr || out->size() != 4 || in.size() != 4 || (*out)[0] != in[0] || (*out)[1] != in[1]
            || (mode != "nearest" && mode != "linear"))
            return n;
        n.attrs["sizes"] = std::vector<std::int64_t> { (*out)[2], (*out)[3] };
        n.attrs["mode"] = mode;
        n.attrs["coordinate_transformation_mode"] = stringAttr(node, "coordinate_transformation_mode", "half_pixel");
        n.attrs["nearest_mode"] = stringAttr(node, "nearest_mode", "round_prefer_floor");
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::Resize);
    }

    Node scatterNd(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (n.inputs.size() != 3 || stringAttr(node, "reduction", "none") != "none")
            return n;
        return as(std::move(n), OpType::ScatterND);
    }

    Node gatherElements(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto axis = normalizedAxis(intAttr(node, "axis", 0), rankOf(n, 0, ctx));
        if (n.inputs.size() != 2 || !axis)
            return n;
        n.attrs["axis"] = *axis;
        return as(std::move(n), OpType::GatherElements);
    }

    Node gatherNd(const onnx::NodeProto& node, Node n, const MappingContext&)
    {
        if (n.inputs.size() != 2)
            return n;
        n.attrs["batch_dims"] = intAttr(node, "batch_dims", 0);
        return as(std::move(n), OpType::GatherND);
    }

    Node topK(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto k = foldedInput(node, 1, ctx);
        if (!k || k->size() != 1)
            return n;
        n.attrs["k"] = k->front();
        n.attrs["axis"] = intAttr(node, "axis", -1);
        n.attrs["largest"] = intAttr(node, "largest", 1);
        n.attrs["sorted"] = intAttr(node, "sorted", 1);
        n.inputs = inputsAt(node, ctx, { 0 });
        return as(std::move(n), OpType::TopK);
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
