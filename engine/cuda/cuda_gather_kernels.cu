// CUDA kernels of GatherElements and GatherND (f32 or i64 data, i64 indices, negative ones from the
// end), with the CPU's semantics: the shapes are op_rules.h's and the index math gather_math.h's,
// which the CPU kernels call. The backwards add with atomics (indices repeat); an index out of range
// is reported naming the node.
#include "cuda/cuda_common.cuh"
#include "gather_math.h"
#include "op_rules.h"

namespace ps::engine::cuda {
namespace {

    // bad[0] = 1 and bad[1] = the raw index when one is out of range.
    void reportBad(const Node& node, NdArray& bad, const std::string& where)
    {
        std::int64_t found[2] = { 0, 0 };
        bad.memory().copy(reinterpret_cast<std::byte*>(found), bad.data(), sizeof found);
        if (found[0] != 0)
            throw Error(label(node) + ": index " + std::to_string(found[1]) + " is out of range for " + where);
    }

    void requireIndices(const Node& node, const NdArray& data, const NdArray& indices)
    {
        if (data.dtype() != DType::F32 && data.dtype() != DType::I64)
            throw Error(label(node) + ": data must be f32 or i64");
        if (indices.dtype() != DType::I64)
            throw Error(label(node) + ": the indices must be i64");
    }

    // ---- GatherElements ----

    template <typename T>
    __global__ void elementsKernel(
        const T* data, const std::int64_t* indices, T* out, math::ElementGather g, long long n, std::int64_t* bad)
    {
        PS_FOR_EACH(e, n)
        {
            const long long position = math::checkedPosition(indices[e], g.axisLength);
            if (position < 0) {
                bad[0] = 1;
                bad[1] = indices[e];
                out[e] = T {};
                continue;
            }
            out[e] = data[math::elementGatherOffset(g, e, position)];
        }
    }

    __global__ void elementsGradKernel(
        const float* dy, const std::int64_t* indices, float* dx, math::ElementGather g, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long position = math::checkedPosition(indices[e], g.axisLength);
            if (position >= 0)
                atomicAdd(dx + math::elementGatherOffset(g, e, position), dy[e]);
        }
    }

    void gatherElementsForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& data = v.in[0];
        requireIndices(node, data, v.in[1]);
        const auto g = elementGatherOf(node, data.shape(), v.in[1].shape());
        auto out = NdArray::empty(ctx.allocator, v.in[1].shape(), data.dtype());
        auto bad = NdArray::zeros(ctx.allocator, { 2 }, DType::I64);
        const auto n = out.numel();
        if (n > 0 && data.dtype() == DType::F32)
            elementsKernel<<<blocksFor(n), kThreads>>>(f32(data), i64(v.in[1]), f32(out), g, n, i64(bad));
        else if (n > 0)
            elementsKernel<<<blocksFor(n), kThreads>>>(i64(data), i64(v.in[1]), i64(out), g, n, i64(bad));
        checkLaunch(label(node));
        reportBad(node, bad, "axis " + std::to_string(g.axis) + " of length " + std::to_string(g.axisLength));
        v.out = { out };
    }

    void gatherElementsBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (!g.needGrad[0])
            return;
        if (v.in[0].dtype() != DType::F32)
            throw Error(label(node) + ": integer data has no gradient");
        const auto plan = elementGatherOf(node, v.in[0].shape(), v.in[1].shape());
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        const auto n = v.in[1].numel();
        if (n > 0 && g.gradOut[0].defined())
            elementsGradKernel<<<blocksFor(n), kThreads>>>(f32(g.gradOut[0]), i64(v.in[1]), f32(dx), plan, n);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

    // ---- GatherND: output element e = row * inner + k reads data[slice(row) * inner + k] ----

    template <typename T>
    __global__ void ndKernel(const T* data, const std::int64_t* indices, T* out, math::NdGather g, long long inner,
        long long n, std::int64_t* bad)
    {
        PS_FOR_EACH(e, n)
        {
            const long long row = e / inner;
            int axis = 0;
            const std::int64_t* tuple = indices + row * g.depth;
            const long long slice = math::ndGatherSlice(g, row, tuple, &axis);
            if (slice < 0) {
                bad[0] = 1;
                bad[1] = tuple[axis];
                out[e] = T {};
                continue;
            }
            out[e] = data[slice * inner + e % inner];
        }
    }

    __global__ void ndGradKernel(
        const float* dy, const std::int64_t* indices, float* dx, math::NdGather g, long long inner, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long row = e / inner;
            int axis = 0;
            const long long slice = math::ndGatherSlice(g, row, indices + row * g.depth, &axis);
            if (slice >= 0)
                atomicAdd(dx + slice * inner + e % inner, dy[e]);
        }
    }

    void gatherNDForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& data = v.in[0];
        requireIndices(node, data, v.in[1]);
        const auto plan = ndGatherOf(node, data.shape(), v.in[1].shape());
        auto out = NdArray::empty(ctx.allocator, plan.out, data.dtype());
        auto bad = NdArray::zeros(ctx.allocator, { 2 }, DType::I64);
        const auto n = out.numel();
        if (n > 0 && data.dtype() == DType::F32)
            ndKernel<<<blocksFor(n), kThreads>>>(
                f32(data), i64(v.in[1]), f32(out), plan.gather, plan.inner, n, i64(bad));
        else if (n > 0)
            ndKernel<<<blocksFor(n), kThreads>>>(
                i64(data), i64(v.in[1]), i64(out), plan.gather, plan.inner, n, i64(bad));
        checkLaunch(label(node));
        reportBad(node, bad, "the data's indexed axes " + formatShape(data.shape()));
        v.out = { out };
    }

    void gatherNDBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (!g.needGrad[0])
            return;
        if (v.in[0].dtype() != DType::F32)
            throw Error(label(node) + ": integer data has no gradient");
        const auto plan = ndGatherOf(node, v.in[0].shape(), v.in[1].shape());
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        const auto n = plan.rows * plan.inner;
        if (n > 0 && g.gradOut[0].defined())
            ndGradKernel<<<blocksFor(n), kThreads>>>(
                f32(g.gradOut[0]), i64(v.in[1]), f32(dx), plan.gather, plan.inner, n);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

} // namespace

void registerCudaGatherKernels(KernelTable& table)
{
    table.add(OpType::GatherElements, { gatherElementsForward, gatherElementsBackward });
    table.add(OpType::GatherND, { gatherNDForward, gatherNDBackward });
}

} // namespace ps::engine::cuda
