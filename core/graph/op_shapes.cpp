// The shape rules of the op registry's entries (op_shapes.h), and einsum equations.
#include "graph/op_shapes.h"

#include "graph/shape_inference.h"
#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <numeric>

namespace ps {
namespace opshapes {

    using Shapes = std::vector<Shape>;
    using Inputs = ShapeInputs;

    std::size_t normalizeAxis(std::int64_t axis, std::size_t rank, std::string_view op)
    {
        const auto r = static_cast<std::int64_t>(rank);
        if (axis < -r || axis >= r)
            throw Error(std::string(op) + " axis " + std::to_string(axis) + " is out of range for rank "
                + std::to_string(rank));
        return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
    }

    const std::string& stringAttr(const Node& node, std::string_view key, const std::string& fallback)
    {
        const auto it = node.attrs.find(key);
        if (it == node.attrs.end())
            return fallback;
        if (const auto* s = std::get_if<std::string>(&it->second))
            return *s;
        throw Error(std::string(toString(node.op)) + " attribute " + std::string(key) + " must be a string");
    }

    // ---- shape rules ----------------------------------------------------------------------

    Shapes sameShape(const Node&, const Inputs& in)
    {
        return { in[0]->shape };
    }

    Shapes broadcastAll(const Node&, const Inputs& in)
    {
        Shape out = in[0]->shape;
        for (std::size_t i = 1; i < in.size(); ++i)
            out = broadcastShapes(out, in[i]->shape);
        return { out };
    }

    Shapes embeddingShape(const Node&, const Inputs& in)
    {
        if (in[1]->shape.size() != 2)
            throw Error("Embedding table must be (V, C), got " + formatShape(in[1]->shape));
        Shape out = in[0]->shape;
        out.push_back(in[1]->shape[1]);
        return { out };
    }

    void requireLastDim(const Shape& x, const Tensor& param, std::string_view op)
    {
        if (param.shape.size() != 1 || x.empty() || param.shape[0] != x.back())
            throw Error(std::string(op) + " parameter '" + param.name + "' has shape " + formatShape(param.shape)
                + ", expected (" + (x.empty() ? std::string("?") : std::to_string(x.back())) + ")");
    }

