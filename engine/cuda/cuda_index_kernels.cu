// CUDA kernels of Gather (f32 or i64 data, i64 indices, negative ones from the end), Where
// (broadcasting condition ? a : b), Cast (between f32 and the integer types, kept as i64) and Resize
// (the last two dims, nearest or linear), with the CPU's semantics: the casts are kernel_math.h's
// and Resize's taps and value conv_geometry.h's and conv_math.h's, which the CPU kernels call.
// Gather's and Resize's backwards add with atomics (indices and taps repeat); an index out of
// range is reported naming the node.
#include "conv_geometry.h"
#include "cuda/cuda_common.cuh"
#include "graph/shape_inference.h"
#include "kernel_math.h"
#include "op_rules.h"

namespace ps::engine::cuda {
namespace {

    // ---- Gather: data viewed as (outer, length, inner), indices (count) -> (outer, count, inner) ----

    struct GatherShape
    {
        long long outer = 1, length = 1, inner = 1, count = 0;
        Shape out;
    };

    GatherShape gatherShape(const Node& node, const NdArray& data, const NdArray& indices)
    {
        if (data.dtype() != DType::F32 && data.dtype() != DType::I64)
            throw Error(label(node) + ": data must be f32 or i64");
        if (indices.dtype() != DType::I64)
            throw Error(label(node) + ": the indices must be i64");
        const auto& ds = data.shape();
        if (ds.empty())
            throw Error(label(node) + ": cannot gather from a scalar");
        const auto rank = static_cast<std::int64_t>(ds.size());
        auto axis = node.intAttr("axis", 0);
        if (axis < -rank || axis >= rank)
            throw Error(label(node) + ": axis " + std::to_string(axis) + " is out of range for a rank "
                + std::to_string(rank) + " input");
        const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
        GatherShape g;
        for (std::size_t i = 0; i < a; ++i)
            g.outer *= ds[i];
        g.length = ds[a];
        for (std::size_t i = a + 1; i < ds.size(); ++i)
            g.inner *= ds[i];
        g.count = indices.numel();
        g.out.assign(ds.begin(), ds.begin() + static_cast<std::ptrdiff_t>(a));
        g.out.insert(g.out.end(), indices.shape().begin(), indices.shape().end());
        g.out.insert(g.out.end(), ds.begin() + static_cast<std::ptrdiff_t>(a) + 1, ds.end());
        return g;
    }

    __device__ long long positionOf(long long raw, long long length)
    {
        return raw < 0 ? raw + length : raw;
    }

    template <typename T>
    __global__ void gatherKernel(const T* data, const std::int64_t* indices, T* out, long long outer, long long length,
        long long inner, long long count, std::int64_t* bad)
    {
        PS_FOR_EACH(e, outer * count * inner)
        {
            const long long k = e % inner;
            const long long j = (e / inner) % count;
            const long long o = e / (inner * count);
            const long long at = positionOf(indices[j], length);
            if (at < 0 || at >= length) {
                bad[0] = 1;
                bad[1] = indices[j];
                out[e] = T {};
                continue;
            }
            out[e] = data[(o * length + at) * inner + k];
        }
    }

    __global__ void gatherGradKernel(const float* dy, const std::int64_t* indices, float* dx, long long outer,
        long long length, long long inner, long long count)
    {
        PS_FOR_EACH(e, outer * count * inner)
        {
            const long long k = e % inner;
            const long long j = (e / inner) % count;
            const long long o = e / (inner * count);
            atomicAdd(dx + (o * length + positionOf(indices[j], length)) * inner + k, dy[e]);
        }
    }

    void gatherForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& data = v.in[0];
        const auto g = gatherShape(node, data, v.in[1]);
        auto out = NdArray::empty(ctx.allocator, g.out, data.dtype());
        auto bad = NdArray::zeros(ctx.allocator, { 2 }, DType::I64);
        const auto n = out.numel();
        if (n > 0 && data.dtype() == DType::F32)
            gatherKernel<<<blocksFor(n), kThreads>>>(
                f32(data), i64(v.in[1]), f32(out), g.outer, g.length, g.inner, g.count, i64(bad));
        else if (n > 0)
            gatherKernel<<<blocksFor(n), kThreads>>>(
                i64(data), i64(v.in[1]), i64(out), g.outer, g.length, g.inner, g.count, i64(bad));
        checkLaunch(label(node));
        std::int64_t found[2] = { 0, 0 };
        bad.memory().copy(reinterpret_cast<std::byte*>(found), bad.data(), sizeof found);
        if (found[0] != 0)
            throw Error(label(node) + ": index " + std::to_string(found[1]) + " is out of range for an axis of length "
                + std::to_string(g.length));
        v.out = { out };
    }

    void gatherBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (!g.needGrad[0])
            return;
        const auto& data = v.in[0];
        if (data.dtype() != DType::F32)
            throw Error(label(node) + ": data with a gradient must be f32");
        const auto s = gatherShape(node, data, v.in[1]);
        auto dx = NdArray::zeros(ctx.allocator, data.shape());
        const auto n = s.outer * s.count * s.inner;
        if (n > 0)
            gatherGradKernel<<<blocksFor(n), kThreads>>>(
                f32(g.gradOut[0]), i64(v.in[1]), f32(dx), s.outer, s.length, s.inner, s.count);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

