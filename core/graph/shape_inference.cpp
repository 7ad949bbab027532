#include "graph/shape_inference.h"

#include "util/error.h"

#include <algorithm>
#include <numeric>

namespace ps {
namespace {

    using Shapes = std::vector<Shape>;
    using Inputs = std::vector<const Tensor*>;

    void requireInputs(const Node& node, const Inputs& in, std::size_t min, std::size_t max)
    {
        if (in.size() < min || in.size() > max) {
            throw Error(std::string(toString(node.op)) + " expects " + std::to_string(min)
                + (min == max ? "" : "-" + std::to_string(max)) + " inputs, got " + std::to_string(in.size()));
        }
    }

    std::size_t normalizeAxis(std::int64_t axis, std::size_t rank, std::string_view op)
    {
        const auto r = static_cast<std::int64_t>(rank);
        if (axis < -r || axis >= r)
            throw Error(std::string(op) + " axis " + std::to_string(axis) + " is out of range for rank "
                + std::to_string(rank));
        return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
    }

    Shape matmulShape(const Node& node, const Shape& a, Shape b)
    {
        if (a.size() < 2 || b.size() < 2)
            throw Error("MatMul needs inputs of rank >= 2, got " + formatShape(a) + " x " + formatShape(b));
        if (node.intAttr("trans_b", 0) != 0)
            std::swap(b[b.size() - 1], b[b.size() - 2]);
        if (a.back() != b[b.size() - 2])
            throw Error("MatMul inner dimensions differ: " + formatShape(a) + " x " + formatShape(b)
                + (node.intAttr("trans_b", 0) != 0 ? " (b transposed)" : ""));
        const Shape batchA(a.begin(), a.end() - 2);
        const Shape batchB(b.begin(), b.end() - 2);
        Shape out = broadcastShapes(batchA, batchB);
        out.push_back(a[a.size() - 2]);
        out.push_back(b.back());
        return out;
    }

    Shape reshapeShape(const Node& node, const Shape& in)
    {
        Shape out = node.intsAttr("shape");
        const auto total = numElements(in);
        const auto inferred = std::count(out.begin(), out.end(), -1);
        if (inferred > 1)
            throw Error("Reshape target " + formatShape(out) + " has more than one -1");
        std::int64_t known = 1;
        for (auto d : out)
            known *= d == -1 ? 1 : d;
        if (inferred == 1) {
            if (known == 0 || total % known != 0)
                throw Error("Reshape cannot infer -1 in " + formatShape(out) + " from " + formatShape(in));
            *std::find(out.begin(), out.end(), -1) = total / known;
        }
        if (numElements(out) != total)
            throw Error("Reshape from " + formatShape(in) + " to " + formatShape(out) + " changes the element count");
        return out;
    }

    Shape transposeShape(const Node& node, const Shape& in)
    {
        const auto perm = node.intsAttr("perm");
        if (perm.size() != in.size())
            throw Error(
                "Transpose perm has " + std::to_string(perm.size()) + " entries for rank " + std::to_string(in.size()));
        std::vector<bool> seen(in.size(), false);
        Shape out;
        for (auto p : perm) {
            const auto axis = normalizeAxis(p, in.size(), "Transpose");
            if (seen[axis])
                throw Error("Transpose perm repeats axis " + std::to_string(p));
            seen[axis] = true;
            out.push_back(in[axis]);
        }
        return out;
    }

    Shapes splitShapes(const Node& node, const Shape& in)
    {
        const auto axis = normalizeAxis(node.intAttr("axis", -1), in.size(), "Split");
        const auto sizes = node.intsAttr("sizes");
        if (std::accumulate(sizes.begin(), sizes.end(), std::int64_t { 0 }) != in[axis])
            throw Error(
                "Split sizes do not add up to dimension " + std::to_string(in[axis]) + " of " + formatShape(in));
        Shapes out;
        for (auto s : sizes) {
            Shape part = in;
            part[axis] = s;
            out.push_back(part);
        }
        return out;
    }

