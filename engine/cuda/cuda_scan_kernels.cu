// CUDA kernels of ReduceSum (f32 through the broadcast-gradient column sums, i64 exactly),
// ReduceMax (f32 or i64: the first maximum of each group in row-major order, NaN winning; its flat
// index saved for the backward), CumSum (f32 or i64 along an axis, exclusive and reverse) and TopK
// (f32 values, sorted, equal values lower index first), with the CPU's semantics: the shapes are
// op_rules.h's and the per-element math engine/order_math.h's, which the CPU kernels call. One
// thread walks each reduced group, running sum or top-k line, in the CPU's order.
#include "cuda/cuda_common.cuh"
#include "op_rules.h"
#include "order_math.h"

namespace ps::engine::cuda {
namespace {

    void requireValues(const Node& node, const NdArray& x)
    {
        if (x.dtype() != DType::F32 && x.dtype() != DType::I64)
            throw Error(label(node) + ": the CUDA backend runs it on f32 or i64 values");
    }

    // ---- Reductions: the input's axes split into kept ones (the output's, row-major) and reduced ones ----

    struct Groups
    {
        Dims kept; // sizes of the kept axes, the input's strides along them
        Dims reduced; // the same for the reduced axes
        long long outputs = 1, members = 1;
    };

    Groups groupsOf(const Shape& in, const Shape& kept)
    {
        const auto all = dimsOf(in);
        Groups g;
        for (int i = 0; i < all.rank; ++i) {
            auto& into = kept[static_cast<std::size_t>(i)] == all.size[i] ? g.kept : g.reduced;
            into.size[into.rank] = all.size[i];
            into.stride[into.rank] = all.stride[i];
            ++into.rank;
            (&into == &g.kept ? g.outputs : g.members) *= all.size[i];
        }
        return g;
    }

    // The input offset of member m of group o.
    __device__ long long memberOffset(const Groups& g, long long o, long long m)
    {
        long long offset = 0;
        for (int i = g.kept.rank - 1; i >= 0; --i) {
            offset += (o % g.kept.size[i]) * g.kept.stride[i];
            o /= g.kept.size[i];
        }
        for (int i = g.reduced.rank - 1; i >= 0; --i) {
            offset += (m % g.reduced.size[i]) * g.reduced.stride[i];
            m /= g.reduced.size[i];
        }
        return offset;
    }

    __global__ void sumIntegersKernel(const std::int64_t* x, std::int64_t* out, Groups g)
    {
        PS_FOR_EACH(o, g.outputs)
        {
            std::int64_t sum = 0;
            for (long long m = 0; m < g.members; ++m)
                sum += x[memberOffset(g, o, m)];
            out[o] = sum;
        }
    }

    void reduceSumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireValues(node, x);
        const auto r = reduceShapes(node, x.shape());
        if (x.dtype() == DType::F32) {
            // reduceTo hands back its input where nothing is reduced: the output is a copy then.
            auto sum = r.kept == x.shape() ? broadcastTo(x, x.shape(), 1.0F, ctx.allocator)
                                           : reduceTo(x, r.kept, ctx.allocator);
            v.out = { sum.view(r.out) };
            return;
        }
        const auto g = groupsOf(x.shape(), r.kept);
        auto out = NdArray::empty(ctx.allocator, r.kept, DType::I64);
        if (g.outputs > 0)
            sumIntegersKernel<<<blocksFor(g.outputs), kThreads>>>(i64(x), i64(out), g);
        checkLaunch(label(node));
        v.out = { out.view(r.out) };
    }

