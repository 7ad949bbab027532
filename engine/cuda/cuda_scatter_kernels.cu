// CUDA kernels of ScatterND (reduction none) and ScatterElements (torch's scatter, or scatter_add
// with attr add), f32 or i64 data and i64 indices, negative ones from the end, with the CPU's
// semantics: shapes and checks are op_rules.h's and the index math gather_math.h's, which the CPU
// kernels call. Where indices repeat, the last update wins as on the CPU, on every run: each slot's
// writer is found first (the largest update index, by atomicMax), then only it writes. Adds use
// atomics. An index out of range is reported naming the node.
#include "cuda/cuda_common.cuh"
#include "gather_math.h"
#include "op_rules.h"

#include <cuda_runtime.h>

namespace ps::engine::cuda {
namespace {

    // An i64 array as long long, the type CUDA's 64-bit atomicMax takes.
    long long* ll(NdArray& a)
    {
        return reinterpret_cast<long long*>(a.data());
    }
    const long long* ll(const NdArray& a)
    {
        return reinterpret_cast<const long long*>(a.data());
    }

    std::int64_t elementBytes(const Node& node, const NdArray& a)
    {
        if (a.dtype() != DType::F32 && a.dtype() != DType::I64)
            throw Error(label(node) + ": data must be f32 or i64");
        return a.dtype() == DType::F32 ? 4 : 8;
    }

    // A device copy of `a` (same shape and type).
    NdArray copyOf(const NdArray& a, Allocator& allocator)
    {
        auto out = NdArray::empty(allocator, a.shape(), a.dtype());
        if (a.numel() > 0)
            check(
                cudaMemcpy(out.data(), a.data(),
                    static_cast<std::size_t>(a.numel()) * (a.dtype() == DType::I64 ? 8 : 4), cudaMemcpyDeviceToDevice),
                "cuda scatter copy");
        return out;
    }

    // bad[0] = 1 and bad[1] = the raw index when one is out of range.
    void reportBad(const Node& node, NdArray& bad, const std::string& where)
    {
        std::int64_t found[2] = { 0, 0 };
        bad.memory().copy(reinterpret_cast<std::byte*>(found), bad.data(), sizeof found);
        if (found[0] != 0)
            throw Error(label(node) + ": index " + std::to_string(found[1]) + " is out of range for " + where);
    }

    // Each update's target (a slot for ScatterND, an element for ScatterElements), -1 when out of
    // range, and each target's writer: the largest update index aimed at it.
    __global__ void markWriterKernel(const long long* target, long long* writer, long long n)
    {
        PS_FOR_EACH(u, n)
        {
            if (target[u] >= 0)
                atomicMax(writer + target[u], u);
        }
    }

    __global__ void fillKernel(long long* a, long long value, long long n)
    {
        PS_FOR_EACH(i, n)
        a[i] = value;
    }

    // The writer of every target (-1: none) from the targets of `updates` updates.
    NdArray writersOf(const NdArray& targets, long long count, Allocator& allocator)
    {
        auto writer = NdArray::empty(allocator, { count }, DType::I64);
        if (count > 0)
            fillKernel<<<blocksFor(count), kThreads>>>(ll(writer), -1, count);
        if (targets.numel() > 0)
            markWriterKernel<<<blocksFor(targets.numel()), kThreads>>>(ll(targets), ll(writer), targets.numel());
        checkLaunch("cuda scatter writers");
        return writer;
    }

    // ---- ScatterND: update row r (inner elements) goes to slot[r] ----

    __global__ void slotKernel(
        const std::int64_t* indices, long long* slot, math::NdGather g, long long rows, std::int64_t* bad)
    {
        PS_FOR_EACH(r, rows)
        {
            int axis = 0;
            const std::int64_t* tuple = indices + r * g.depth;
            slot[r] = math::ndGatherSlice(g, r, tuple, &axis);
            if (slot[r] < 0) {
                bad[0] = 1;
                bad[1] = tuple[axis];
            }
        }
    }

