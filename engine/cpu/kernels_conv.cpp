// Convolution (im2col + sgemm, groups), batch normalization, max pooling and global average pooling
// on (N, C, H, W) arrays.
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"

#include <cblas.h>
#include <cmath>
#include <limits>

namespace ps::engine::detail {
namespace {

    struct Window
    {
        std::int64_t kh, kw, sh, sw, pt, pl, dh, dw;
        std::int64_t h, w, oh, ow;
    };

    std::vector<std::int64_t> intsOr(const Node& node, const char* key, std::vector<std::int64_t> fallback)
    {
        auto v = node.intsAttr(key);
        return v.empty() ? fallback : v;
    }

    // Window positions along one dim. ceil_mode (pooling) keeps a last partial window when it starts
    // inside the input or its leading pad (PyTorch's and ONNX's rule); the taps past the input are
    // skipped like padding.
    std::int64_t slideCount(std::int64_t size, std::int64_t padBefore, std::int64_t padAfter, std::int64_t dilation,
        std::int64_t k, std::int64_t stride, bool ceil)
    {
        const auto span = size + padBefore + padAfter - dilation * (k - 1) - 1;
        if (!ceil)
            return span / stride + 1;
        auto out = (span + stride - 1) / stride + 1;
        if ((out - 1) * stride >= size + padBefore)
            --out;
        return out;
    }

    Window windowOf(const Node& node, const Shape& x, std::int64_t kh, std::int64_t kw)
    {
        const auto s = intsOr(node, "strides", { 1, 1 });
        const auto p = intsOr(node, "pads", { 0, 0, 0, 0 });
        const auto d = intsOr(node, "dilations", { 1, 1 });
        const bool ceil = node.intAttr("ceil_mode", 0) != 0;
        Window w { kh, kw, s[0], s[1], p[0], p[1], d[0], d[1], x[2], x[3], 0, 0 };
        w.oh = slideCount(x[2], p[0], p[2], d[0], kh, s[0], ceil);
        w.ow = slideCount(x[3], p[1], p[3], d[1], kw, s[1], ceil);
        return w;
    }