    Shape sliceShape(const Node& node, const Shape& in)
    {
        const auto axis = normalizeAxis(node.intAttr("axis", 0), in.size(), "Slice");
        const auto start = node.intAttr("start", 0);
        const auto end = std::min(node.intAttr("end", in[axis]), in[axis]);
        if (start < 0 || start >= end)
            throw Error("Slice [" + std::to_string(start) + ", " + std::to_string(end) + ") is empty or negative on "
                + formatShape(in));
        Shape out = in;
        out[axis] = end - start;
        return out;
    }

    Shape concatShape(const Node& node, const Inputs& in)
    {
        Shape out = in.front()->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", 0), out.size(), "Concat");
        for (std::size_t i = 1; i < in.size(); ++i) {
            const auto& s = in[i]->shape;
            bool compatible = s.size() == out.size();
            for (std::size_t d = 0; compatible && d < s.size(); ++d)
                compatible = d == axis || s[d] == out[d];
            if (!compatible)
                throw Error("Concat inputs " + formatShape(out) + " and " + formatShape(s) + " differ off axis "
                    + std::to_string(axis));
            out[axis] += s[axis];
        }
        return out;
    }

    void requireLastDim(const Shape& x, const Tensor& param, std::string_view op)
    {
        if (param.shape.size() != 1 || x.empty() || param.shape[0] != x.back())
            throw Error(std::string(op) + " parameter '" + param.name + "' has shape " + formatShape(param.shape)
                + ", expected (" + (x.empty() ? std::string("?") : std::to_string(x.back())) + ")");
    }

    Shape maskShape(const Inputs& in)
    {
        const Shape& scores = in[0]->shape;
        if (scores.size() < 2)
            throw Error("Mask needs attention scores of rank >= 2, got " + formatShape(scores));
        if (in.size() == 2) {
            const Shape& pad = in[1]->shape; // (B, Tk) padding mask, applied as (B, 1, 1, Tk)
            if (pad.size() != 2 || pad[0] != scores[0] || pad[1] != scores.back())
                throw Error("Mask padding mask " + formatShape(pad) + " does not fit scores " + formatShape(scores));
        }
        return scores;
    }

    Shape crossEntropyShape(const Inputs& in)
    {
        const Shape& logits = in[0]->shape;
        const Shape& labels = in[1]->shape;
        if (logits.empty() || !std::equal(labels.begin(), labels.end(), logits.begin(), logits.end() - 1)
            || labels.size() + 1 != logits.size())
            throw Error("CrossEntropy labels " + formatShape(labels) + " do not match logits " + formatShape(logits));
        return {};
    }

    Shape reduceMeanShape(const Node& node, const Shape& in)
    {
        auto axes = node.intsAttr("axes");
        if (axes.empty()) { // ONNX: all axes
            for (std::size_t i = 0; i < in.size(); ++i)
                axes.push_back(static_cast<std::int64_t>(i));
        }
        std::vector<bool> reduced(in.size(), false);
        for (auto a : axes)
            reduced[normalizeAxis(a, in.size(), "ReduceMean")] = true;
        const bool keep = node.intAttr("keepdims", 1) != 0;
        Shape out;
        for (std::size_t i = 0; i < in.size(); ++i) {
            if (!reduced[i])
                out.push_back(in[i]);
            else if (keep)
                out.push_back(1);
        }
        return out;
    }

    Shape selectShape(const Node& node, const Shape& in)
    {
        const auto axis = normalizeAxis(node.intAttr("axis", 0), in.size(), "Select");
        const auto index = node.intAttr("index", 0);
        if (index < 0 || index >= in[axis])
            throw Error("Select index " + std::to_string(index) + " is out of range for " + formatShape(in));
        Shape out = in;
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(axis));
        return out;
    }

