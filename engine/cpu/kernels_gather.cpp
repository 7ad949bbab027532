// Element- and slice-wise gathers on the CPU: GatherElements (torch.gather: RoBERTa's position ids,
// top-k gates), its inverse ScatterElements (torch's scatter and scatter_add: top-k gates written
// back into a dense tensor) and GatherND (x[idx] on leading axes: a mixture-of-experts layer picking each
// token's expert weights), with ONNX's semantics. Each backward scatter-adds into the data's
// gradient (repeated indices accumulate, as torch's do); integer data has no gradient. The index
// math is gather_math.h's, which the CUDA kernels run too.
#include "cpu/kernel_impl.h"
#include "cpu/typed_arrays.h"
#include "gather_math.h"
#include "op_rules.h"

#include <cstring>
#include <string>

namespace ps::engine::detail {
namespace {

    std::size_t elementBytes(const Node& node, const NdArray& a)
    {
        if (a.dtype() == DType::F32)
            return sizeof(float);
        if (a.dtype() == DType::I64)
            return sizeof(std::int64_t);
        throw Error(nodeLabel(node) + "data must be f32 or i64");
    }

    std::string outOfRange(const Node& node, std::int64_t raw, std::int64_t length, std::size_t axis)
    {
        return nodeLabel(node) + "index " + std::to_string(raw) + " is out of range for axis "
            + std::to_string(std::int64_t(axis)) + " of length " + std::to_string(length);
    }

    // ---- GatherElements ----

    // The flat data offset each output element reads.
    std::vector<std::int64_t> elementOffsets(const Node& node, const NdArray& data, const NdArray& indices)
    {
        requireDType(node, indices, DType::I64, "the indices");
        const auto g = elementGatherOf(node, data.shape(), indices.shape());
        std::vector<std::int64_t> offsets(static_cast<std::size_t>(indices.numel()));
        for (std::size_t e = 0; e < offsets.size(); ++e) {
            const auto raw = indices.i64()[e];
            const auto position = math::checkedPosition(raw, g.axisLength);
            if (position < 0)
                throw Error(outOfRange(node, raw, g.axisLength, static_cast<std::size_t>(g.axis)));
            offsets[e] = math::elementGatherOffset(g, static_cast<long long>(e), position);
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
            std::memcpy(typed::rawBytes(out) + e * size,
                typed::rawBytes(data) + static_cast<std::size_t>(offsets[e]) * size, size);
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

    // ---- ScatterElements: GatherElements' offsets, written (or added) to instead of read ----

    void scatterElementsForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& data = v.in[0];
        const auto& updates = v.in[2];
        const auto size = elementBytes(node, data);
        if (updates.dtype() != data.dtype())
            throw Error(nodeLabel(node) + "updates must have the data's type");
        const auto offsets = elementOffsets(node, data, v.in[1]);
        const bool add = node.intAttr("add", 0) != 0;
        if (add && data.dtype() != DType::F32)
            throw Error(nodeLabel(node) + "adds f32 data only");
        auto out = NdArray::empty(ctx.allocator, data.shape(), data.dtype());
        std::memcpy(typed::rawBytes(out), typed::rawBytes(data), static_cast<std::size_t>(data.numel()) * size);
        for (std::size_t e = 0; e < offsets.size(); ++e) {
            if (add)
                out.f32()[offsets[e]] += updates.f32()[e];
            else
                std::memcpy(typed::rawBytes(out) + static_cast<std::size_t>(offsets[e]) * size,
                    typed::rawBytes(updates) + e * size, size);
        }
        v.out = { out };
    }

    // d data: dy where nothing was written over it (all of it when adding); d updates: dy read at
    // the indices.
    void scatterElementsBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (!g.needGrad[0] && !g.needGrad[2])
            return;
        requireDType(node, v.in[0], DType::F32, "data with a gradient");
        const auto offsets = elementOffsets(node, v.in[0], v.in[1]);
        const auto dy = gradOrZeros(g.gradOut[0], v.in[0].shape(), ctx.allocator);
        if (g.needGrad[0]) {
            auto dx = NdArray::empty(ctx.allocator, v.in[0].shape());
            std::memcpy(dx.f32(), dy.f32(), static_cast<std::size_t>(dy.numel()) * sizeof(float));
            if (node.intAttr("add", 0) == 0) {
                for (const auto offset : offsets)
                    dx.f32()[offset] = 0.0F;
            }
            g.gradIn[0] = dx;
        }
        if (g.needGrad[2]) {
            auto du = NdArray::empty(ctx.allocator, v.in[2].shape());
            for (std::size_t e = 0; e < offsets.size(); ++e)
                du.f32()[e] = dy.f32()[offsets[e]];
            g.gradIn[2] = du;
        }
    }

    // ---- GatherND ----

    struct NdPlan
    {
        Shape out;
        std::int64_t inner = 1;
        std::vector<std::int64_t> slices; // per output row: the data offset / inner
    };

    NdPlan ndPlan(const Node& node, const NdArray& data, const NdArray& indices)
    {
        requireDType(node, indices, DType::I64, "the indices");
        const auto nd = ndGatherOf(node, data.shape(), indices.shape());
        const auto r = nd.gather.depth;
        const auto batchDims = static_cast<std::size_t>(node.intAttr("batch_dims", 0));
        NdPlan plan { nd.out, nd.inner, std::vector<std::int64_t>(static_cast<std::size_t>(nd.rows)) };
        for (std::int64_t row = 0; row < nd.rows; ++row) {
            int bad = 0;
            const auto* tuple = indices.i64() + row * r;
            plan.slices[static_cast<std::size_t>(row)] = math::ndGatherSlice(nd.gather, row, tuple, &bad);
            if (plan.slices[static_cast<std::size_t>(row)] < 0)
                throw Error(outOfRange(node, tuple[bad], nd.gather.sliceDims[bad], batchDims + std::size_t(bad)));
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
            std::memcpy(typed::rawBytes(out) + s * rowBytes,
                typed::rawBytes(data) + static_cast<std::size_t>(plan.slices[s] * plan.inner) * size, rowBytes);
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
    table.add(OpType::ScatterElements, { scatterElementsForward, scatterElementsBackward });
    table.add(OpType::GatherND, { gatherNDForward, gatherNDBackward });
}

} // namespace ps::engine::detail