    // Moves row elements: mode 0 writes updates into out (the slot's writer only), 1 zeroes dx at
    // every written slot, 2 reads du from dy at the slot (the writer only, 0 elsewhere).
    template <typename T>
    __global__ void slotRowsKernel(
        int mode, const long long* slot, const long long* writer, const T* src, T* dst, long long inner, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long r = e / inner;
            const long long at = slot[r] * inner + e % inner;
            const bool wins = writer[slot[r]] == r;
            if (mode == 0 && wins)
                dst[at] = src[e];
            else if (mode == 1)
                dst[at] = T {};
            else if (mode == 2)
                dst[e] = wins ? src[at] : T {};
        }
    }

    struct Slots
    {
        ScatterNdPlan plan;
        NdArray slot, writer;
    };

    Slots slotsOf(const Node& node, const NodeValues& v, Allocator& allocator)
    {
        if (v.in.size() != 3)
            throw Error(label(node) + ": needs data, indices and updates");
        const auto& data = v.in[0];
        elementBytes(node, data);
        if (v.in[1].dtype() != DType::I64)
            throw Error(label(node) + ": the indices must be i64");
        if (v.in[2].dtype() != data.dtype())
            throw Error(label(node) + ": updates must have the data's dtype");
        Slots s { scatterNdOf(node, data.shape(), v.in[1].shape(), v.in[2].shape()), {}, {} };
        s.slot = NdArray::empty(allocator, { s.plan.rows }, DType::I64);
        auto bad = NdArray::zeros(allocator, { 2 }, DType::I64);
        if (s.plan.rows > 0)
            slotKernel<<<blocksFor(s.plan.rows), kThreads>>>(
                i64(v.in[1]), ll(s.slot), s.plan.gather, s.plan.rows, i64(bad));
        checkLaunch(label(node));
        reportBad(node, bad, "the data's indexed axes " + formatShape(data.shape()));
        s.writer = writersOf(s.slot, s.plan.gather.slicesPerBatch, allocator); // inner may be 0
        return s;
    }

    template <typename T> void launchRows(int mode, const Slots& s, const T* src, T* dst)
    {
        const auto n = s.plan.rows * s.plan.inner;
        if (n > 0)
            slotRowsKernel<<<blocksFor(n), kThreads>>>(mode, ll(s.slot), ll(s.writer), src, dst, s.plan.inner, n);
    }