    Shapes matmulShape(const Node& node, const Inputs& in)
    {
        // A third input is a bias over the last dimension (ONNX Gemm's C).
        const Shape& a = in[0]->shape;
        Shape b = in[1]->shape;
        if (a.size() < 2 || b.size() < 2)
            throw Error("MatMul needs inputs of rank >= 2, got " + formatShape(a) + " x " + formatShape(b));
        if (node.intAttr("trans_b", 0) != 0)
            std::swap(b[b.size() - 1], b[b.size() - 2]);
        if (a.back() != b[b.size() - 2])
            throw Error("MatMul inner dimensions differ: " + formatShape(a) + " x " + formatShape(b)
                + (node.intAttr("trans_b", 0) != 0 ? " (b transposed)" : ""));
        Shape out = broadcastShapes(Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
        out.push_back(a[a.size() - 2]);
        out.push_back(b.back());
        if (in.size() == 3)
            requireLastDim(out, *in[2], "MatMul bias");
        return { out };
    }

    Shapes biasAddShape(const Node&, const Inputs& in)
    {
        requireLastDim(in[0]->shape, *in[1], "BiasAdd");
        return { in[0]->shape };
    }

    Shapes normShape(const Node& node, const Inputs& in)
    {
        for (std::size_t i = 1; i < in.size(); ++i)
            requireLastDim(in[0]->shape, *in[i], toString(node.op));
        return { in[0]->shape };
    }

    Shapes maskShape(const Node&, const Inputs& in)
    {
        const Shape& scores = in[0]->shape;
        if (scores.size() < 2)
            throw Error("Mask needs attention scores of rank >= 2, got " + formatShape(scores));
        if (in.size() == 2) {
            const Shape& pad = in[1]->shape; // (B, Tk) padding mask, applied as (B, 1, 1, Tk)
            if (pad.size() != 2 || pad[0] != scores[0] || pad[1] != scores.back())
                throw Error("Mask padding mask " + formatShape(pad) + " does not fit scores " + formatShape(scores));
        }
        return { scores };
    }

    Shapes reshapeShape(const Node& node, const Inputs& in)
    {
        const Shape& from = in[0]->shape;
        Shape out = node.intsAttr("shape");
        const auto total = numElements(from);
        const auto inferred = std::count(out.begin(), out.end(), -1);
        if (inferred > 1)
            throw Error("Reshape target " + formatShape(out) + " has more than one -1");
        std::int64_t known = 1;
        for (auto d : out) {
            if (__builtin_mul_overflow(known, d == -1 ? 1 : d, &known))
                throw Error("Reshape target " + formatShape(out) + " has more elements than an int64 holds");
        }
        if (inferred == 1) {
            if (known == 0 || total % known != 0)
                throw Error("Reshape cannot infer -1 in " + formatShape(out) + " from " + formatShape(from));
            *std::find(out.begin(), out.end(), -1) = total / known;
        }
        if (numElements(out) != total)
            throw Error("Reshape from " + formatShape(from) + " to " + formatShape(out) + " changes the element count");
        return { out };
    }

    Shapes transposeShape(const Node& node, const Inputs& in)
    {
        const Shape& from = in[0]->shape;
        const auto perm = node.intsAttr("perm");
        if (perm.size() != from.size())
            throw Error("Transpose perm has " + std::to_string(perm.size()) + " entries for rank "
                + std::to_string(from.size()));
        std::vector<bool> seen(from.size(), false);
        Shape out;
        for (auto p : perm) {
            const auto axis = normalizeAxis(p, from.size(), "Transpose");
            if (seen[axis])
                throw Error("Transpose perm repeats axis " + std::to_string(p));
            seen[axis] = true;
            out.push_back(from[axis]);
        }
        return { out };
    }

    Shapes splitShapes(const Node& node, const Inputs& in)
    {
        const Shape& from = in[0]->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", -1), from.size(), "Split");
        const auto sizes = node.intsAttr("sizes");
        if (std::accumulate(sizes.begin(), sizes.end(), std::int64_t { 0 }) != from[axis])
            throw Error(
                "Split sizes do not add up to dimension " + std::to_string(from[axis]) + " of " + formatShape(from));
        Shapes out;
        for (auto s : sizes) {
            Shape part = from;
            part[axis] = s;
            out.push_back(part);
        }
        return out;
    }

    Shapes sliceShape(const Node& node, const Inputs& in)
    {
        const Shape& from = in[0]->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", 0), from.size(), "Slice");
        const auto start = node.intAttr("start", 0);
        const auto end = std::min(node.intAttr("end", from[axis]), from[axis]);
        if (start < 0 || start >= end)
            throw Error("Slice [" + std::to_string(start) + ", " + std::to_string(end) + ") is empty or negative on "
                + formatShape(from));
        Shape out = from;
        out[axis] = end - start;
        return { out };
    }

    Shapes concatShape(const Node& node, const Inputs& in)
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
        return { out };
    }

    Shapes crossEntropyShape(const Node&, const Inputs& in)
    {
        const Shape& logits = in[0]->shape;
        const Shape& labels = in[1]->shape;
        if (logits.empty() || !std::equal(labels.begin(), labels.end(), logits.begin(), logits.end() - 1)
            || labels.size() + 1 != logits.size())
            throw Error("CrossEntropy labels " + formatShape(labels) + " do not match logits " + formatShape(logits));
        return { Shape {} };
    }

    Shapes reduceShape(const Node& node, const Inputs& in)
    {
        const Shape& from = in[0]->shape;
        auto axes = node.intsAttr("axes");
        if (axes.empty()) { // ONNX: all axes
            for (std::size_t i = 0; i < from.size(); ++i)
                axes.push_back(static_cast<std::int64_t>(i));
        }
        std::vector<bool> reduced(from.size(), false);
        for (auto a : axes)
            reduced[normalizeAxis(a, from.size(), toString(node.op))] = true;
        const bool keep = node.intAttr("keepdims", 1) != 0;
        Shape out;
        for (std::size_t i = 0; i < from.size(); ++i) {
            if (!reduced[i])
                out.push_back(from[i]);
            else if (keep)
                out.push_back(1);
        }
        return { out };
    }

    Shapes selectShape(const Node& node, const Inputs& in)
    {
        const Shape& from = in[0]->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", 0), from.size(), "Select");
        const auto index = node.intAttr("index", 0);
        if (index < 0 || index >= from[axis])
            throw Error("Select index " + std::to_string(index) + " is out of range for " + formatShape(from));
        Shape out = from;
        out.erase(out.begin() + static_cast<std::ptrdiff_t>(axis));
        return { out };
    }

