// Internal to the ONNX importer: the mapping rules of convolutional networks (Conv, pools,
// BatchNormalization, Pad, Resize) and the scatter/gather/TopK ops, split from op_mapping.cpp.
#include "onnx/op_mapping_support.h"

namespace ps::onnximport::mapping {

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

// Over 2 or 3 spatial axes (1-D ones were lowered to 2-D, core/onnx/window_lowering.h): the
// convolutions' and the pools' inputs.
bool convolutionRank(const Node& n, const MappingContext& ctx)
{
    const auto rank = rankOf(n, 0, ctx);
    return rank == 4 || rank == 5;
}

Node conv(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
{
    if (!explicitPadding(node) || !convolutionRank(n, ctx))
        return n;
    copyInts(node, n, "strides", "strides");
    copyInts(node, n, "pads", "pads");
    copyInts(node, n, "dilations", "dilations");
    n.attrs["group"] = intAttr(node, "group", 1);
    return as(std::move(n), OpType::Conv);
}

// The pads of a ConvTranspose given an output_shape (its spatial sizes) or
// an auto_pad, by ONNX's rule: total = stride (in - 1) + output_padding + (k - 1) dilation + 1 -
// out, the odd one at the end for SAME_UPPER, at the start otherwise; SAME_* wants
// out = in x stride, VALID no pads. Empty where that needs negative padding or a shape is unknown.
std::vector<std::int64_t> transposedPads(const onnx::NodeProto& node, const Node& n, const MappingContext& ctx)
{
    const auto& x = ctx.graph.tensor(n.inputs[0]).shape;
    const auto& w = ctx.graph.tensor(n.inputs[1]).shape;
    if (x.size() < 3 || w.size() != x.size()) // a malformed weight: left to the shape rule's refusal
        return {};
    const auto spatial = x.size() - 2;
    const auto* autoPad = findAttr(node, "auto_pad");
    const std::string mode = autoPad != nullptr ? autoPad->s() : "NOTSET";
    const auto at = [&](const char* name, std::size_t i, std::int64_t fallback) {
        const auto v = intsAttr(node, name);
        return v.size() == spatial ? v[i] : fallback;
    };
    const auto target = intsAttr(node, "output_shape");
    const bool given = target.size() == spatial;
    if (mode == "VALID" && !given)
        return std::vector<std::int64_t>(2 * spatial, 0);
    std::vector<std::int64_t> pads(2 * spatial, 0);
    for (std::size_t i = 0; i < spatial; ++i) {
        const auto stride = at("strides", i, 1);
        const auto out = given ? target[i] : x[i + 2] * stride;
        const auto total =
            stride * (x[i + 2] - 1) + at("output_padding", i, 0) + (w[i + 2] - 1) * at("dilations", i, 1) + 1 - out;
        if (!given && mode != "SAME_UPPER" && mode != "SAME_LOWER")
            return {};
        if (total < 0)
            return {};
        const bool lower = mode != "SAME_UPPER"; // ONNX: the extra pad at the start but for SAME_UPPER
        pads[i] = lower ? total - total / 2 : total / 2;
        pads[i + spatial] = total - pads[i];
    }
    return pads;
}

// ConvTranspose over (N, C, H, W) or (N, C, D, H, W): explicit pads (torch's export), or pads from
// an output_shape or auto_pad (transposedPads).
Node convTranspose(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
{
    if (!convolutionRank(n, ctx) || n.inputs.size() < 2)
        return n;
    if (!explicitPadding(node) || findAttr(node, "output_shape") != nullptr) {
        auto pads = transposedPads(node, n, ctx);
        if (pads.empty())
            return n;
        n.attrs["pads"] = std::move(pads);
    } else {
        copyInts(node, n, "pads", "pads");
    }
    copyInts(node, n, "strides", "strides");
    copyInts(node, n, "dilations", "dilations");
    copyInts(node, n, "output_padding", "output_padding");
    n.attrs["group"] = intAttr(node, "group", 1);
    return as(std::move(n), OpType::ConvTranspose);
}

Node pool(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
{
    // MaxPool's indices output is read; over 2 or 3 spatial axes (1-D ones were lowered to 2-D).
    if (!explicitPadding(node) || n.outputs.size() > 1 || !convolutionRank(n, ctx))
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

// ScatterElements (and opset 11's Scatter) writing or adding; the other reductions (mul, max, min)
// stay opaque.
Node scatterElements(const onnx::NodeProto& node, Node n, const MappingContext& ctx)
{
    const auto axis = normalizedAxis(intAttr(node, "axis", 0), rankOf(n, 0, ctx));
    const auto reduction = stringAttr(node, "reduction", "none");
    if (n.inputs.size() != 3 || !axis || (reduction != "none" && reduction != "add"))
        return n;
    n.attrs["axis"] = *axis;
    n.attrs["add"] = std::int64_t { reduction == "add" ? 1 : 0 };
    return as(std::move(n), OpType::ScatterElements);
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

} // namespace ps::onnximport::mapping
