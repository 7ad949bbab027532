// Element- and slice-wise gathers on the CPU: GatherElements (torch.gather: RoBERTa's position ids,
// top-k gates) and GatherND (x[idx] on leading axes: a mixture-of-experts layer picking each
// token's expert weights), with ONNX's semantics. Each backward scatter-adds into the data's
// gradient (repeated indices accumulate, as torch's do); integer data has no gradient.
#include "cpu/kernel_impl.h"

#include <cstring>
#include <string>

namespace ps::engine::detail {
namespace {

    std::string str(std::int64_t v)
    {
        return std::to_string(v);
    }

    std::size_t elementBytes(const Node& node, const NdArray& a)
    {
        if (a.dtype() == DType::F32)
            return sizeof(float);
        if (a.dtype() == DType::I64)
            return sizeof(std::int64_t);
        throw Error(nodeLabel(node) + "data must be f32 or i64");
    }
    const std::byte* bytesOf(const NdArray& a)
    {
        return a.dtype() == DType::F32 ? reinterpret_cast<const std::byte*>(a.f32())
                                       : reinterpret_cast<const std::byte*>(a.i64());
    }
    std::byte* bytesOf(NdArray& a)
    {
        return a.dtype() == DType::F32 ? reinterpret_cast<std::byte*>(a.f32()) : reinterpret_cast<std::byte*>(a.i64());
    }

    std::int64_t checkedIndex(const Node& node, std::int64_t raw, std::int64_t length, std::size_t axis)
    {
        const auto i = raw < 0 ? raw + length : raw;
        if (i < 0 || i >= length)
            throw Error(nodeLabel(node) + "index " + str(raw) + " is out of range for axis " + str(std::int64_t(axis))
                + " of length " + str(length));
        return i;
    }

    // ---- GatherElements ----

    // The flat data offset each output element reads: out[i0..ik] = data[i0..idx..ik], with
    // idx = indices[i0..ik] on the axis. Indices may be shorter than the data on any axis.
    std::vector<std::int64_t> elementOffsets(const Node& node, const NdArray& data, const NdArray& indices)
    {
        requireDType(node, indices, DType::I64, "the indices");
        const auto& ds = data.shape();
        const auto& is = indices.shape();
        if (ds.size() != is.size() || ds.empty())
            throw Error(
                nodeLabel(node) + "indices " + formatShape(is) + " must have the rank of data " + formatShape(ds));
        const auto rank = static_cast<std::int64_t>(ds.size());
        auto axis = node.intAttr("axis", 0);
        if (axis < -rank || axis >= rank)
            throw Error(nodeLabel(node) + "axis " + str(axis) + " is out of range for rank " + str(rank));
        const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
        for (std::size_t d = 0; d < ds.size(); ++d) {
            if (d != a && is[d] > ds[d])
                throw Error(
                    nodeLabel(node) + "indices " + formatShape(is) + " are larger than data " + formatShape(ds));
        }
        const auto strides = stridesOf(ds);
        std::vector<std::int64_t> offsets(static_cast<std::size_t>(indices.numel()));
        std::vector<std::int64_t> pos(ds.size(), 0);
        for (std::size_t e = 0; e < offsets.size(); ++e) {
            std::int64_t off = 0;
            for (std::size_t d = 0; d < ds.size(); ++d)
                off += (d == a ? checkedIndex(node, indices.i64()[e], ds[a], a) : pos[d]) * strides[d];
            offsets[e] = off;
            for (auto d = ds.size(); d-- > 0;) { // the next output position, last axis fastest
                if (++pos[d] < is[d])
                    break;
                pos[d] = 0;
            }
        }
        return offsets;
    }

    void gatherElementsForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& data = v.in[0];
        const auto size = elementBytes(node, data);
        const auto offsets = elementOffsets(node, data, v.in[1]);
        auto out = NdArray::empty(ctx.allocator, v.in[1].shape(), data.dtype());
        for (std::size_t e = 0; e < offsets.size(); ++e)
            std::memcpy(bytesOf(out) + e * size, bytesOf(data) + static_cast<std::size_t>(offsets[e]) * size, size);
        v.out = { out };
    }