    Shapes expandShape(const Node& node, const Inputs& in)
    {
        return { broadcastShapes(in[0]->shape, node.intsAttr("shape")) };
    }

    // Spatial attributes of Conv and the pools: one entry per spatial axis (pads two: the begins,
    // then the ends).
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

    // PyTorch's and ONNX's output size of a sliding window; in ceil mode the last window must
    // start inside the input or its leading padding.
    std::int64_t windowOutput(std::int64_t size, std::int64_t kernel, std::int64_t stride, std::int64_t padBefore,
        std::int64_t padAfter, std::int64_t dilation, bool ceil)
    {
        const auto span = dilation * (kernel - 1) + 1;
        const auto padded = size + padBefore + padAfter;
        if (stride < 1 || padded < span)
            throw Error(
                "window of " + std::to_string(span) + " does not fit a padded size of " + std::to_string(padded));
        auto out = (padded - span + (ceil ? stride - 1 : 0)) / stride + 1;
        if (ceil && (out - 1) * stride >= size + padBefore)
            --out;
        return out;
    }

    // The window's output over (N, C, H, W), or (N, C, D, H, W) for a three-entry kernel (Conv).
    Shape windowShape(const Node& node, const Shape& x, const std::vector<std::int64_t>& kernel, std::int64_t channels)
    {
        const auto spatial = kernel.size();
        if (x.size() != spatial + 2)
            throw Error(std::string(toString(node.op)) + " needs an "
                + (spatial == 3 ? "(N, C, D, H, W)" : "(N, C, H, W)") + " input, got " + formatShape(x));
        const auto strides = spatialAttr(node, "strides", spatial, 1);
        const auto pads = spatialAttr(node, "pads", 2 * spatial, 0);
        const auto dilations = spatialAttr(node, "dilations", spatial, 1);
        const bool ceil = node.intAttr("ceil_mode", 0) != 0;
        Shape out { x[0], channels };
        for (std::size_t d = 0; d < spatial; ++d)
            out.push_back(
                windowOutput(x[2 + d], kernel[d], strides[d], pads[d], pads[spatial + d], dilations[d], ceil));
        return out;
    }

    // Conv and ConvTranspose: 2 or 3 spatial axes, the weight's trailing dims.
    bool convRanks(const Shape& x, const Shape& w)
    {
        return (w.size() == 4 || w.size() == 5) && x.size() == w.size();
    }

    Shapes convShape(const Node& node, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        const Shape& w = in[1]->shape;
        const auto group = node.intAttr("group", 1);
        if (!convRanks(x, w) || group < 1 || x[1] != w[1] * group || w[0] % group != 0)
            throw Error("Conv weight " + formatShape(w) + " does not fit input " + formatShape(x) + " with group "
                + std::to_string(group));
        if (in.size() == 3 && (in[2]->shape.size() != 1 || in[2]->shape[0] != w[0]))
            throw Error(
                "Conv bias " + formatShape(in[2]->shape) + " does not match " + std::to_string(w[0]) + " filters");
        return { windowShape(node, x, std::vector<std::int64_t>(w.begin() + 2, w.end()), w[0]) };
    }

    // Each spatial size: (in - 1) stride - pad begin - pad end + dilation (k - 1) + output_padding + 1.
    Shapes convTransposeShape(const Node& node, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        const Shape& w = in[1]->shape;
        const auto group = node.intAttr("group", 1);
        if (!convRanks(x, w) || group < 1 || x[1] != w[0] || w[0] % group != 0)
            throw Error("ConvTranspose weight " + formatShape(w) + " does not fit input " + formatShape(x)
                + " with group " + std::to_string(group));
        const auto filters = w[1] * group;
        if (in.size() == 3 && (in[2]->shape.size() != 1 || in[2]->shape[0] != filters))
            throw Error("ConvTranspose bias " + formatShape(in[2]->shape) + " does not match " + std::to_string(filters)
                + " filters");
        const auto spatial = x.size() - 2;
        const auto strides = spatialAttr(node, "strides", spatial, 1);
        const auto pads = spatialAttr(node, "pads", 2 * spatial, 0);
        const auto dilations = spatialAttr(node, "dilations", spatial, 1);
        const auto extra = spatialAttr(node, "output_padding", spatial, 0);
        Shape out { x[0], filters };
        for (std::size_t d = 0; d < spatial; ++d) {
            out.push_back((x[2 + d] - 1) * strides[d] - pads[d] - pads[spatial + d] + dilations[d] * (w[2 + d] - 1)
                + extra[d] + 1);
            if (out.back() < 1 || extra[d] < 0 || extra[d] >= std::max(strides[d], dilations[d]))
                throw Error("ConvTranspose of " + formatShape(x) + " with kernel " + formatShape(w)
                    + " gives no output (or an output_padding not below the stride)");
        }
        return { out };
    }

