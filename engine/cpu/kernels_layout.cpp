// Layout ops: Reshape (a view), Transpose, Split, Slice, Concat, Select and Expand.
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"
#include "op_rules.h"

#include <algorithm>
#include <cstring>

namespace ps::engine::detail {
namespace {

    std::size_t axisOf(const Node& node, const char* key, std::int64_t fallback, std::size_t rank)
    {
        const auto a = node.intAttr(key, fallback);
        return static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(rank) : a);
    }

    // Copies `count` positions along the axis: src[:, srcStart + k, :] -> dst[:, dstStart + k, :].
    void copyAxis(const NdArray& src, std::int64_t srcStart, NdArray& dst, std::int64_t dstStart, std::int64_t count,
        std::size_t axis)
    {
        const auto s = axisView(src.shape(), axis);
        const auto d = axisView(dst.shape(), axis);
        const auto bytes = static_cast<std::size_t>(count * s.inner) * sizeof(float);
        shareAcrossTeam(s.outer, std::max<std::int64_t>(1, kMinTeamShare / std::max<std::int64_t>(1, count * s.inner)),
            [&](std::int64_t first, std::int64_t last) {
                for (auto o = first; o < last; ++o)
                    std::memcpy(dst.f32() + (o * d.length + dstStart) * d.inner,
                        src.f32() + (o * s.length + srcStart) * s.inner, bytes);
            });
    }