    void gatherElementsBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (!g.needGrad[0])
            return;
        requireDType(node, v.in[0], DType::F32, "data with a gradient");
        const auto offsets = elementOffsets(node, v.in[0], v.in[1]);
        const auto dy = gradOrZeros(g.gradOut[0], v.in[1].shape(), ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        for (std::size_t e = 0; e < offsets.size(); ++e)
            dx.f32()[offsets[e]] += dy.f32()[e];
        g.gradIn[0] = dx;
    }

    // ---- GatherND ----

    // data (B..., S..., inner...) with b batch axes, indices (B..., rows..., r): each index row picks
    // the slice data[batch][i1..ir] of `inner` elements.
    struct NdPlan
    {
        Shape out;
        std::int64_t inner = 1;
        std::vector<std::int64_t> slices; // per output row: the data offset / inner
    };

    NdPlan ndPlan(const Node& node, const NdArray& data, const NdArray& indices)
    {
        requireDType(node, indices, DType::I64, "the indices");
        const auto& ds = data.shape();
        const auto& is = indices.shape();
        const auto b = node.intAttr("batch_dims", 0);
        const auto r = is.empty() ? 0 : is.back();
        if (b < 0 || is.empty() || static_cast<std::size_t>(b) >= is.size() || r < 1
            || static_cast<std::size_t>(b + r) > ds.size())
            throw Error(nodeLabel(node) + "indices " + formatShape(is) + " (batch_dims " + str(b)
                + ") do not index data " + formatShape(ds));
        const auto bu = static_cast<std::size_t>(b);
        for (std::size_t d = 0; d < bu; ++d) {
            if (is[d] != ds[d])
                throw Error(nodeLabel(node) + "batch axis " + str(std::int64_t(d)) + " of indices " + formatShape(is)
                    + " differs from data " + formatShape(ds));
        }
        NdPlan plan;
        plan.out.assign(is.begin(), is.end() - 1);
        plan.out.insert(plan.out.end(), ds.begin() + b + r, ds.end());
        plan.inner = numElements(Shape(ds.begin() + b + r, ds.end()));
        const auto batches = numElements(Shape(ds.begin(), ds.begin() + b));
        const auto perBatchSlices = numElements(Shape(ds.begin() + b, ds.begin() + b + r));
        const auto rowsPerBatch = numElements(Shape(is.begin() + b, is.end() - 1));
        plan.slices.reserve(static_cast<std::size_t>(batches * rowsPerBatch));
        const auto* idx = indices.i64();
        for (std::int64_t batch = 0; batch < batches; ++batch) {
            for (std::int64_t row = 0; row < rowsPerBatch; ++row, idx += r) {
                std::int64_t slice = 0;
                for (std::int64_t j = 0; j < r; ++j) {
                    const auto axis = bu + static_cast<std::size_t>(j);
                    slice = slice * ds[axis] + checkedIndex(node, idx[j], ds[axis], axis);
                }
                plan.slices.push_back(batch * perBatchSlices + slice);
            }
        }
        return plan;
    }

    void gatherNDForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& data = v.in[0];
        const auto size = elementBytes(node, data);
        const auto plan = ndPlan(node, data, v.in[1]);
        auto out = NdArray::empty(ctx.allocator, plan.out, data.dtype());
        const auto rowBytes = static_cast<std::size_t>(plan.inner) * size;
        for (std::size_t s = 0; s < plan.slices.size(); ++s)
            std::memcpy(bytesOf(out) + s * rowBytes,
                bytesOf(data) + static_cast<std::size_t>(plan.slices[s] * plan.inner) * size, rowBytes);
        v.out = { out };
    }

    void gatherNDBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (!g.needGrad[0])
            return;
        requireDType(node, v.in[0], DType::F32, "data with a gradient");
        const auto plan = ndPlan(node, v.in[0], v.in[1]);
        const auto dy = gradOrZeros(g.gradOut[0], plan.out, ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        for (std::size_t s = 0; s < plan.slices.size(); ++s) {
            float* dst = dx.f32() + plan.slices[s] * plan.inner;
            const float* src = dy.f32() + static_cast<std::int64_t>(s) * plan.inner;
            for (std::int64_t k = 0; k < plan.inner; ++k)
                dst[k] += src[k];
        }
        g.gradIn[0] = dx;
    }

} // namespace

void registerGatherKernels(KernelTable& table)
{
    table.add(OpType::GatherElements, { gatherElementsForward, gatherElementsBackward });
    table.add(OpType::GatherND, { gatherNDForward, gatherNDBackward });
}

} // namespace ps::engine::detail