    Shapes batchNormShape(const Node&, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        if (x.size() < 2)
            throw Error("BatchNorm needs an (N, C, ...) input, got " + formatShape(x));
        for (std::size_t i = 1; i < in.size(); ++i) {
            if (in[i]->shape != Shape { x[1] })
                throw Error("BatchNorm input '" + in[i]->name + "' has shape " + formatShape(in[i]->shape)
                    + ", expected (" + std::to_string(x[1]) + ")");
        }
        return { x };
    }

    Shapes poolShape(const Node& node, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        const std::size_t spatial = x.size() == 5 ? 3 : 2; // (N, C, D, H, W) or (N, C, H, W)
        const auto kernel = spatialAttr(node, "kernel", spatial, 0);
        if (std::any_of(kernel.begin(), kernel.end(), [](std::int64_t k) { return k < 1; }))
            throw Error(std::string(toString(node.op)) + " needs a kernel attribute of " + std::to_string(spatial)
                + " positive sizes");
        return { windowShape(node, x, kernel, x.size() >= 4 ? x[1] : 0) };
    }

    Shapes globalPoolShape(const Node&, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        if (x.size() < 3)
            throw Error("GlobalAvgPool needs an (N, C, ...) input with a spatial axis, got " + formatShape(x));
        Shape out(x.size(), 1); // every spatial axis to one
        out[0] = x[0];
        out[1] = x[1];
        return { out };
    }

    Shapes triluShape(const Node&, const Inputs& in)
    {
        if (in[0]->shape.size() < 2)
            throw Error("Trilu needs a matrix or a batch of matrices, got " + formatShape(in[0]->shape));
        return { in[0]->shape };
    }

    Shapes cumSumShape(const Node& node, const Inputs& in)
    {
        (void)normalizeAxis(node.intAttr("axis", 0), in[0]->shape.size(), "CumSum");
        return { in[0]->shape };
    }

    Shapes castShape(const Node& node, const Inputs& in)
    {
        static const std::string kNone;
        if (!parseDType(stringAttr(node, "to", kNone)))
            throw Error("Cast needs an attribute 'to' naming an element type (f32, i64, bool ...)");
        return { in[0]->shape };
    }

    Shapes padShape(const Node& node, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        const auto pads = node.intsAttr("pads");
        if (pads.size() != 2 * x.size())
            throw Error("Pad needs " + std::to_string(2 * x.size()) + " pads for " + formatShape(x) + ", got "
                + std::to_string(pads.size()));
        static const std::string kConstant = "constant";
        const auto& mode = stringAttr(node, "mode", kConstant);
        if (mode != "constant" && mode != "reflect" && mode != "edge")
            throw Error("Pad mode '" + mode + "' is not constant, reflect or edge");
        Shape out = x;
        for (std::size_t i = 0; i < x.size(); ++i) {
            out[i] = x[i] + pads[i] + pads[i + x.size()];
            if (out[i] < 0 || (mode == "reflect" && (pads[i] >= x[i] || pads[i + x.size()] >= x[i])))
                throw Error("Pad of " + formatShape(x) + " by the pads given leaves axis " + std::to_string(i)
                    + (out[i] < 0 ? " negative" : " wider than reflect allows"));
        }
        return { out };
    }

    Shapes resizeShape(const Node& node, const Inputs& in)
    {
        const Shape& x = in[0]->shape;
        const auto sizes = node.intsAttr("sizes");
        if (x.size() != 4 || sizes.size() != 2 || sizes[0] < 1 || sizes[1] < 1)
            throw Error("Resize needs an (N, C, H, W) input and two positive output sizes, got " + formatShape(x));
        static const std::string kNearest = "nearest";
        const auto& mode = stringAttr(node, "mode", kNearest);
        if (mode != "nearest" && mode != "linear")
            throw Error("Resize mode '" + mode + "' is not nearest or linear");
        return { Shape { x[0], x[1], sizes[0], sizes[1] } };
    }

