// Internal to the ONNX importer: ONNX node -> IR op, with constant operands turned into attributes.
#include "onnx/op_mapping.h"

#include "util/error.h"

#include <algorithm>
#include <cstring>

namespace ps::onnximport {
namespace {

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

    const std::vector<std::int64_t>* foldedInput(const onnx::NodeProto& node, int input, const MappingContext& ctx)
    {
        if (input >= node.input_size())
            return nullptr;
        const auto it = ctx.folded.find(node.input(input));
        return it == ctx.folded.end() ? nullptr : &it->second.values;
    }

    // The value of a one-element constant (a Constant node's scalar or a folded integer).
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
        default:
            return std::nullopt;
        }
    }

    // Shape-like ops whose target comes from a folded input: the IR carries the ONNX-inferred
    // output shape (or bounds) as attributes, and the constant inputs are dropped.
    Node mapLayoutNode(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
    {
        const auto& op = node.op_type();
        if (node.output_size() < 1 || n.inputs.empty())
            throw Error("ONNX node '" + node.name() + "' (" + op + ") needs an input and an output");
        const auto inferred = ctx.shapes.find(node.output(0));
        if (inferred == ctx.shapes.end())
            throw Error("ONNX node '" + node.name() + "' (" + op + "): no shape was inferred for its output '"
                + node.output(0) + "'");
        const auto& outShape = inferred->second.first;
        const auto& inShape = ctx.graph.tensor(n.inputs[0]).shape;
        if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
            if (op == "Reshape" && !foldedInput(node, 1, ctx))
                return n;
            n.op = OpType::Reshape;
            n.attrs["shape"] = outShape;
            n.inputs.resize(1);
        } else if (op == "Expand" && foldedInput(node, 1, ctx)) {
            n.op = OpType::Expand;
            n.attrs["shape"] = *foldedInput(node, 1, ctx);
            n.inputs.resize(1);
        } else if (op == "Slice") {
            const auto* starts = foldedInput(node, 1, ctx);
            const auto* ends = foldedInput(node, 2, ctx);
            const auto* axes = foldedInput(node, 3, ctx);
            const auto* steps = foldedInput(node, 4, ctx);
            if (!starts || !ends || starts->size() != 1 || ends->size() != 1 || (node.input_size() > 3 && !axes)
                || (node.input_size() > 4 && (!steps || steps->at(0) != 1)))
                return n;
            const auto rank = static_cast<std::int64_t>(inShape.size());
            auto axis = axes ? axes->at(0) : 0;
            axis = axis < 0 ? axis + rank : axis;
            if (axis < 0 || axis >= rank)
                return n;
            const auto size = inShape[static_cast<std::size_t>(axis)];
            const auto clampIndex = [size](std::int64_t i) {
                return std::clamp(i < 0 ? i + size : i, std::int64_t { 0 }, size);
            };
            n.op = OpType::Slice;
            n.attrs["axis"] = axis;
            n.attrs["start"] = clampIndex(starts->at(0));
            n.attrs["end"] = clampIndex(ends->at(0));
            n.inputs.resize(1);
        } else if (op == "Split") {
            std::vector<std::int64_t> sizes = intsAttr(node, "split");
            if (const auto* v = foldedInput(node, 1, ctx))
                sizes = *v;
            if (sizes.empty()) { // equal parts
                const auto rank = static_cast<std::int64_t>(inShape.size());
                auto axis = intAttr(node, "axis", 0);
                axis = axis < 0 ? axis + rank : axis;
                const auto parts = static_cast<std::int64_t>(node.output_size());
                if (axis < 0 || axis >= rank || inShape[static_cast<std::size_t>(axis)] % parts != 0)
                    return n;
                sizes.assign(static_cast<std::size_t>(parts), inShape[static_cast<std::size_t>(axis)] / parts);
            }
            n.op = OpType::Split;
            n.attrs["axis"] = intAttr(node, "axis", 0);
            n.attrs["sizes"] = sizes;
            n.inputs.resize(1);
        } else if (op == "Concat") {
            n.op = OpType::Concat;
            n.attrs["axis"] = intAttr(node, "axis", 0);
        } else if (op == "Transpose") {
            n.op = OpType::Transpose;
            n.attrs["perm"] = intsAttr(node, "perm");
        } else if (op == "Gather" && n.inputs.size() == 2) {
            const auto& data = ctx.graph.tensor(n.inputs[0]);
            const auto* index = foldedInput(node, 1, ctx);
            const auto axis = intAttr(node, "axis", 0);
            if (data.kind == TensorKind::Parameter && data.shape.size() == 2 && axis == 0 && !index) {
                n.op = OpType::Embedding; // (ids, table)
                std::swap(n.inputs[0], n.inputs[1]);
            } else if (index && index->size() == 1 && ctx.graph.tensor(n.inputs[1]).shape.empty()) {
                const auto rank = static_cast<std::int64_t>(inShape.size());
                const auto a = axis < 0 ? axis + rank : axis;
                if (a < 0 || a >= rank)
                    return n;
                const auto size = inShape[static_cast<std::size_t>(a)];
                n.op = OpType::Select;
                n.attrs["axis"] = a;
                n.attrs["index"] = index->at(0) < 0 ? index->at(0) + size : index->at(0);
                n.inputs.resize(1);
            }
        }
        return n;
    }

    Node mapConvNode(const onnx::NodeProto& node, Node n)
    {
        const auto& op = node.op_type();
        const auto* autoPad = findAttr(node, "auto_pad");
        if (autoPad != nullptr && autoPad->s() != "NOTSET")
            return n;
        const auto copyInts = [&](const char* from, const char* to) {
            if (auto v = intsAttr(node, from); !v.empty())
                n.attrs[to] = std::move(v);
        };
        if (op == "Conv") {
            n.op = OpType::Conv;
            copyInts("strides", "strides");
            copyInts("pads", "pads");
            copyInts("dilations", "dilations");
            n.attrs["group"] = intAttr(node, "group", 1);
        } else if (op == "MaxPool" && intAttr(node, "ceil_mode", 0) == 0 && n.outputs.size() <= 1) {
            n.op = OpType::MaxPool;
            copyInts("kernel_shape", "kernel");
            copyInts("strides", "strides");
            copyInts("pads", "pads");
            copyInts("dilations", "dilations");
        } else if (op == "GlobalAveragePool") {
            n.op = OpType::GlobalAvgPool;
        } else if (op == "BatchNormalization" && n.inputs.size() == 5) {
            n.op = OpType::BatchNorm;
            n.attrs["epsilon"] = static_cast<double>(floatAttr(node, "epsilon", 1e-5F));
            n.attrs["momentum"] = static_cast<double>(floatAttr(node, "momentum", 0.9F));
        }
        return n;
    }

} // namespace