    // col (C * kh * kw, oh * ow) from one image (C, h, w); out-of-image taps are 0.
    void im2col(const float* img, std::int64_t channels, const Window& w, float* col)
    {
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t ki = 0; ki < w.kh; ++ki) {
                for (std::int64_t kj = 0; kj < w.kw; ++kj) {
                    float* row = col + ((c * w.kh + ki) * w.kw + kj) * w.oh * w.ow;
                    for (std::int64_t y = 0; y < w.oh; ++y) {
                        const auto iy = y * w.sh - w.pt + ki * w.dh;
                        for (std::int64_t x = 0; x < w.ow; ++x) {
                            const auto ix = x * w.sw - w.pl + kj * w.dw;
                            row[y * w.ow + x] =
                                iy >= 0 && iy < w.h && ix >= 0 && ix < w.w ? img[(c * w.h + iy) * w.w + ix] : 0.0F;
                        }
                    }
                }
            }
        }
    }

    // The adjoint of im2col: accumulates col back into the image gradient.
    void col2im(const float* col, std::int64_t channels, const Window& w, float* img)
    {
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t ki = 0; ki < w.kh; ++ki) {
                for (std::int64_t kj = 0; kj < w.kw; ++kj) {
                    const float* row = col + ((c * w.kh + ki) * w.kw + kj) * w.oh * w.ow;
                    for (std::int64_t y = 0; y < w.oh; ++y) {
                        const auto iy = y * w.sh - w.pt + ki * w.dh;
                        for (std::int64_t x = 0; x < w.ow; ++x) {
                            const auto ix = x * w.sw - w.pl + kj * w.dw;
                            if (iy >= 0 && iy < w.h && ix >= 0 && ix < w.w)
                                img[(c * w.h + iy) * w.w + ix] += row[y * w.ow + x];
                        }
                    }
                }
            }
        }
    }

    struct ConvDims
    {
        Window w;
        std::int64_t n, cin, cout, group, cinG, coutG, patch, pixels;
    };

    ConvDims convDims(const Node& node, const NdArray& x, const NdArray& weight)
    {
        const auto& ws = weight.shape();
        ConvDims d { windowOf(node, x.shape(), ws[2], ws[3]), x.shape()[0], x.shape()[1], ws[0],
            node.intAttr("group", 1), 0, 0, 0, 0 };
        d.cinG = d.cin / d.group;
        d.coutG = d.cout / d.group;
        d.patch = d.cinG * ws[2] * ws[3];
        d.pixels = d.w.oh * d.w.ow;
        return d;
    }

    void convForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& weight = v.in[1];
        const auto d = convDims(node, x, weight);
        auto out = NdArray::empty(ctx.allocator, { d.n, d.cout, d.w.oh, d.w.ow });
        auto col = NdArray::empty(ctx.allocator, { d.patch, d.pixels });
        for (std::int64_t i = 0; i < d.n; ++i) {
            for (std::int64_t grp = 0; grp < d.group; ++grp) {
                im2col(x.f32() + (i * d.cin + grp * d.cinG) * d.w.h * d.w.w, d.cinG, d.w, col.f32());
                sgemm(false, false, static_cast<int>(d.coutG), static_cast<int>(d.pixels), static_cast<int>(d.patch),
                    1.0F, weight.f32() + grp * d.coutG * d.patch, static_cast<int>(d.patch), col.f32(),
                    static_cast<int>(d.pixels), 0.0F, out.f32() + (i * d.cout + grp * d.coutG) * d.pixels,
                    static_cast<int>(d.pixels));
            }
            if (v.in.size() > 2) {
                for (std::int64_t f = 0; f < d.cout; ++f) {
                    float* o = out.f32() + (i * d.cout + f) * d.pixels;
                    for (std::int64_t p = 0; p < d.pixels; ++p)
                        o[p] += v.in[2].f32()[f];
                }
            }
        }
        v.out = { out };
    }

    void convBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& weight = v.in[1];
        const auto& dy = g.gradOut[0];
        const auto d = convDims(node, x, weight);
        NdArray dx = g.needGrad[0] ? NdArray::zeros(ctx.allocator, x.shape()) : NdArray();
        NdArray dw = g.needGrad[1] ? NdArray::zeros(ctx.allocator, weight.shape()) : NdArray();
        auto col = NdArray::empty(ctx.allocator, { d.patch, d.pixels });
        auto dcol = NdArray::empty(ctx.allocator, { d.patch, d.pixels });
        for (std::int64_t i = 0; i < d.n; ++i) {
            for (std::int64_t grp = 0; grp < d.group; ++grp) {
                const float* dyi = dy.f32() + (i * d.cout + grp * d.coutG) * d.pixels;
                const auto imgOffset = (i * d.cin + grp * d.cinG) * d.w.h * d.w.w;
                if (dw.defined()) { // dW (coutG, patch) += dY (coutG, pixels) col^T
                    im2col(x.f32() + imgOffset, d.cinG, d.w, col.f32());
                    sgemm(false, true, static_cast<int>(d.coutG), static_cast<int>(d.patch), static_cast<int>(d.pixels),
                        1.0F, dyi, static_cast<int>(d.pixels), col.f32(), static_cast<int>(d.pixels), 1.0F,
                        dw.f32() + grp * d.coutG * d.patch, static_cast<int>(d.patch));
                }
                if (dx.defined()) { // dcol (patch, pixels) = W^T dY
                    sgemm(true, false, static_cast<int>(d.patch), static_cast<int>(d.pixels), static_cast<int>(d.coutG),
                        1.0F, weight.f32() + grp * d.coutG * d.patch, static_cast<int>(d.patch), dyi,
                        static_cast<int>(d.pixels), 0.0F, dcol.f32(), static_cast<int>(d.pixels));
                    col2im(dcol.f32(), d.cinG, d.w, dx.f32() + imgOffset);
                }
            }
        }
        g.gradIn[0] = dx;
        g.gradIn[1] = dw;
        if (v.in.size() > 2 && g.needGrad[2]) {
            auto db = NdArray::zeros(ctx.allocator, v.in[2].shape());
            for (std::int64_t i = 0; i < d.n; ++i) {
                for (std::int64_t f = 0; f < d.cout; ++f) {
                    const float* gi = dy.f32() + (i * d.cout + f) * d.pixels;
                    for (std::int64_t p = 0; p < d.pixels; ++p)
                        db.f32()[f] += gi[p];
                }
            }
            g.gradIn[2] = db;
        }
    }

    // ---- BatchNorm over (N, spatial) per channel; training uses batch statistics and updates the
    // running ones (momentum as ONNX: running = momentum * running + (1 - momentum) * batch) ----

    void batchNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto n = x.shape()[0];
        const auto c = x.shape()[1];
        const auto spatial = x.numel() / (n * c);
        const auto eps = static_cast<float>(node.floatAttr("epsilon", 1e-5));
        const auto momentum = static_cast<float>(node.floatAttr("momentum", 0.9));
        auto out = NdArray::empty(ctx.allocator, x.shape());
        auto mean = NdArray::empty(ctx.allocator, { c });
        auto rstd = NdArray::empty(ctx.allocator, { c });
        auto runningMean = v.in[3];
        auto runningVar = v.in[4];
        const auto count = static_cast<double>(n * spatial);
        for (std::int64_t ch = 0; ch < c; ++ch) {
            double mu = runningMean.f32()[ch];
            double var = runningVar.f32()[ch];
            if (ctx.training) {
                double sum = 0;
                double sq = 0;
                for (std::int64_t i = 0; i < n; ++i) {
                    const float* p = x.f32() + (i * c + ch) * spatial;
                    for (std::int64_t s = 0; s < spatial; ++s) {
                        sum += p[s];
                        sq += static_cast<double>(p[s]) * p[s];
                    }
                }
                mu = sum / count;
                var = std::max(0.0, sq / count - mu * mu);
                runningMean.f32()[ch] = static_cast<float>(momentum * runningMean.f32()[ch] + (1 - momentum) * mu);
                const double unbiased = count > 1 ? var * count / (count - 1) : var;
                runningVar.f32()[ch] = static_cast<float>(momentum * runningVar.f32()[ch] + (1 - momentum) * unbiased);
            }
            const auto rs = static_cast<float>(1.0 / std::sqrt(var + eps));
            mean.f32()[ch] = static_cast<float>(mu);
            rstd.f32()[ch] = rs;
            const float gamma = v.in[1].f32()[ch];
            const float beta = v.in[2].f32()[ch];
            for (std::int64_t i = 0; i < n; ++i) {
                const float* p = x.f32() + (i * c + ch) * spatial;
                float* o = out.f32() + (i * c + ch) * spatial;
                for (std::int64_t s = 0; s < spatial; ++s)
                    o[s] = (p[s] - static_cast<float>(mu)) * rs * gamma + beta;
            }
        }
        v.out = { out };
        v.saved = { mean, rstd };
    }

    void batchNormBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto n = x.shape()[0];
        const auto c = x.shape()[1];
        const auto spatial = x.numel() / (n * c);
        const auto count = static_cast<double>(n * spatial);
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        auto dgamma = NdArray::zeros(ctx.allocator, { c });
        auto dbeta = NdArray::zeros(ctx.allocator, { c });
        for (std::int64_t ch = 0; ch < c; ++ch) {
            const float mu = v.saved[0].f32()[ch];
            const float rs = v.saved[1].f32()[ch];
            const float gamma = v.in[1].f32()[ch];
            double sumG = 0;
            double sumGX = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                const float* p = x.f32() + (i * c + ch) * spatial;
                const float* gi = dy.f32() + (i * c + ch) * spatial;
                for (std::int64_t s = 0; s < spatial; ++s) {
                    sumG += gi[s];
                    sumGX += gi[s] * (p[s] - mu) * rs;
                }
            }
            dgamma.f32()[ch] = static_cast<float>(sumGX);
            dbeta.f32()[ch] = static_cast<float>(sumG);
            const auto mg = static_cast<float>(sumG / count);
            const auto mgx = static_cast<float>(sumGX / count);
            for (std::int64_t i = 0; i < n; ++i) {
                const float* p = x.f32() + (i * c + ch) * spatial;
                const float* gi = dy.f32() + (i * c + ch) * spatial;
                float* o = dx.f32() + (i * c + ch) * spatial;
                for (std::int64_t s = 0; s < spatial; ++s)
                    o[s] = gamma * rs * (gi[s] - mg - (p[s] - mu) * rs * mgx);
            }
        }
        if (g.needGrad[0])
            g.gradIn[0] = dx;
        if (g.needGrad[1])
            g.gradIn[1] = dgamma;
        if (g.needGrad[2])
            g.gradIn[2] = dbeta;
    }

    // ---- MaxPool (the argmax of each window saved for backward) and GlobalAvgPool ----

    void maxPoolForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto k = node.intsAttr("kernel");
        const auto w = windowOf(node, x.shape(), k[0], k[1]);
        const auto planes = x.shape()[0] * x.shape()[1];
        auto out = NdArray::empty(ctx.allocator, { x.shape()[0], x.shape()[1], w.oh, w.ow });
        auto argmax = NdArray::empty(ctx.allocator, out.shape(), DType::I64);
        for (std::int64_t pl = 0; pl < planes; ++pl) {
            const float* img = x.f32() + pl * w.h * w.w;
            for (std::int64_t y = 0; y < w.oh; ++y) {
                for (std::int64_t xo = 0; xo < w.ow; ++xo) {
                    float best = -std::numeric_limits<float>::infinity();
                    std::int64_t at = -1;
                    for (std::int64_t ki = 0; ki < w.kh; ++ki) {
                        const auto iy = y * w.sh - w.pt + ki * w.dh;
                        for (std::int64_t kj = 0; kj < w.kw; ++kj) {
                            const auto ix = xo * w.sw - w.pl + kj * w.dw;
                            if (iy >= 0 && iy < w.h && ix >= 0 && ix < w.w && img[iy * w.w + ix] > best) {
                                best = img[iy * w.w + ix];
                                at = iy * w.w + ix;
                            }
                        }
                    }
                    const auto o = (pl * w.oh + y) * w.ow + xo;
                    out.f32()[o] = best;
                    argmax.i64()[o] = at;
                }
            }
        }
        v.out = { out };
        v.saved = { argmax };
    }

    void maxPoolBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        const auto& argmax = v.saved[0];
        const auto planes = x.shape()[0] * x.shape()[1];
        const auto area = x.shape()[2] * x.shape()[3];
        const auto outArea = dy.numel() / planes;
        for (std::int64_t pl = 0; pl < planes; ++pl) {
            for (std::int64_t o = 0; o < outArea; ++o) {
                const auto at = argmax.i64()[pl * outArea + o];
                if (at >= 0)
                    dx.f32()[pl * area + at] += dy.f32()[pl * outArea + o];
            }
        }
        g.gradIn[0] = dx;
    }

    void globalAvgPoolForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto planes = x.shape()[0] * x.shape()[1];
        const auto area = x.shape()[2] * x.shape()[3];
        auto out = NdArray::empty(ctx.allocator, { x.shape()[0], x.shape()[1], 1, 1 });
        for (std::int64_t pl = 0; pl < planes; ++pl) {
            double sum = 0;
            for (std::int64_t s = 0; s < area; ++s)
                sum += x.f32()[pl * area + s];
            out.f32()[pl] = static_cast<float>(sum / static_cast<double>(area));
        }
        v.out = { out };
    }

    void globalAvgPoolBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        const auto planes = x.shape()[0] * x.shape()[1];
        const auto area = x.shape()[2] * x.shape()[3];
        for (std::int64_t pl = 0; pl < planes; ++pl) {
            for (std::int64_t s = 0; s < area; ++s)
                dx.f32()[pl * area + s] = dy.f32()[pl] / static_cast<float>(area);
        }
        g.gradIn[0] = dx;
    }

} // namespace

void registerConvKernels(KernelTable& table)
{
    table.add(OpType::Conv, { convForward, convBackward });
    table.add(OpType::BatchNorm, { batchNormForward, batchNormBackward });
    table.add(OpType::MaxPool, { maxPoolForward, maxPoolBackward });
    table.add(OpType::GlobalAvgPool, { globalAvgPoolForward, globalAvgPoolBackward });
}

} // namespace ps::engine::detail