    Shapes gatherShape(const Node& node, const Inputs& in)
    {
        const Shape& data = in[0]->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", 0), data.size(), "Gather");
        Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
        out.insert(out.end(), in[1]->shape.begin(), in[1]->shape.end());
        out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
        return { out };
    }

    Shapes scatterNdShape(const Node&, const Inputs& in)
    {
        const Shape& data = in[0]->shape;
        const Shape& idx = in[1]->shape;
        const Shape& upd = in[2]->shape;
        if (idx.empty() || idx.back() < 1 || static_cast<std::size_t>(idx.back()) > data.size())
            throw Error("ScatterND indices " + formatShape(idx) + " do not index " + formatShape(data));
        Shape expect(idx.begin(), idx.end() - 1);
        expect.insert(expect.end(), data.begin() + idx.back(), data.end());
        if (upd != expect)
            throw Error("ScatterND updates " + formatShape(upd) + " should be " + formatShape(expect));
        return { data };
    }

    Shapes gatherElementsShape(const Node& node, const Inputs& in)
    {
        const Shape& data = in[0]->shape;
        const Shape& idx = in[1]->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", 0), data.size(), "GatherElements");
        if (idx.size() != data.size())
            throw Error("GatherElements indices " + formatShape(idx) + " do not have the rank of " + formatShape(data));
        for (std::size_t d = 0; d < data.size(); ++d) {
            if (d != axis && idx[d] > data[d])
                throw Error("GatherElements indices " + formatShape(idx) + " exceed " + formatShape(data));
        }
        return { idx };
    }

    // The data's shape; the indices as GatherElements' over the data, the updates of their shape.
    Shapes scatterElementsShape(const Node& node, const Inputs& in)
    {
        (void)gatherElementsShape(node, { in[0], in[1] });
        if (in[2]->shape != in[1]->shape)
            throw Error("ScatterElements updates " + formatShape(in[2]->shape) + " are not shaped like the indices "
                + formatShape(in[1]->shape));
        return { in[0]->shape };
    }

    Shapes gatherNdShape(const Node& node, const Inputs& in)
    {
        const Shape& data = in[0]->shape;
        const Shape& idx = in[1]->shape;
        const auto b = node.intAttr("batch_dims", 0);
        const auto r = idx.empty() ? 0 : idx.back();
        if (b < 0 || idx.empty() || static_cast<std::size_t>(b) >= idx.size() || r < 1
            || static_cast<std::size_t>(b + r) > data.size() || !std::equal(idx.begin(), idx.begin() + b, data.begin()))
            throw Error("GatherND indices " + formatShape(idx) + " (batch_dims " + std::to_string(b) + ") do not index "
                + formatShape(data));
        Shape out(idx.begin(), idx.end() - 1);
        out.insert(out.end(), data.begin() + b + r, data.end());
        return { out };
    }

    Shapes topKShape(const Node& node, const Inputs& in)
    {
        Shape out = in[0]->shape;
        const auto axis = normalizeAxis(node.intAttr("axis", -1), out.size(), "TopK");
        const auto k = node.intAttr("k", 0);
        if (k < 1 || k > out[axis])
            throw Error("TopK k = " + std::to_string(k) + " is out of range for " + formatShape(out));
        out[axis] = k;
        return { out, out };
    }

    // Sizes of every einsum letter, checked across operands.
    std::map<char, std::int64_t> einsumSizes(const EinsumSpec& spec, const Inputs& in)
    {
        std::map<char, std::int64_t> size;
        for (std::size_t i = 0; i < spec.operands.size(); ++i) {
            const auto& letters = spec.operands[i];
            const Shape& s = in[i]->shape;
            if (letters.size() != s.size())
                throw Error(
                    "Einsum operand " + std::to_string(i) + " '" + letters + "' does not fit " + formatShape(s));
            for (std::size_t d = 0; d < letters.size(); ++d) {
                const auto [it, fresh] = size.try_emplace(letters[d], s[d]);
                if (!fresh && it->second != s[d])
                    throw Error(std::string("Einsum letter '") + letters[d] + "' is " + std::to_string(it->second)
                        + " and " + std::to_string(s[d]));
            }
        }
        return size;
    }

    Shapes einsumShape(const Node& node, const Inputs& in)
    {
        static const std::string kNone;
        const auto spec = parseEinsum(stringAttr(node, "equation", kNone), in.size());
        const auto size = einsumSizes(spec, in);
        Shape out;
        for (char c : spec.output)
            out.push_back(size.at(c));
        return { out };
    }

} // namespace opshapes

} // namespace ps