    // Spatial attributes of Conv and MaxPool: two entries (pads four: top, left, bottom, right).
    std::vector<std::int64_t> spatialAttr(const Node& node, std::string_view key, std::size_t count, std::int64_t fill)
    {
        auto v = node.intsAttr(key);
        if (v.empty())
            v.assign(count, fill);
        if (v.size() != count)
            throw Error(std::string(toString(node.op)) + " attribute " + std::string(key) + " needs "
                + std::to_string(count) + " entries, got " + std::to_string(v.size()));
        return v;
    }

    std::int64_t windowOutput(std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t padBefore,
        std::int64_t padAfter, std::int64_t dilation)
    {
        const auto span = dilation * (kernel - 1) + 1;
        const auto padded = size + padBefore + padAfter;
        if (stride < 1 || padded < span)
            throw Error(
                "window of " + std::to_string(span) + " does not fit a padded size of " + std::to_string(padded));
        return (padded - span) / stride + 1;
    }

    Shape windowShape(const Node& node, const Shape& x, const std::vector<std::int64_t>& kernel, std::int64_t channels)
    {
        if (x.size() != 4)
            throw Error(std::string(toString(node.op)) + " needs an (N, C, H, W) input, got " + formatShape(x));
        const auto strides = spatialAttr(node, "strides", 2, 1);
        const auto pads = spatialAttr(node, "pads", 4, 0);
        const auto dilations = spatialAttr(node, "dilations", 2, 1);
        return { x[0], channels, windowOutput(x[2], kernel[0], strides[0], pads[0], pads[2], dilations[0]),
            windowOutput(x[3], kernel[1], strides[1], pads[1], pads[3], dilations[1]) };
    }

    Shape convShape(const Node& node, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        const Shape& w = in[1]->shape;
        const auto group = node.intAttr("group", 1);
        if (w.size() != 4 || x.size() != 4 || group < 1 || x[1] != w[1] * group || w[0] % group != 0)
            throw Error("Conv weight " + formatShape(w) + " does not fit input " + formatShape(x) + " with group "
                + std::to_string(group));
        if (in.size() == 3 && (in[2]->shape.size() != 1 || in[2]->shape[0] != w[0]))
            throw Error(
                "Conv bias " + formatShape(in[2]->shape) + " does not match " + std::to_string(w[0]) + " filters");
        return windowShape(node, x, { w[2], w[3] }, w[0]);
    }

    Shape batchNormShape(const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        if (x.size() < 2)
            throw Error("BatchNorm needs an (N, C, ...) input, got " + formatShape(x));
        for (std::size_t i = 1; i < in.size(); ++i) {
            if (in[i]->shape != Shape { x[1] })
                throw Error("BatchNorm input '" + in[i]->name + "' has shape " + formatShape(in[i]->shape)
                    + ", expected (" + std::to_string(x[1]) + ")");
        }
        return x;
    }