Node mapNode(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
{
    const auto& op = node.op_type();
    const auto rank = [&](std::size_t input) {
        return input < n.inputs.size() ? ctx.graph.tensor(n.inputs[input]).shape.size() : 0;
    };
    const auto scalarSecond = [&]() -> std::optional<double> {
        return n.inputs.size() == 2 ? scalarConstant(n.inputs[1], ctx) : std::nullopt;
    };
    if (n.inputs.empty() || node.output_size() == 0)
        return n;
    if (op == "MatMul" && n.inputs.size() == 2) {
        n.op = OpType::MatMul;
    } else if (op == "Gemm" && intAttr(node, "transA", 0) == 0 && floatAttr(node, "alpha", 1) == 1
        && floatAttr(node, "beta", 1) == 1) {
        n.op = OpType::MatMul;
        if (intAttr(node, "transB", 0) != 0)
            n.attrs["trans_b"] = std::int64_t { 1 };
    } else if ((op == "Mul" || op == "Div") && scalarSecond() && *scalarSecond() != 0) {
        // x * c and x / c (attention's 1/sqrt(d), GELU's 1/sqrt 2 and 0.5) scale by a constant.
        n.op = OpType::Scale;
        n.attrs["scale"] = op == "Mul" ? *scalarSecond() : 1.0 / *scalarSecond();
        n.inputs.resize(1);
    } else if ((op == "Add" || op == "Mul" || op == "Sub" || op == "Div") && n.inputs.size() == 2) {
        const bool bias = op == "Add" && rank(1) == 1 && ctx.graph.tensor(n.inputs[1]).kind == TensorKind::Parameter;
        n.op = bias       ? OpType::BiasAdd
            : op == "Add" ? OpType::Add
            : op == "Mul" ? OpType::Mul
            : op == "Sub" ? OpType::Sub
                          : OpType::Div;
    } else if (op == "Pow" && scalarSecond()) {
        n.op = OpType::Pow;
        n.attrs["exponent"] = *scalarSecond();
        n.inputs.resize(1);
    } else if (op == "Sqrt" || op == "Erf" || op == "Relu" || op == "Tanh") {
        n.op = op == "Sqrt" ? OpType::Sqrt : op == "Erf" ? OpType::Erf : op == "Relu" ? OpType::Relu : OpType::Tanh;
    } else if (op == "ReduceMean" && n.inputs.size() == 1) {
        n.op = OpType::ReduceMean;
        n.attrs["axes"] = intsAttr(node, "axes");
        n.attrs["keepdims"] = intAttr(node, "keepdims", 1);
    } else if (op == "Softmax"
        && (intAttr(node, "axis", -1) == -1 || intAttr(node, "axis", -1) == static_cast<std::int64_t>(rank(0)) - 1)) {
        n.op = OpType::Softmax;
    } else if (op == "LayerNormalization" && intAttr(node, "axis", -1) == -1) {
        n.op = OpType::LayerNorm;
        n.attrs["epsilon"] = static_cast<double>(floatAttr(node, "epsilon", 1e-5F));
    } else if (op == "Dropout" && n.outputs.size() == 1) {
        n.op = OpType::Dropout;
        n.inputs.resize(1); // ratio and training_mode are constants
    } else if (op == "Conv" || op == "MaxPool" || op == "GlobalAveragePool" || op == "BatchNormalization") {
        return mapConvNode(node, std::move(n));
    } else {
        return mapLayoutNode(node, std::move(n), ctx);
    }
    return n;
}

} // namespace ps::onnximport
