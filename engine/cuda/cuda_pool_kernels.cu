// CUDA kernels of the pools: MaxPool (its argmax kept for the backward), AvgPool and
// GlobalAvgPool, forward and backward, on (N, C, H, W) and (N, C, D, H, W) f32 arrays; windows from
// engine/conv_geometry.h and index math from engine/conv_math.h, as on the CPU. The backwards
// gather (one thread per input element): no atomics.
#include "conv_geometry.h"
#include "cuda/cuda_common.cuh"

namespace ps::engine::cuda {
namespace {

    // ---- Pools ----

    __global__ void maxPoolKernel(const float* x, float* out, std::int64_t* argmax, math::Window w, long long total)
    {
        PS_FOR_EACH(o, total)
        {
            const long long area = w.od * w.oh * w.ow;
            const long long volume = o / area;
            const long long p = o % area;
            const auto best =
                math::maxPoolWindow(x + volume * w.id * w.h * w.w, w, p / (w.oh * w.ow), (p / w.ow) % w.oh, p % w.ow);
            out[o] = best.value;
            argmax[o] = best.at;
        }
    }

    __global__ void maxPoolGradKernel(
        const float* dy, const std::int64_t* argmax, float* dx, math::Window w, long long total)
    {
        PS_FOR_EACH(e, total)
        {
            const long long volume = e / (w.id * w.h * w.w);
            const long long p = e % (w.id * w.h * w.w);
            const long long out = volume * w.od * w.oh * w.ow;
            dx[e] = math::maxPoolGradPixel(dy + out, argmax + out, w, p / (w.h * w.w), (p / w.w) % w.h, p % w.w);
        }
    }

    __global__ void avgPoolKernel(const float* x, float* out, AvgPoolGeometry p, long long total)
    {
        PS_FOR_EACH(o, total)
        {
            const long long area = p.d.out * p.h.out * p.w.out;
            const long long volume = o / area;
            const long long at = o % area;
            out[o] = math::avgPoolValue(x + volume * p.d.size * p.h.size * p.w.size, p.d, p.h, p.w, p.includePad,
                at / (p.h.out * p.w.out), (at / p.w.out) % p.h.out, at % p.w.out);
        }
    }

    __global__ void avgPoolGradKernel(const float* dy, float* dx, AvgPoolGeometry p, long long total)
    {
        PS_FOR_EACH(e, total)
        {
            const long long area = p.d.size * p.h.size * p.w.size;
            const long long volume = e / area;
            const long long at = e % area;
            dx[e] = math::avgPoolGradPixel(dy + volume * p.d.out * p.h.out * p.w.out, p.d, p.h, p.w, p.includePad,
                at / (p.h.size * p.w.size), (at / p.w.size) % p.h.size, at % p.w.size);
        }
    }

    __global__ void planeMeanKernel(const float* x, float* out, long long area, long long planes)
    {
        PS_FOR_EACH(pl, planes)
        out[pl] = math::planeMean(x + pl * area, area);
    }

    __global__ void planeSpreadKernel(const float* dy, float* dx, long long area, long long total)
    {
        PS_FOR_EACH(e, total)
        dx[e] = dy[e / area] / static_cast<float>(area);
    }

    // (N, C, [od,] oh, ow), as many spatial axes as x's.
    Shape pooledShape(const Shape& x, std::int64_t od, std::int64_t oh, std::int64_t ow)
    {
        return x.size() == 5 ? Shape { x[0], x[1], od, oh, ow } : Shape { x[0], x[1], oh, ow };
    }

    void maxPoolForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireF32(node, x);
        const auto w = maxPoolWindow(node, x.shape());
        auto out = NdArray::empty(ctx.allocator, pooledShape(x.shape(), w.od, w.oh, w.ow));
        auto argmax = NdArray::empty(ctx.allocator, out.shape(), DType::I64);
        const auto total = out.numel();
        if (total > 0)
            maxPoolKernel<<<blocksFor(total), kThreads>>>(f32(x), f32(out), i64(argmax), w, total);
        checkLaunch(label(node));
        v.out = { out };
        v.saved = { argmax };
    }

    void maxPoolBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto w = maxPoolWindow(node, x.shape());
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        const auto total = dx.numel();
        if (total > 0)
            maxPoolGradKernel<<<blocksFor(total), kThreads>>>(f32(g.gradOut[0]), i64(v.saved[0]), f32(dx), w, total);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

    void avgPoolForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireF32(node, x);
        const auto p = avgPoolGeometry(node, x.shape());
        auto out = NdArray::empty(ctx.allocator, pooledShape(x.shape(), p.d.out, p.h.out, p.w.out));
        const auto total = out.numel();
        if (total > 0)
            avgPoolKernel<<<blocksFor(total), kThreads>>>(f32(x), f32(out), p, total);
        checkLaunch(label(node));
        v.out = { out };
    }

    void avgPoolBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto p = avgPoolGeometry(node, x.shape());
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        const auto total = dx.numel();
        if (total > 0)
            avgPoolGradKernel<<<blocksFor(total), kThreads>>>(f32(g.gradOut[0]), f32(dx), p, total);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

    void globalAvgPoolForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        requireF32(node, x);
        if (x.shape().size() < 3)
            throw Error(
                label(node) + ": needs an (N, C, ...) input with a spatial axis, got " + formatShape(x.shape()));
        const auto planes = x.shape()[0] * x.shape()[1];
        Shape pooled(x.shape().size(), 1); // every spatial axis to one
        pooled[0] = x.shape()[0];
        pooled[1] = x.shape()[1];
        auto out = NdArray::empty(ctx.allocator, pooled);
        if (planes > 0)
            planeMeanKernel<<<blocksFor(planes), kThreads>>>(f32(x), f32(out), x.numel() / planes, planes);
        checkLaunch(label(node));
        v.out = { out };
    }

    void globalAvgPoolBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        const auto total = dx.numel();
        const auto planes = x.shape()[0] * x.shape()[1];
        if (total > 0)
            planeSpreadKernel<<<blocksFor(total), kThreads>>>(f32(g.gradOut[0]), f32(dx), total / planes, total);
        checkLaunch(label(node));
        g.gradIn[0] = dx;
    }

} // namespace

void registerCudaPoolKernels(KernelTable& table)
{
    table.add(OpType::MaxPool, { maxPoolForward, maxPoolBackward });
    table.add(OpType::AvgPool, { avgPoolForward, avgPoolBackward });
    table.add(OpType::GlobalAvgPool, { globalAvgPoolForward, globalAvgPoolBackward });
}

} // namespace ps::engine::cuda
