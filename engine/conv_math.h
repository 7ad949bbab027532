// Index math of convolution and pooling (over (N, C, H, W) or (N, C, D, H, W)), batch normalization, Pad and Resize,
// shared by the CPU kernels (engine/cpu/kernels_conv.cpp, kernels_resample.cpp, kernels_index.cpp) and the CUDA kernels
// (engine/cuda/cuda_conv_kernels.cu), so the CPU tests cover what the GPU computes (issue P14's rule). Every backward
// here is a gather (one output element sums what reaches it), so a GPU thread per element writes without atomics and
// the sums come in the same order on both sides.
// The column matrix of a convolution is "wide": (C * kd * kh * kw, images * od * oh * ow), row
// r = (c, kz, ki, kj), column q = (image, z, y, x), so one GEMM per group covers a whole chunk of
// images.
// Depends on: kernel_math.h (PS_HOST_DEVICE) only.
#pragma once

#include "kernel_math.h"

#include <cstdint>

namespace ps::engine::math {

// A sliding window over one (H, W) plane: kernel, strides, leading pads, dilations, the input's
// and the output's sizes; a 3-D convolution's also over depth (kernel kd, stride sd, front pad pf,
// dilation dd, input depth id, output depth od), which a 2-D one leaves at one plane.
struct Window
{
    long long kh, kw, sh, sw, pt, pl, dh, dw;
    long long h, w, oh, ow;
    long long kd = 1, sd = 1, pf = 0, dd = 1, id = 1, od = 1;
};

// ---- Convolution: im2col and its adjoint ----

// Element (r, q) of the wide column matrix of `images` images starting at `x` (C channels each):
// the input tap it reads, or 0 outside the image. Row r = (c, kz, ki, kj), column q = (image, z,
// y, x).
PS_HOST_DEVICE inline float im2colTap(const float* x, long long channels, const Window& w, long long r, long long q)
{
    const long long plane = w.oh * w.ow;
    const long long pixels = w.od * plane;
    const long long image = q / pixels;
    const long long p = q - image * pixels;
    const long long kj = r % w.kw;
    const long long ki = (r / w.kw) % w.kh;
    const long long kz = (r / (w.kw * w.kh)) % w.kd;
    const long long c = r / (w.kw * w.kh * w.kd);
    const long long iz = (p / plane) * w.sd - w.pf + kz * w.dd;
    const long long iy = ((p % plane) / w.ow) * w.sh - w.pt + ki * w.dh;
    const long long ix = (p % w.ow) * w.sw - w.pl + kj * w.dw;
    if (iz < 0 || iz >= w.id || iy < 0 || iy >= w.h || ix < 0 || ix >= w.w)
        return 0.0F;
    return x[(((image * channels + c) * w.id + iz) * w.h + iy) * w.w + ix];
}

// The input gradient at (image, c, iz, iy, ix): the sum of the wide column gradient `dcol` (of
// `columns` columns) over the taps that read that pixel, in (kz, ki, kj) order.
PS_HOST_DEVICE inline float col2imPixel(const float* dcol, long long columns, const Window& w, long long image,
    long long c, long long iz, long long iy, long long ix)
{
    float sum = 0.0F;
    const long long base = image * w.od * w.oh * w.ow;
    for (long long kz = 0; kz < w.kd; ++kz) {
        const long long tz = iz + w.pf - kz * w.dd;
        if (tz < 0 || tz % w.sd != 0 || tz / w.sd >= w.od)
            continue;
        for (long long ki = 0; ki < w.kh; ++ki) {
            const long long ty = iy + w.pt - ki * w.dh;
            if (ty < 0 || ty % w.sh != 0 || ty / w.sh >= w.oh)
                continue;
            for (long long kj = 0; kj < w.kw; ++kj) {
                const long long tx = ix + w.pl - kj * w.dw;
                if (tx < 0 || tx % w.sw != 0 || tx / w.sw >= w.ow)
                    continue;
                const long long r = ((c * w.kd + kz) * w.kh + ki) * w.kw + kj;
                sum += dcol[r * columns + base + ((tz / w.sd) * w.oh + ty / w.sh) * w.ow + tx / w.sw];
            }
        }
    }
    return sum;
}

// ---- Max pooling: the window's maximum and where it is; the gradient gathered by argmax ----
// Over one (H, W) plane, or one (D, H, W) volume of a 3-D pool (a 2-D window has one plane).

struct MaxTap
{
    float value;
    long long at; // (z * h + y) * w + x in the volume, -1 for a window with no input tap
};

PS_HOST_DEVICE inline MaxTap maxPoolWindow(const float* volume, const Window& w, long long z, long long y, long long x)
{
    MaxTap best { -INFINITY, -1 };
    for (long long kz = 0; kz < w.kd; ++kz) {
        const long long iz = z * w.sd - w.pf + kz * w.dd;
        if (iz < 0 || iz >= w.id)
            continue;
        for (long long ki = 0; ki < w.kh; ++ki) {
            const long long iy = y * w.sh - w.pt + ki * w.dh;
            if (iy < 0 || iy >= w.h)
                continue;
            for (long long kj = 0; kj < w.kw; ++kj) {
                const long long ix = x * w.sw - w.pl + kj * w.dw;
                const long long at = (iz * w.h + iy) * w.w + ix;
                if (ix >= 0 && ix < w.w && volume[at] > best.value) {
                    best.value = volume[at];
                    best.at = at;
                }
            }
        }
    }
    return best;
}

// First and one-past-last output index along one dim whose window can reach input `i`.
PS_HOST_DEVICE inline void windowsReaching(long long i, long long pad, long long k, long long stride,
    long long dilation, long long out, long long& lo, long long& hi)
{
    const long long first = i + pad - dilation * (k - 1); // the window starting here reaches i with its last tap
    lo = first <= 0 ? 0 : (first + stride - 1) / stride;
    hi = (i + pad) / stride + 1;
    if (hi > out)
        hi = out;
}

// dx at (iz, iy, ix) of one volume: the output gradients of the windows whose maximum was this pixel.
PS_HOST_DEVICE inline float maxPoolGradPixel(
    const float* dyVolume, const std::int64_t* argmaxVolume, const Window& w, long long iz, long long iy, long long ix)
{
    long long z0 = 0, z1 = 0, y0 = 0, y1 = 0, x0 = 0, x1 = 0;
    windowsReaching(iz, w.pf, w.kd, w.sd, w.dd, w.od, z0, z1);
    windowsReaching(iy, w.pt, w.kh, w.sh, w.dh, w.oh, y0, y1);
    windowsReaching(ix, w.pl, w.kw, w.sw, w.dw, w.ow, x0, x1);
    const long long at = (iz * w.h + iy) * w.w + ix;
    float sum = 0.0F;
    for (long long z = z0; z < z1; ++z) {
        for (long long y = y0; y < y1; ++y) {
            for (long long x = x0; x < x1; ++x) {
                const long long o = (z * w.oh + y) * w.ow + x;
                if (argmaxVolume[o] == at)
                    sum += dyVolume[o];
            }
        }
    }
    return sum;
}

// ---- Average pooling, as torch.nn.functional.avg_pool2d (avg_pool3d with a depth) ----

// One spatial dim: output o averages input [o * stride - padBefore, + kernel), clipped.
struct PoolDim
{
    long long size, kernel, stride, padBefore, padAfter, out;
};

// The depth of a 2-D pool: one plane.
inline constexpr PoolDim kUnitPoolDim { 1, 1, 1, 0, 0, 1 };

// Output o's input range [lo, hi) and its extent clipped to the padded input (the
// count_include_pad divisor).
struct PoolSpan
{
    long long lo, hi, padded;
};

PS_HOST_DEVICE inline PoolSpan poolSpan(const PoolDim& d, long long o)
{
    const long long start = o * d.stride - d.padBefore;
    long long end = start + d.kernel;
    if (end > d.size + d.padAfter)
        end = d.size + d.padAfter;
    return { start < 0 ? 0 : start, end < d.size ? end : d.size, end - start };
}

PS_HOST_DEVICE inline float poolDivisor(bool includePad, const PoolSpan& z, const PoolSpan& y, const PoolSpan& x)
{
    const long long n = includePad ? z.padded * y.padded * x.padded : (z.hi - z.lo) * (y.hi - y.lo) * (x.hi - x.lo);
    return static_cast<float>(n < 1 ? 1 : n);
}

// The average of output (oz, oy, ox) over one volume of d x h x w.
PS_HOST_DEVICE inline float avgPoolValue(const float* volume, const PoolDim& d, const PoolDim& h, const PoolDim& w,
    bool includePad, long long oz, long long oy, long long ox)
{
    const PoolSpan zs = poolSpan(d, oz);
    const PoolSpan ys = poolSpan(h, oy);
    const PoolSpan xs = poolSpan(w, ox);
    float sum = 0.0F;
    for (long long iz = zs.lo; iz < zs.hi; ++iz) {
        for (long long iy = ys.lo; iy < ys.hi; ++iy) {
            for (long long ix = xs.lo; ix < xs.hi; ++ix)
                sum += volume[(iz * h.size + iy) * w.size + ix];
        }
    }
    return sum / poolDivisor(includePad, zs, ys, xs);
}

// dx at (iz, iy, ix) of one volume: each window that averaged this pixel passes its share back.
PS_HOST_DEVICE inline float avgPoolGradPixel(const float* dyVolume, const PoolDim& d, const PoolDim& h,
    const PoolDim& w, bool includePad, long long iz, long long iy, long long ix)
{
    long long z0 = 0, z1 = 0, y0 = 0, y1 = 0, x0 = 0, x1 = 0;
    windowsReaching(iz, d.padBefore, d.kernel, d.stride, 1, d.out, z0, z1);
    windowsReaching(iy, h.padBefore, h.kernel, h.stride, 1, h.out, y0, y1);
    windowsReaching(ix, w.padBefore, w.kernel, w.stride, 1, w.out, x0, x1);
    float sum = 0.0F;
    for (long long oz = z0; oz < z1; ++oz) {
        const PoolSpan zs = poolSpan(d, oz);
        for (long long oy = y0; oy < y1; ++oy) {
            const PoolSpan ys = poolSpan(h, oy);
            for (long long ox = x0; ox < x1; ++ox) {
                const PoolSpan xs = poolSpan(w, ox);
                sum += dyVolume[(oz * h.out + oy) * w.out + ox] / poolDivisor(includePad, zs, ys, xs);
            }
        }
    }
    return sum;
}

// ---- Batch normalization over (N, spatial) per channel ----

// Lane `lane` of `lanes` accumulates, in double, channel `ch`'s sums over its n images, taking
// spatial positions lane, lane + lanes, ... of each image in turn. The CPU runs one lane; the GPU a
// block of lanes whose partials it adds in double (the two agree to double rounding).
struct ChannelSums
{
    double sum, squares;
};

// sum(x) and sum(x^2) of channel `ch`.
PS_HOST_DEVICE inline ChannelSums channelPartial(
    const float* x, long long n, long long channels, long long spatial, long long ch, long long lane, long long lanes)
{
    ChannelSums s { 0.0, 0.0 };
    for (long long i = 0; i < n; ++i) {
        const float* p = x + (i * channels + ch) * spatial;
        for (long long e = lane; e < spatial; e += lanes) {
            const double v = p[e];
            s.sum += v;
            s.squares += v * v;
        }
    }
    return s;
}

// The gradient sums of channel `ch`: sum(dy) and sum(dy * xhat), xhat = (x - mean) * rstd.
PS_HOST_DEVICE inline ChannelSums channelGradPartial(const float* x, const float* dy, long long n, long long channels,
    long long spatial, long long ch, float mean, float rstd, long long lane, long long lanes)
{
    ChannelSums s { 0.0, 0.0 };
    for (long long i = 0; i < n; ++i) {
        const long long base = (i * channels + ch) * spatial;
        for (long long e = lane; e < spatial; e += lanes) {
            s.sum += dy[base + e];
            s.squares += dy[base + e] * (x[base + e] - mean) * rstd;
        }
    }
    return s;
}

// A channel's statistics for normalizing: the batch's mean and 1 / sqrt(var + eps) in training
// (which also moves the running mean and the running unbiased variance by `momentum`, as ONNX:
// running = momentum * running + (1 - momentum) * batch), the running ones otherwise.
struct ChannelStats
{
    float mean, rstd;
};

PS_HOST_DEVICE inline ChannelStats batchNormStats(const ChannelSums& sums, double count, float eps, float momentum,
    bool training, float& runningMean, float& runningVar)
{
    double mu = runningMean;
    double var = runningVar;
    if (training) {
        mu = sums.sum / count;
        var = sums.squares / count - mu * mu;
        if (var < 0.0)
            var = 0.0;
        runningMean = static_cast<float>(momentum * runningMean + (1 - momentum) * mu);
        const double unbiased = count > 1 ? var * count / (count - 1) : var;
        runningVar = static_cast<float>(momentum * runningVar + (1 - momentum) * unbiased);
    }
    return { static_cast<float>(mu), static_cast<float>(1.0 / sqrt(var + eps)) };
}

PS_HOST_DEVICE inline float batchNormValue(float x, float mean, float rstd, float gamma, float beta)
{
    return (x - mean) * rstd * gamma + beta;
}

// dx of one element, from the channel's mean gradient sums (sum(dy) / count, sum(dy xhat) / count).
PS_HOST_DEVICE inline float batchNormGradInput(
    float x, float dy, float mean, float rstd, float gamma, float meanDy, float meanDyXhat)
{
    return gamma * rstd * (dy - meanDy - (x - mean) * rstd * meanDyXhat);
}

// ---- Pad (ONNX modes) ----

enum class PadMode { Constant, Reflect, Edge, Wrap };

// The input position that output position `s - begin` reads along an axis of length n (-1: the
// constant). Reflect mirrors about both ends without repeating the edge (numpy's "reflect").
PS_HOST_DEVICE inline long long padSource(PadMode mode, long long s, long long n)
{
    if (s >= 0 && s < n)
        return s;
    switch (mode) {
    case PadMode::Constant:
        return -1;
    case PadMode::Edge:
        return s < 0 ? 0 : n - 1;
    case PadMode::Wrap:
        return ((s % n) + n) % n;
    case PadMode::Reflect:
        break;
    }
    if (n == 1)
        return 0;
    const long long period = 2 * (n - 1);
    s = ((s % period) + period) % period;
    return s < n ? s : period - s;
}

// ---- Resize: one output position along an axis reads w0 * in[i0] + w1 * in[i1] ----

struct ResizeTap
{
    long long i0, i1;
    float w0, w1;
};

// Output (row r, column c) of a w-wide plane, in torch's order of the products.
PS_HOST_DEVICE inline float resizeValue(const float* plane, long long w, const ResizeTap& r, const ResizeTap& c)
{
    const float* top = plane + r.i0 * w;
    const float* bottom = plane + r.i1 * w;
    return r.w0 * (c.w0 * top[c.i0] + c.w1 * top[c.i1]) + r.w1 * (c.w0 * bottom[c.i0] + c.w1 * bottom[c.i1]);
}

// ---- Global average pooling ----

PS_HOST_DEVICE inline float planeMean(const float* plane, long long area)
{
    double sum = 0.0;
    for (long long s = 0; s < area; ++s)
        sum += plane[s];
    return static_cast<float>(sum / static_cast<double>(area));
}

} // namespace ps::engine::math