    void scatterNDForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto s = slotsOf(node, v, ctx.allocator);
        auto out = copyOf(v.in[0], ctx.allocator);
        if (out.dtype() == DType::F32)
            launchRows(0, s, f32(v.in[2]), f32(out));
        else
            launchRows(0, s, i64(v.in[2]), i64(out));
        checkLaunch(label(node));
        v.out = { out };
    }

    void scatterNDBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const bool updates = g.needGrad.size() > 2 && g.needGrad[2];
        if (!g.needGrad[0] && !updates)
            return;
        requireF32(node, v.in[0]);
        const auto s = slotsOf(node, v, ctx.allocator);
        const auto dy = g.gradOut[0].defined() ? g.gradOut[0] : NdArray::zeros(ctx.allocator, v.in[0].shape());
        if (g.needGrad[0]) {
            auto dx = copyOf(dy, ctx.allocator);
            launchRows(1, s, f32(dy), f32(dx));
            g.gradIn[0] = dx;
        }
        if (updates) {
            auto du = NdArray::empty(ctx.allocator, v.in[2].shape());
            launchRows(2, s, f32(dy), f32(du));
            g.gradIn[2] = du;
        }
        checkLaunch(label(node));
    }

    // ---- ScatterElements: update e goes to GatherElements' offset of e ----

    __global__ void offsetKernel(
        const std::int64_t* indices, long long* offset, math::ElementGather g, long long n, std::int64_t* bad)
    {
        PS_FOR_EACH(e, n)
        {
            const long long position = math::checkedPosition(indices[e], g.axisLength);
            offset[e] = position < 0 ? -1 : math::elementGatherOffset(g, e, position);
            if (position < 0) {
                bad[0] = 1;
                bad[1] = indices[e];
            }
        }
    }

    // Mode 0 writes (the writer only), 1 adds, 2 zeroes dx at every target, 3 reads du from dy.
    template <typename T>
    __global__ void elementMoveKernel(
        int mode, const long long* offset, const long long* writer, const T* src, T* dst, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long at = offset[e];
            if (mode == 0 && writer[at] == e)
                dst[at] = src[e];
            else if (mode == 1)
                atomicAdd(reinterpret_cast<float*>(dst) + at, static_cast<float>(src[e]));
            else if (mode == 2)
                dst[at] = T {};
            else if (mode == 3)
                dst[e] = src[at];
        }
    }

    struct Targets
    {
        NdArray offset, writer;
    };

    Targets targetsOf(const Node& node, const NodeValues& v, bool writers, Allocator& allocator)
    {
        const auto& data = v.in[0];
        elementBytes(node, data);
        if (v.in[1].dtype() != DType::I64)
            throw Error(label(node) + ": the indices must be i64");
        const auto g = elementGatherOf(node, data.shape(), v.in[1].shape());
        const auto n = v.in[1].numel();
        Targets t { NdArray::empty(allocator, { n }, DType::I64), {} };
        auto bad = NdArray::zeros(allocator, { 2 }, DType::I64);
        if (n > 0)
            offsetKernel<<<blocksFor(n), kThreads>>>(i64(v.in[1]), ll(t.offset), g, n, i64(bad));
        checkLaunch(label(node));
        reportBad(node, bad, "axis " + std::to_string(g.axis) + " of length " + std::to_string(g.axisLength));
        if (writers)
            t.writer = writersOf(t.offset, data.numel(), allocator);
        return t;
    }

    template <typename T> void launchMove(int mode, const Targets& t, const T* src, T* dst)
    {
        const auto n = t.offset.numel();
        const auto* writer = t.writer.defined() ? ll(t.writer) : nullptr;
        if (n > 0)
            elementMoveKernel<<<blocksFor(n), kThreads>>>(mode, ll(t.offset), writer, src, dst, n);
    }

    void scatterElementsForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& data = v.in[0];
        if (v.in[2].dtype() != data.dtype())
            throw Error(label(node) + ": updates must have the data's type");
        const bool add = node.intAttr("add", 0) != 0;
        if (add && data.dtype() != DType::F32)
            throw Error(label(node) + ": adds f32 data only");
        const auto t = targetsOf(node, v, !add, ctx.allocator);
        auto out = copyOf(data, ctx.allocator);
        if (data.dtype() == DType::F32)
            launchMove(add ? 1 : 0, t, f32(v.in[2]), f32(out));
        else
            launchMove(0, t, i64(v.in[2]), i64(out));
        checkLaunch(label(node));
        v.out = { out };
    }

    // d data: dy where nothing was written over it (all of it when adding); d updates: dy read at
    // the indices.
    void scatterElementsBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (!g.needGrad[0] && !g.needGrad[2])
            return;
        requireF32(node, v.in[0]);
        const auto t = targetsOf(node, v, false, ctx.allocator);
        const auto dy = g.gradOut[0].defined() ? g.gradOut[0] : NdArray::zeros(ctx.allocator, v.in[0].shape());
        if (g.needGrad[0]) {
            auto dx = copyOf(dy, ctx.allocator);
            if (node.intAttr("add", 0) == 0)
                launchMove(2, t, f32(dy), f32(dx));
            g.gradIn[0] = dx;
        }
        if (g.needGrad[2]) {
            auto du = NdArray::empty(ctx.allocator, v.in[2].shape());
            launchMove(3, t, f32(dy), f32(du));
            g.gradIn[2] = du;
        }
        checkLaunch(label(node));
    }

} // namespace

void registerCudaScatterKernels(KernelTable& table)
{
    table.add(OpType::ScatterND, { scatterNDForward, scatterNDBackward });
    table.add(OpType::ScatterElements, { scatterElementsForward, scatterElementsBackward });
}

} // namespace ps::engine::cuda