    NdArray transpose(const NdArray& x, const std::vector<std::int64_t>& perm, KernelContext& ctx)
    {
        const auto& in = x.shape();
        Shape outShape;
        for (auto p : perm)
            outShape.push_back(in[static_cast<std::size_t>(p)]);
        auto out = NdArray::empty(ctx.allocator, outShape);
        const auto inStrides = stridesOf(in);
        std::vector<std::int64_t> strides; // input stride of each output dim
        for (auto p : perm)
            strides.push_back(inStrides[static_cast<std::size_t>(p)]);
        const auto rank = outShape.size();
        const auto innerLen = rank == 0 ? 1 : outShape.back();
        const bool contiguousInner = rank > 0 && strides.back() == 1;
        const auto rows = rank == 0 ? 1 : out.numel() / innerLen;
        const float* src = x.f32();
        float* dst = out.f32();
        // Output rows shared across the device's team (copies: any split, the same values).
        shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinTeamShare / std::max<std::int64_t>(1, innerLen)),
            [&](std::int64_t first, std::int64_t last) {
                if (first >= last)
                    return; // nothing to copy (an empty dimension)
                std::vector<std::int64_t> index(rank, 0);
                std::int64_t offset = 0;
                for (std::size_t d = rank - 1, rest = static_cast<std::size_t>(first); rank > 0 && d-- > 0;) {
                    index[d] = static_cast<std::int64_t>(rest) % outShape[d];
                    rest /= static_cast<std::size_t>(outShape[d]);
                    offset += index[d] * strides[d];
                }
                for (auto r = first; r < last; ++r) {
                    if (contiguousInner) {
                        std::memcpy(
                            dst + r * innerLen, src + offset, static_cast<std::size_t>(innerLen) * sizeof(float));
                    } else {
                        for (std::int64_t j = 0; j < innerLen; ++j)
                            dst[r * innerLen + j] = src[offset + j * strides.back()];
                    }
                    for (std::size_t d = rank - 1; rank > 0 && d-- > 0;) { // odometer over all but the last dim
                        ++index[d];
                        offset += strides[d];
                        if (index[d] < outShape[d])
                            break;
                        offset -= strides[d] * outShape[d];
                        index[d] = 0;
                    }
                }
            });
        return out;
    }

    // ---- Forward and backward of each op ----

    void reshapeForward(const Node& node, NodeValues& v, KernelContext&)
    {
        const auto& x = v.in[0];
        Shape shape = node.intsAttr("shape");
        std::int64_t known = 1;
        for (auto d : shape)
            known *= d == -1 ? 1 : d;
        for (auto& d : shape) {
            if (d == -1)
                d = x.numel() / known;
        }
        v.out = { x.view(shape) };
    }

    void reshapeBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext&)
    {
        g.gradIn[0] = g.gradOut[0].view(v.in[0].shape());
    }

    void transposeForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { transpose(v.in[0], node.intsAttr("perm"), ctx) };
    }

    void transposeBackward(const Node& node, const NodeValues&, BackwardArgs& g, KernelContext& ctx)
    {
        const auto perm = node.intsAttr("perm");
        std::vector<std::int64_t> inverse(perm.size());
        for (std::size_t i = 0; i < perm.size(); ++i)
            inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
        g.gradIn[0] = transpose(g.gradOut[0], inverse, ctx);
    }

    void splitForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", -1, x.shape().size());
        std::int64_t start = 0;
        v.out.clear();
        for (auto size : node.intsAttr("sizes")) {
            auto shape = x.shape();
            shape[axis] = size;
            auto part = NdArray::empty(ctx.allocator, shape);
            copyAxis(x, start, part, 0, size, axis);
            v.out.push_back(part);
            start += size;
        }
    }

    void splitBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", -1, x.shape().size());
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        std::int64_t start = 0;
        for (std::size_t i = 0; i < v.out.size(); ++i) {
            const auto part = gradOrZeros(g.gradOut[i], v.out[i].shape(), ctx.allocator);
            copyAxis(part, 0, dx, start, part.shape()[axis], axis);
            start += part.shape()[axis];
        }
        g.gradIn[0] = dx;
    }

    void sliceForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        const auto start = node.intAttr("start", 0);
        const auto end = std::min(node.intAttr("end", x.shape()[axis]), x.shape()[axis]);
        auto shape = x.shape();
        shape[axis] = end - start;
        auto out = NdArray::empty(ctx.allocator, shape);
        copyAxis(x, start, out, 0, end - start, axis);
        v.out = { out };
    }

    // Slice and Select: the output gradient lands in zeros at the positions forward took.
    void takenBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx, bool select)
    {
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        auto part = g.gradOut[0];
        if (select) {
            auto kept = x.shape();
            kept[axis] = 1;
            part = part.view(kept);
        }
        const auto start = select ? node.intAttr("index", 0) : node.intAttr("start", 0);
        copyAxis(part, 0, dx, start, part.shape()[axis], axis);
        g.gradIn[0] = dx;
    }

    void sliceBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        takenBackward(node, v, g, ctx, false);
    }

    void concatForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto axis = axisOf(node, "axis", 0, v.in[0].shape().size());
        auto shape = v.in[0].shape();
        shape[axis] = 0;
        for (const auto& in : v.in)
            shape[axis] += in.shape()[axis];
        auto out = NdArray::empty(ctx.allocator, shape);
        std::int64_t at = 0;
        for (const auto& in : v.in) {
            copyAxis(in, 0, out, at, in.shape()[axis], axis);
            at += in.shape()[axis];
        }
        v.out = { out };
    }

    void concatBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto axis = axisOf(node, "axis", 0, v.in[0].shape().size());
        std::int64_t at = 0;
        for (std::size_t i = 0; i < v.in.size(); ++i) {
            const auto len = v.in[i].shape()[axis];
            if (g.needGrad[i]) {
                auto part = NdArray::empty(ctx.allocator, v.in[i].shape());
                copyAxis(g.gradOut[0], at, part, 0, len, axis);
                g.gradIn[i] = part;
            }
            at += len;
        }
    }

    void selectForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        auto kept = x.shape();
        kept[axis] = 1;
        auto out = NdArray::empty(ctx.allocator, kept);
        copyAxis(x, node.intAttr("index", 0), out, 0, 1, axis);
        Shape shape = x.shape();
        shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
        v.out = { out.view(shape) };
    }

    void selectBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        takenBackward(node, v, g, ctx, true);
    }

    void expandForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto shape = expandedShape(node, x.shape());
        auto out = NdArray::empty(ctx.allocator, shape, x.dtype());
        const auto copy = [&](auto* dst, const auto* src) {
            forEachBroadcast(
                shape, x.shape(), x.shape(), [&](std::int64_t i, std::int64_t ia, std::int64_t) { dst[i] = src[ia]; });
        };
        if (x.dtype() == DType::F32)
            copy(out.f32(), x.f32());
        else if (x.dtype() == DType::I64) // ids and positions broadcast over the batch
            copy(out.i64(), x.i64());
        else
            throw Error(nodeLabel(node) + "expands f32 or i64 values, not " + std::string(toString(x.dtype())));
        v.out = { out };
    }

    void expandBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = reduceToShape(g.gradOut[0], v.in[0].shape(), ctx.allocator);
    }

} // namespace

void registerLayoutKernels(KernelTable& table)
{
    table.add(OpType::Reshape, { reshapeForward, reshapeBackward });
    table.add(OpType::Transpose, { transposeForward, transposeBackward });
    table.add(OpType::Split, { splitForward, splitBackward });
    table.add(OpType::Slice, { sliceForward, sliceBackward });
    table.add(OpType::Concat, { concatForward, concatBackward });
    table.add(OpType::Select, { selectForward, selectBackward });
    table.add(OpType::Expand, { expandForward, expandBackward });
}

} // namespace ps::engine::detail