    Shapes inferKnown(const Node& node, const Inputs& in)
    {
        switch (node.op) {
        case OpType::Embedding: {
            requireInputs(node, in, 2, 2);
            if (in[1]->shape.size() != 2)
                throw Error("Embedding table must be (V, C), got " + formatShape(in[1]->shape));
            Shape out = in[0]->shape;
            out.push_back(in[1]->shape[1]);
            return { out };
        }
        case OpType::MatMul: {
            // A third input is a bias over the last dimension (ONNX Gemm's C).
            requireInputs(node, in, 2, 3);
            auto out = matmulShape(node, in[0]->shape, in[1]->shape);
            if (in.size() == 3)
                requireLastDim(out, *in[2], "MatMul bias");
            return { out };
        }
        case OpType::BiasAdd:
            requireInputs(node, in, 2, 2);
            requireLastDim(in[0]->shape, *in[1], "BiasAdd");
            return { in[0]->shape };
        case OpType::Add:
        case OpType::Mul:
            requireInputs(node, in, 2, 2);
            return { broadcastShapes(in[0]->shape, in[1]->shape) };
        case OpType::LayerNorm:
            requireInputs(node, in, 2, 3);
            for (std::size_t i = 1; i < in.size(); ++i)
                requireLastDim(in[0]->shape, *in[i], "LayerNorm");
            return { in[0]->shape };
        case OpType::RMSNorm:
            requireInputs(node, in, 2, 2);
            requireLastDim(in[0]->shape, *in[1], "RMSNorm");
            return { in[0]->shape };
        case OpType::Scale:
        case OpType::Softmax:
        case OpType::Gelu:
        case OpType::Relu:
        case OpType::Tanh:
        case OpType::Dropout:
            requireInputs(node, in, 1, 1);
            return { in[0]->shape };
        case OpType::Mask:
            requireInputs(node, in, 1, 2);
            return { maskShape(in) };
        case OpType::Reshape:
            requireInputs(node, in, 1, 1);
            return { reshapeShape(node, in[0]->shape) };
        case OpType::Transpose:
            requireInputs(node, in, 1, 1);
            return { transposeShape(node, in[0]->shape) };
        case OpType::Split:
            requireInputs(node, in, 1, 1);
            return splitShapes(node, in[0]->shape);
        case OpType::Slice:
            requireInputs(node, in, 1, 1);
            return { sliceShape(node, in[0]->shape) };
        case OpType::Concat:
            requireInputs(node, in, 1, 64);
            return { concatShape(node, in) };
        case OpType::CrossEntropy:
            requireInputs(node, in, 2, 2);
            return { crossEntropyShape(in) };
        case OpType::Sub:
        case OpType::Div:
            requireInputs(node, in, 2, 2);
            return { broadcastShapes(in[0]->shape, in[1]->shape) };
        case OpType::Pow:
        case OpType::Sqrt:
        case OpType::Erf:
            requireInputs(node, in, 1, 1);
            return { in[0]->shape };
        case OpType::ReduceMean:
            requireInputs(node, in, 1, 1);
            return { reduceMeanShape(node, in[0]->shape) };
        case OpType::Select:
            requireInputs(node, in, 1, 1);
            return { selectShape(node, in[0]->shape) };
        case OpType::Expand:
            requireInputs(node, in, 1, 1);
            return { broadcastShapes(in[0]->shape, node.intsAttr("shape")) };
        case OpType::Conv:
            requireInputs(node, in, 2, 3);
            return { convShape(node, in) };
        case OpType::BatchNorm:
            requireInputs(node, in, 5, 5);
            return { batchNormShape(in) };
        case OpType::MaxPool: {
            requireInputs(node, in, 1, 1);
            const auto kernel = spatialAttr(node, "kernel", 2, 0);
            if (kernel[0] < 1 || kernel[1] < 1)
                throw Error("MaxPool needs a kernel attribute of two positive sizes");
            return { windowShape(node, in[0]->shape, kernel, in[0]->shape.size() == 4 ? in[0]->shape[1] : 0) };
        }
        case OpType::GlobalAvgPool: {
            requireInputs(node, in, 1, 1);
            const Shape& x = in[0]->shape;
            if (x.size() != 4)
                throw Error("GlobalAvgPool needs an (N, C, H, W) input, got " + formatShape(x));
            return { Shape { x[0], x[1], 1, 1 } };
        }
        case OpType::Opaque:
            break;
        }
        return {};
    }

} // namespace

Shape broadcastShapes(const Shape& a, const Shape& b)
{
    const auto rank = std::max(a.size(), b.size());
    Shape out(rank, 1);
    for (std::size_t i = 0; i < rank; ++i) {
        const auto da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
        const auto db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
        if (da != db && da != 1 && db != 1)
            throw Error("shapes " + formatShape(a) + " and " + formatShape(b) + " cannot be broadcast");
        out[i] = da == 1 ? db : da;
    }
    return out;
}

std::optional<std::vector<Shape>> inferOutputShapes(const Node& node, const std::vector<const Tensor*>& inputs)
{
    if (node.op == OpType::Opaque)
        return std::nullopt;
    return inferKnown(node, inputs);
}

} // namespace ps