    // ---- Where: condition (f32 or i64, nonzero is true) ? a : b, all three broadcast ----

    template <typename C, typename T>
    __global__ void whereKernel(
        const C* cond, const T* a, const T* b, T* out, Dims shape, Dims sc, Dims sa, Dims sb, long long n)
    {
        PS_FOR_EACH(i, n)
        out[i] = cond[offsetOf(i, shape, sc)] != C {} ? a[offsetOf(i, shape, sa)] : b[offsetOf(i, shape, sb)];
    }

    // dy where the condition is `side`, 0 elsewhere (over the broadcast shape).
    template <typename C>
    __global__ void routeKernel(const C* cond, const float* dy, float* out, Dims shape, Dims sc, bool side, long long n)
    {
        PS_FOR_EACH(i, n)
        out[i] = (cond[offsetOf(i, shape, sc)] != C {}) == side ? dy[i] : 0.0F;
    }

    Shape whereShape(const Node& node, const NodeValues& v)
    {
        try {
            return broadcastShapes(broadcastShapes(v.in[0].shape(), v.in[1].shape()), v.in[2].shape());
        } catch (const Error& e) {
            throw Error(label(node) + ": " + e.what());
        }
    }

    void whereForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& cond = v.in[0];
        const auto& a = v.in[1];
        const auto& b = v.in[2];
        if (a.dtype() != b.dtype() || (a.dtype() != DType::F32 && a.dtype() != DType::I64))
            throw Error(label(node) + ": a and b must both be f32 or both i64");
        if (cond.dtype() != DType::F32 && cond.dtype() != DType::I64)
            throw Error(label(node) + ": the condition must be f32 or i64");
        const auto shape = whereShape(node, v);
        auto out = NdArray::empty(ctx.allocator, shape, a.dtype());
        const auto n = out.numel();
        const auto d = dimsOf(shape);
        const auto sc = stridesOver(cond.shape(), shape);
        const auto sa = stridesOver(a.shape(), shape);
        const auto sb = stridesOver(b.shape(), shape);
        const bool floatCond = cond.dtype() == DType::F32;
        if (n > 0 && a.dtype() == DType::F32 && floatCond)
            whereKernel<<<blocksFor(n), kThreads>>>(f32(cond), f32(a), f32(b), f32(out), d, sc, sa, sb, n);
        else if (n > 0 && a.dtype() == DType::F32)
            whereKernel<<<blocksFor(n), kThreads>>>(i64(cond), f32(a), f32(b), f32(out), d, sc, sa, sb, n);
        else if (n > 0 && floatCond)
            whereKernel<<<blocksFor(n), kThreads>>>(f32(cond), i64(a), i64(b), i64(out), d, sc, sa, sb, n);
        else if (n > 0)
            whereKernel<<<blocksFor(n), kThreads>>>(i64(cond), i64(a), i64(b), i64(out), d, sc, sa, sb, n);
        checkLaunch(label(node));
        v.out = { out };
    }

    void whereBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator); // keeps the condition; a and b only size their gradients
        const auto& cond = v.in[0];
        const auto shape = whereShape(node, v);
        const auto d = dimsOf(shape);
        const auto sc = stridesOver(cond.shape(), shape);
        const auto n = numElements(shape);
        for (std::size_t i = 1; i < 3; ++i) {
            if (!g.needGrad[i])
                continue;
            auto routed = NdArray::empty(ctx.allocator, shape);
            const bool side = i == 1;
            if (n > 0 && cond.dtype() == DType::F32)
                routeKernel<<<blocksFor(n), kThreads>>>(f32(cond), f32(g.gradOut[0]), f32(routed), d, sc, side, n);
            else if (n > 0)
                routeKernel<<<blocksFor(n), kThreads>>>(i64(cond), f32(g.gradOut[0]), f32(routed), d, sc, side, n);
            checkLaunch(label(node));
            g.gradIn[i] = reduceTo(routed, v.in[i].shape(), ctx.allocator);
        }
    }

    // ---- Cast ----

    __global__ void floatToIntegerKernel(const float* x, std::int64_t* y, math::IntegerType to, long long n)
    {
        PS_FOR_EACH(i, n)
        y[i] = math::floatToInteger(x[i], to);
    }
    __global__ void integerToIntegerKernel(const std::int64_t* x, std::int64_t* y, math::IntegerType to, long long n)
    {
        PS_FOR_EACH(i, n)
        y[i] = math::narrowInteger(x[i], to);
    }
    __global__ void integerToFloatKernel(const std::int64_t* x, float* y, long long n)
    {
        PS_FOR_EACH(i, n)
        y[i] = static_cast<float>(x[i]);
    }

    void castForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        if (x.dtype() != DType::F32 && x.dtype() != DType::I64)
            throw Error(label(node) + ": the CUDA backend casts f32 and i64 values");
        const auto to = castTarget(node).integer;
        const auto n = x.numel();
        if (!to && x.dtype() == DType::F32) { // float to float: the values as they are
            v.out = { broadcastTo(x, x.shape(), 1.0F, ctx.allocator) };
            return;
        }
        auto out = NdArray::empty(ctx.allocator, x.shape(), to ? DType::I64 : DType::F32);
        if (n > 0 && !to)
            integerToFloatKernel<<<blocksFor(n), kThreads>>>(i64(x), f32(out), n);
        else if (n > 0 && x.dtype() == DType::F32)
            floatToIntegerKernel<<<blocksFor(n), kThreads>>>(f32(x), i64(out), *to, n);
        else if (n > 0)
            integerToIntegerKernel<<<blocksFor(n), kThreads>>>(i64(x), i64(out), *to, n);
        checkLaunch(label(node));
        v.out = { out };
    }

    void castBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps nothing
    {
        useDevice(ctx.allocator);
        // Float to float passes the gradient; a cast to or from integers has none.
        if (g.needGrad[0] && !castTarget(node).integer && v.in[0].dtype() == DType::F32)
            g.gradIn[0] = g.gradOut[0].defined() ? g.gradOut[0] : NdArray::zeros(ctx.allocator, v.in[0].shape());
    }

    // ---- Resize (engine/conv_geometry.h's taps, computed on the host as for the CPU) ----

    __global__ void resizeKernel(const float* x, float* y, const math::ResizeTap* rows, const math::ResizeTap* cols,
        long long h, long long w, long long oh, long long ow, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long c = e % ow;
            const long long r = (e / ow) % oh;
            const long long plane = e / (ow * oh);
            y[e] = math::resizeValue(x + plane * h * w, w, rows[r], cols[c]);
        }
    }

    // Each output's gradient back to its four taps (outputs share taps: atomics).
    __global__ void resizeGradKernel(const float* dy, float* dx, const math::ResizeTap* rows,
        const math::ResizeTap* cols, long long h, long long w, long long oh, long long ow, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const auto& cc = cols[e % ow];
            const auto& rr = rows[(e / ow) % oh];
            float* plane = dx + (e / (ow * oh)) * h * w;
            const float g = dy[e];
            atomicAdd(plane + rr.i0 * w + cc.i0, rr.w0 * cc.w0 * g);
            atomicAdd(plane + rr.i0 * w + cc.i1, rr.w0 * cc.w1 * g);
            atomicAdd(plane + rr.i1 * w + cc.i0, rr.w1 * cc.w0 * g);
            atomicAdd(plane + rr.i1 * w + cc.i1, rr.w1 * cc.w1 * g);
        }
    }

    // The taps on the device (a few hundred bytes per call).
    NdArray uploadTaps(const std::vector<math::ResizeTap>& taps, Allocator& allocator)
    {
        const auto bytes = static_cast<std::int64_t>(taps.size() * sizeof(math::ResizeTap));
        auto a = NdArray::empty(allocator, { bytes }, DType::U8);
        a.memory().copy(a.data(), reinterpret_cast<const std::byte*>(taps.data()), static_cast<std::size_t>(bytes));
        return a;
    }

    const math::ResizeTap* taps(const NdArray& a)
    {
        return reinterpret_cast<const math::ResizeTap*>(u8(a));
    }

    void resizeForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        if (x.dtype() != DType::F32)
            throw Error(label(node) + ": the CUDA backend runs it on f32 values");
        const auto g = resizeGeometry(node, x.shape());
        const auto rows = uploadTaps(g.rows, ctx.allocator);
        const auto cols = uploadTaps(g.cols, ctx.allocator);
        auto out = NdArray::empty(ctx.allocator, g.out);
        const auto n = out.numel();
        const auto oh = static_cast<long long>(g.rows.size());
        const auto ow = static_cast<long long>(g.cols.size());
        if (n > 0)
            resizeKernel<<<blocksFor(n), kThreads>>>(f32(x), f32(out), taps(rows), taps(cols), g.h, g.w, oh, ow, n);
        checkLaunch(label(node));
        v.out = { out };
    }

    void resizeBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (!g.needGrad[0])
            return;
        const auto& x = v.in[0];
        const auto geo = resizeGeometry(node, x.shape());
        const auto rows = uploadTaps(geo.rows, ctx.allocator);
        const auto cols = uploadTaps(geo.cols, ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        const auto n = numElements(geo.out);
        const auto oh = static_cast<long long>(geo.rows.size());
        const auto ow = static_cast<long long>(geo.cols.size());
        if (n > 0)
            resizeGradKernel<<<blocksFor(n), kThreads>>>(
                f32(g.gradOut[0]), f32(dx), taps(rows), taps(cols), geo.h, geo.w, oh, ow, n);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

} // namespace

void registerCudaIndexKernels(KernelTable& table)
{
    table.add(OpType::Gather, { gatherForward, gatherBackward });
    table.add(OpType::Where, { whereForward, whereBackward });
    table.add(OpType::Cast, { castForward, castBackward });
    table.add(OpType::Resize, { resizeForward, resizeBackward });
}

} // namespace ps::engine::cuda