    void reduceSumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator); // keeps nothing: dx broadcasts dy back over the reduced axes
        if (!g.needGrad[0])
            return;
        const auto& shape = v.in[0].shape();
        const auto r = reduceShapes(node, shape);
        g.gradIn[0] = g.gradOut[0].defined() ? broadcastTo(g.gradOut[0].view(r.kept), shape, 1.0F, ctx.allocator)
                                             : NdArray::zeros(ctx.allocator, shape);
    }

    template <typename T> __global__ void maxKernel(const T* x, T* out, std::int64_t* arg, Groups g)
    {
        PS_FOR_EACH(o, g.outputs)
        {
            T best {};
            long long at = -1;
            for (long long m = 0; m < g.members; ++m) {
                const long long i = memberOffset(g, o, m);
                if (at < 0 || math::replacesMaximum(x[i], best)) {
                    best = x[i];
                    at = i;
                }
            }
            out[o] = best;
            arg[o] = at;
        }
    }

    __global__ void maxGradKernel(const std::int64_t* arg, const float* dy, float* dx, long long n)
    {
        PS_FOR_EACH(j, n)
        dx[arg[j]] += dy[j]; // each input element is in one group: no two threads meet
    }

    void reduceMaxForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireValues(node, x);
        const auto r = reduceShapes(node, x.shape());
        if (x.numel() == 0 && numElements(r.kept) > 0)
            throw Error(label(node) + ": cannot take the maximum over an empty axis of " + formatShape(x.shape()));
        const auto g = groupsOf(x.shape(), r.kept);
        auto out = NdArray::empty(ctx.allocator, r.kept, x.dtype());
        auto arg = NdArray::empty(ctx.allocator, r.kept, DType::I64);
        if (g.outputs > 0 && x.dtype() == DType::F32)
            maxKernel<<<blocksFor(g.outputs), kThreads>>>(f32(x), f32(out), i64(arg), g);
        else if (g.outputs > 0)
            maxKernel<<<blocksFor(g.outputs), kThreads>>>(i64(x), i64(out), i64(arg), g);
        checkLaunch(label(node));
        v.out = { out.view(r.out) };
        v.saved = { arg };
    }

    void reduceMaxBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator); // keeps the saved indices: dy goes to the first maximum of each group
        if (!g.needGrad[0])
            return;
        const auto& arg = v.saved[0];
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        if (arg.numel() > 0 && g.gradOut[0].defined())
            maxGradKernel<<<blocksFor(arg.numel()), kThreads>>>(i64(arg), f32(g.gradOut[0]), f32(dx), arg.numel());
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

    // ---- CumSum: one thread per line along the axis ----

    template <typename T> __global__ void cumsumKernel(const T* x, T* y, AxisSplit d, bool exclusive, bool reverse)
    {
        PS_FOR_EACH(line, d.outer * d.inner)
        {
            const long long start = (line / d.inner) * d.length * d.inner + line % d.inner;
            math::cumsumLine(x + start, y + start, d.length, d.inner, exclusive, reverse);
        }
    }

    void cumSumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireValues(node, x);
        const auto d = axisSplitOf(node, x.shape(), 0);
        const bool exclusive = node.intAttr("exclusive", 0) != 0;
        const bool reverse = node.intAttr("reverse", 0) != 0;
        auto out = NdArray::empty(ctx.allocator, x.shape(), x.dtype());
        const auto lines = d.outer * d.inner;
        if (lines > 0 && x.dtype() == DType::F32)
            cumsumKernel<<<blocksFor(lines), kThreads>>>(f32(x), f32(out), d, exclusive, reverse);
        else if (lines > 0)
            cumsumKernel<<<blocksFor(lines), kThreads>>>(i64(x), i64(out), d, exclusive, reverse);
        checkLaunch(label(node));
        v.out = { out };
    }

    void cumSumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps nothing: dx is the running sum of dy in the other direction, equally exclusive.
        useDevice(ctx.allocator);
        if (!g.needGrad[0])
            return;
        const auto& shape = v.in[0].shape();
        if (!g.gradOut[0].defined()) {
            g.gradIn[0] = NdArray::zeros(ctx.allocator, shape);
            return;
        }
        const auto d = axisSplitOf(node, shape, 0);
        auto dx = NdArray::empty(ctx.allocator, shape);
        const auto lines = d.outer * d.inner;
        if (lines > 0)
            cumsumKernel<<<blocksFor(lines), kThreads>>>(
                f32(g.gradOut[0]), f32(dx), d, node.intAttr("exclusive", 0) != 0, node.intAttr("reverse", 0) == 0);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

    // ---- TopK: one thread per line keeps its k best in the outputs, by insertion ----

    __global__ void topKKernel(
        const float* x, float* values, std::int64_t* indices, AxisSplit d, long long k, bool largest)
    {
        PS_FOR_EACH(line, d.outer * d.inner)
        {
            const long long o = line / d.inner;
            const long long in = line % d.inner;
            const float* src = x + o * d.length * d.inner + in;
            float* val = values + o * k * d.inner + in;
            std::int64_t* idx = indices + o * k * d.inner + in;
            long long count = 0;
            for (long long i = 0; i < d.length && k > 0; ++i) {
                const float value = src[i * d.inner];
                const bool full = count == k;
                if (full && !math::topKBefore(value, i, val[(k - 1) * d.inner], idx[(k - 1) * d.inner], largest))
                    continue;
                long long j = full ? k - 1 : count++;
                while (j > 0 && math::topKBefore(value, i, val[(j - 1) * d.inner], idx[(j - 1) * d.inner], largest)) {
                    val[j * d.inner] = val[(j - 1) * d.inner];
                    idx[j * d.inner] = idx[(j - 1) * d.inner];
                    --j;
                }
                val[j * d.inner] = value;
                idx[j * d.inner] = i;
            }
        }
    }

    __global__ void topKGradKernel(const std::int64_t* indices, const float* dy, float* dx, AxisSplit d, long long k)
    {
        PS_FOR_EACH(e, d.outer * k * d.inner)
        {
            const long long o = e / (k * d.inner);
            const long long in = e % d.inner;
            dx[(o * d.length + indices[e]) * d.inner + in] += dy[e]; // a line's indices differ: no two threads meet
        }
    }

    // k: the attribute, else ONNX's k input (one i64 on the device, read back).
    std::int64_t topKOf(const Node& node, const NodeValues& v)
    {
        auto k = node.intAttr("k", -1);
        if (k < 0 && v.in.size() > 1 && v.in[1].dtype() == DType::I64 && v.in[1].numel() == 1)
            v.in[1].memory().copy(reinterpret_cast<std::byte*>(&k), v.in[1].data(), sizeof k);
        return k;
    }

    void topKForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireF32(node, x);
        if (x.shape().empty())
            throw Error(label(node) + ": needs an input of rank 1 or more");
        const auto d = axisSplitOf(node, x.shape(), -1);
        const auto k = topKOf(node, v);
        if (k < 0 || k > d.length)
            throw Error(label(node) + ": k " + std::to_string(k) + " is not in [0, " + std::to_string(d.length)
                + "] (axis " + std::to_string(d.axis) + " of " + formatShape(x.shape()) + ")");
        auto shape = x.shape();
        shape[d.axis] = k;
        auto values = NdArray::empty(ctx.allocator, shape);
        auto indices = NdArray::empty(ctx.allocator, shape, DType::I64);
        const auto lines = d.outer * d.inner;
        if (lines > 0 && k > 0)
            topKKernel<<<blocksFor(lines), kThreads>>>(
                f32(x), f32(values), i64(indices), d, k, node.intAttr("largest", 1) != 0);
        checkLaunch(label(node));
        v.out = { values, indices };
        v.saved = { indices };
    }

    void topKBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator); // keeps the saved indices; k is their length along the axis
        if (!g.needGrad[0])
            return;
        const auto& indices = v.saved[0];
        const auto d = axisSplitOf(node, v.in[0].shape(), -1);
        const auto k = indices.shape()[d.axis];
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        const auto n = indices.numel();
        if (n > 0 && g.gradOut[0].defined())
            topKGradKernel<<<blocksFor(n), kThreads>>>(i64(indices), f32(g.gradOut[0]), f32(dx), d, k);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

} // namespace

void registerCudaScanKernels(KernelTable& table)
{
    table.add(OpType::ReduceSum, { reduceSumForward, reduceSumBackward });
    table.add(OpType::ReduceMax, { reduceMaxForward, reduceMaxBackward });
    table.add(OpType::CumSum, { cumSumForward, cumSumBackward });
    table.add(OpType::TopK, { topKForward, topKBackward });
}

} // namespace ps::engine::cuda
