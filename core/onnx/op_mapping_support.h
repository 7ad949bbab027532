// Internal to the ONNX importer's op mapping (op_mapping.cpp, op_mapping_conv.cpp): attribute and
// constant-operand readers the rules share, and the convolutional rules' entry points.
// Depends on: onnx/op_mapping.h.
#pragma once

#include "onnx/op_mapping.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps::onnximport::mapping {

using Rule = Node (*)(const onnx::NodeProto& node, Node n, const MappingContext& ctx);

inline const onnx::AttributeProto* findAttr(const onnx::NodeProto& node, std::string_view name)
{
    for (const auto& a : node.attribute()) {
        if (a.name() == name)
            return &a;
    }
    return nullptr;
}

inline std::int64_t intAttr(const onnx::NodeProto& node, std::string_view name, std::int64_t fallback)
{
    const auto* a = findAttr(node, name);
    return a != nullptr ? a->i() : fallback;
}

inline float floatAttr(const onnx::NodeProto& node, std::string_view name, float fallback)
{
    const auto* a = findAttr(node, name);
    return a != nullptr ? a->f() : fallback;
}

inline std::vector<std::int64_t> intsAttr(const onnx::NodeProto& node, std::string_view name)
{
    const auto* a = findAttr(node, name);
    return a != nullptr ? std::vector<std::int64_t>(a->ints().begin(), a->ints().end()) : std::vector<std::int64_t> {};
}

inline std::string stringAttr(const onnx::NodeProto& node, std::string_view name, std::string fallback)
{
    const auto* a = findAttr(node, name);
    return a != nullptr ? a->s() : std::move(fallback);
}

inline bool present(const onnx::NodeProto& node, int input)
{
    return input < node.input_size() && !node.input(input).empty();
}

// The folded integer value of input `input` (a shape, axes, pads, k), if it has one.
inline std::optional<std::vector<std::int64_t>> foldedInput(
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
inline std::optional<double> scalarConstant(TensorId id, const MappingContext& ctx)
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

inline std::optional<double> scalarInput(const onnx::NodeProto& node, int input, const MappingContext& ctx)
{
    if (!present(node, input))
        return std::nullopt;
    const auto it = ctx.tensors.find(node.input(input));
    return it == ctx.tensors.end() ? std::nullopt : scalarConstant(it->second, ctx);
}

// The graph tensors of the ONNX inputs at `positions` (the constant operands dropped).
inline std::vector<TensorId> inputsAt(
    const onnx::NodeProto& node, const MappingContext& ctx, std::initializer_list<int> positions)
{
    std::vector<TensorId> ids;
    for (int p : positions) {
        if (present(node, p))
            ids.push_back(ctx.tensors.at(node.input(p)));
    }
    return ids;
}

inline std::size_t rankOf(const Node& n, std::size_t input, const MappingContext& ctx)
{
    return input < n.inputs.size() ? ctx.graph.tensor(n.inputs[input]).shape.size() : 0;
}

inline const Shape* inferredOutput(const onnx::NodeProto& node, const MappingContext& ctx)
{
    const auto it = ctx.shapes.find(node.output(0));
    return it == ctx.shapes.end() ? nullptr : &it->second.first;
}

inline std::optional<std::int64_t> normalizedAxis(std::int64_t axis, std::size_t rank)
{
    const auto r = static_cast<std::int64_t>(rank);
    const auto a = axis < 0 ? axis + r : axis;
    if (a < 0 || a >= r)
        return std::nullopt;
    return a;
}

inline Node as(Node n, OpType op)
{
    n.op = op;
    return n;
}

// The convolutional networks' rules (op_mapping_conv.cpp).
Node conv(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node convTranspose(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node scatterElements(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node pool(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node globalAvgPool(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node batchNorm(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node pad(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node resize(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node scatterNd(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node gatherElements(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node gatherNd(const onnx::NodeProto& node, Node n, const MappingContext& ctx);
Node topK(const onnx::NodeProto& node, Node n, const MappingContext& ctx);

} // namespace ps::onnximport::mapping
