// The spatial ops on (N, C, H, W) and (N, C, D, H, W) arrays: convolution and its transpose (im2col +
// sgemm, groups), batch normalization, max, average and global average pooling, over the index
// math of engine/conv_math.h that the CUDA kernels share (Pad and Resize: kernels_resample.cpp).
#include "conv_geometry.h"
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>

namespace ps::engine::detail {
namespace {

    using Window = math::Window;

    // col (C * kd * kh * kw, od * oh * ow) from one image (C, [d,] h, w); out-of-image taps are 0.
    void im2col(const float* img, std::int64_t channels, const Window& w, float* col)
    {
        const auto pixels = w.od * w.oh * w.ow;
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t kz = 0; kz < w.kd; ++kz) {
                for (std::int64_t ki = 0; ki < w.kh; ++ki) {
                    for (std::int64_t kj = 0; kj < w.kw; ++kj) {
                        float* row = col + (((c * w.kd + kz) * w.kh + ki) * w.kw + kj) * pixels;
                        for (std::int64_t z = 0; z < w.od; ++z) {
                            const auto iz = z * w.sd - w.pf + kz * w.dd;
                            float* slab = row + z * w.oh * w.ow;
                            if (iz < 0 || iz >= w.id) {
                                std::fill(slab, slab + w.oh * w.ow, 0.0F);
                                continue;
                            }
                            const float* plane = img + (c * w.id + iz) * w.h * w.w;
                            for (std::int64_t y = 0; y < w.oh; ++y) {
                                const auto iy = y * w.sh - w.pt + ki * w.dh;
                                const bool inside = iy >= 0 && iy < w.h;
                                float* out = slab + y * w.ow;
                                for (std::int64_t x = 0; x < w.ow; ++x) {
                                    const auto ix = x * w.sw - w.pl + kj * w.dw;
                                    out[x] = inside && ix >= 0 && ix < w.w ? plane[iy * w.w + ix] : 0.0F;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    // The adjoint of im2col: accumulates col back into the image gradient.
    void col2im(const float* col, std::int64_t channels, const Window& w, float* img)
    {
        const auto pixels = w.od * w.oh * w.ow;
        for (std::int64_t c = 0; c < channels; ++c) {
            for (std::int64_t kz = 0; kz < w.kd; ++kz) {
                for (std::int64_t ki = 0; ki < w.kh; ++ki) {
                    for (std::int64_t kj = 0; kj < w.kw; ++kj) {
                        const float* row = col + (((c * w.kd + kz) * w.kh + ki) * w.kw + kj) * pixels;
                        for (std::int64_t z = 0; z < w.od; ++z) {
                            const auto iz = z * w.sd - w.pf + kz * w.dd;
                            if (iz < 0 || iz >= w.id)
                                continue;
                            float* plane = img + (c * w.id + iz) * w.h * w.w;
                            for (std::int64_t y = 0; y < w.oh; ++y) {
                                const auto iy = y * w.sh - w.pt + ki * w.dh;
                                if (iy < 0 || iy >= w.h)
                                    continue;
                                const float* in = row + (z * w.oh + y) * w.ow;
                                for (std::int64_t x = 0; x < w.ow; ++x) {
                                    const auto ix = x * w.sw - w.pl + kj * w.dw;
                                    if (ix >= 0 && ix < w.w)
                                        plane[iy * w.w + ix] += in[x];
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    // (n, channels, [d,] h, w): a batch of images, or of volumes where `threeD`.
    Shape batchShape(std::int64_t n, std::int64_t channels, std::int64_t d, std::int64_t h, std::int64_t w, bool threeD)
    {
        return threeD ? Shape { n, channels, d, h, w } : Shape { n, channels, h, w };
    }

    struct ConvDims
    {
        Window w;
        std::int64_t n, cin, cout, group, cinG, coutG, patch, pixels;
    };

    // A 1x1 window at unit strides, no leading pads, as many outputs as pixels (so no trailing pads
    // either): the column matrix of an image is the image (core's op cost counts no columns for it).
    bool columnsAreTheImage(const Window& w)
    {
        return w.kh == 1 && w.kw == 1 && w.kd == 1 && w.sh == 1 && w.sw == 1 && w.sd == 1 && w.pt == 0 && w.pl == 0
            && w.pf == 0 && w.oh == w.h && w.ow == w.w && w.od == w.id;
    }

    ConvDims convDims(const Node& node, const NdArray& x, const NdArray& weight)
    {
        const auto& ws = weight.shape();
        ConvDims d { convWindow(node, x.shape(), ws), x.shape()[0], x.shape()[1], ws[0], node.intAttr("group", 1), 0, 0,
            0, 0 };
        d.cinG = d.cin / d.group;
        d.coutG = d.cout / d.group;
        d.patch = d.cinG * d.w.kd * d.w.kh * d.w.kw;
        d.pixels = d.w.od * d.w.oh * d.w.ow;
        return d;
    }

    // out (N, F, pixels) += bias (F) per channel.
    void addChannelBias(NdArray& out, const NdArray& bias)
    {
        const auto& shape = out.shape();
        const auto pixels = out.numel() / (shape[0] * shape[1]);
        for (std::int64_t i = 0; i < shape[0]; ++i) {
            for (std::int64_t f = 0; f < shape[1]; ++f) {
                float* o = out.f32() + (i * shape[1] + f) * pixels;
                for (std::int64_t p = 0; p < pixels; ++p)
                    o[p] += bias.f32()[f];
            }
        }
    }

    // The bias gradient (F) of an (N, F, pixels) output gradient.
    NdArray channelSums(const NdArray& dy, KernelContext& ctx)
    {
        const auto& shape = dy.shape();
        const auto pixels = dy.numel() / (shape[0] * shape[1]);
        auto db = NdArray::zeros(ctx.allocator, { shape[1] });
        for (std::int64_t i = 0; i < shape[0]; ++i) {
            for (std::int64_t f = 0; f < shape[1]; ++f) {
                const float* gi = dy.f32() + (i * shape[1] + f) * pixels;
                for (std::int64_t p = 0; p < pixels; ++p)
                    db.f32()[f] += gi[p];
            }
        }
        return db;
    }

    void convForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& weight = v.in[1];
        const auto d = convDims(node, x, weight);
        auto out =
            NdArray::empty(ctx.allocator, batchShape(d.n, d.cout, d.w.od, d.w.oh, d.w.ow, x.shape().size() == 5));
        const bool inPlace = columnsAreTheImage(d.w);
        auto col = inPlace ? NdArray() : NdArray::empty(ctx.allocator, { d.patch, d.pixels });
        const auto volume = d.w.id * d.w.h * d.w.w;
        for (std::int64_t i = 0; i < d.n; ++i) {
            for (std::int64_t grp = 0; grp < d.group; ++grp) {
                const float* img = x.f32() + (i * d.cin + grp * d.cinG) * volume;
                if (!inPlace)
                    im2col(img, d.cinG, d.w, col.f32());
                sgemm(false, false, static_cast<int>(d.coutG), static_cast<int>(d.pixels), static_cast<int>(d.patch),
                    1.0F, weight.f32() + grp * d.coutG * d.patch, static_cast<int>(d.patch), inPlace ? img : col.f32(),
                    static_cast<int>(d.pixels), 0.0F, out.f32() + (i * d.cout + grp * d.coutG) * d.pixels,
                    static_cast<int>(d.pixels));
            }
        }
        if (v.in.size() > 2)
            addChannelBias(out, v.in[2]);
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
        // Only the columns a needed gradient uses (op_cost's fixed workspace counts the same); a
        // 1x1 convolution over every pixel reads the image and writes dX in place.
        const bool inPlace = columnsAreTheImage(d.w);
        auto col = dw.defined() && !inPlace ? NdArray::empty(ctx.allocator, { d.patch, d.pixels }) : NdArray();
        auto dcol = dx.defined() && !inPlace ? NdArray::empty(ctx.allocator, { d.patch, d.pixels }) : NdArray();
        for (std::int64_t i = 0; i < d.n && (dx.defined() || dw.defined()); ++i) {
            for (std::int64_t grp = 0; grp < d.group; ++grp) {
                const float* dyi = dy.f32() + (i * d.cout + grp * d.coutG) * d.pixels;
                const auto imgOffset = (i * d.cin + grp * d.cinG) * d.w.id * d.w.h * d.w.w;
                if (dw.defined()) { // dW (coutG, patch) += dY (coutG, pixels) col^T
                    if (!inPlace)
                        im2col(x.f32() + imgOffset, d.cinG, d.w, col.f32());
                    sgemm(false, true, static_cast<int>(d.coutG), static_cast<int>(d.patch), static_cast<int>(d.pixels),
                        1.0F, dyi, static_cast<int>(d.pixels), inPlace ? x.f32() + imgOffset : col.f32(),
                        static_cast<int>(d.pixels), 1.0F, dw.f32() + grp * d.coutG * d.patch,
                        static_cast<int>(d.patch));
                }
                if (dx.defined()) { // dcol (patch, pixels) = W^T dY, added into dX (zeros) as col2im adds it
                    sgemm(true, false, static_cast<int>(d.patch), static_cast<int>(d.pixels), static_cast<int>(d.coutG),
                        1.0F, weight.f32() + grp * d.coutG * d.patch, static_cast<int>(d.patch), dyi,
                        static_cast<int>(d.pixels), inPlace ? 1.0F : 0.0F, inPlace ? dx.f32() + imgOffset : dcol.f32(),
                        static_cast<int>(d.pixels));
                    if (!inPlace)
                        col2im(dcol.f32(), d.cinG, d.w, dx.f32() + imgOffset);
                }
            }
        }
        g.gradIn[0] = dx;
        g.gradIn[1] = dw;
        if (v.in.size() > 2 && g.needGrad[2])
            g.gradIn[2] = channelSums(dy, ctx);
    }

    // ---- ConvTranspose: the input gradient of the convolution over its output, as a layer ----

    struct TransposedDims
    {
        Window w; // the convolution of the output image (w.h x w.w) whose grid (w.oh x w.ow) is x's
        std::int64_t n, cin, cout, group, cinG, coutG, patch, pixels;
    };

    TransposedDims transposedDims(const Node& node, const NdArray& x, const NdArray& weight)
    {
        const auto& ws = weight.shape(); // (C, F / group, [kd,] kh, kw)
        TransposedDims d { transposedConvWindow(node, x.shape(), ws), x.shape()[0], x.shape()[1], 0,
            node.intAttr("group", 1), 0, ws[1], 0, 0 };
        d.cinG = d.cin / d.group;
        d.cout = d.coutG * d.group;
        d.patch = d.coutG * d.w.kd * d.w.kh * d.w.kw;
        d.pixels = d.w.od * d.w.oh * d.w.ow;
        return d;
    }

    void convTransposeForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& weight = v.in[1];
        const auto d = transposedDims(node, x, weight);
        auto out = NdArray::zeros(ctx.allocator, batchShape(d.n, d.cout, d.w.id, d.w.h, d.w.w, x.shape().size() == 5));
        const auto volume = d.w.id * d.w.h * d.w.w;
        auto col = NdArray::empty(ctx.allocator, { d.patch, d.pixels });
        for (std::int64_t i = 0; i < d.n; ++i) {
            for (std::int64_t grp = 0; grp < d.group; ++grp) { // col (patch, pixels) = W_g^T x_g, spread
                sgemm(true, false, static_cast<int>(d.patch), static_cast<int>(d.pixels), static_cast<int>(d.cinG),
                    1.0F, weight.f32() + grp * d.cinG * d.patch, static_cast<int>(d.patch),
                    x.f32() + (i * d.cin + grp * d.cinG) * d.pixels, static_cast<int>(d.pixels), 0.0F, col.f32(),
                    static_cast<int>(d.pixels));
                col2im(col.f32(), d.coutG, d.w, out.f32() + (i * d.cout + grp * d.coutG) * volume);
            }
        }
        if (v.in.size() > 2)
            addChannelBias(out, v.in[2]);
        v.out = { out };
    }

    void convTransposeBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& weight = v.in[1];
        const auto& dy = g.gradOut[0];
        const auto d = transposedDims(node, x, weight);
        NdArray dx = g.needGrad[0] ? NdArray::empty(ctx.allocator, x.shape()) : NdArray();
        NdArray dw = g.needGrad[1] ? NdArray::zeros(ctx.allocator, weight.shape()) : NdArray();
        auto col = dx.defined() || dw.defined() ? NdArray::empty(ctx.allocator, { d.patch, d.pixels }) : NdArray();
        for (std::int64_t i = 0; i < d.n && col.defined(); ++i) {
            for (std::int64_t grp = 0; grp < d.group; ++grp) {
                im2col(dy.f32() + (i * d.cout + grp * d.coutG) * d.w.id * d.w.h * d.w.w, d.coutG, d.w, col.f32());
                const auto xOffset = (i * d.cin + grp * d.cinG) * d.pixels;
                if (dx.defined()) { // dX_g (cinG, pixels) = W_g (cinG, patch) col
                    sgemm(false, false, static_cast<int>(d.cinG), static_cast<int>(d.pixels), static_cast<int>(d.patch),
                        1.0F, weight.f32() + grp * d.cinG * d.patch, static_cast<int>(d.patch), col.f32(),
                        static_cast<int>(d.pixels), 0.0F, dx.f32() + xOffset, static_cast<int>(d.pixels));
                }
                if (dw.defined()) { // dW_g (cinG, patch) += X_g (cinG, pixels) col^T
                    sgemm(false, true, static_cast<int>(d.cinG), static_cast<int>(d.patch), static_cast<int>(d.pixels),
                        1.0F, x.f32() + xOffset, static_cast<int>(d.pixels), col.f32(), static_cast<int>(d.pixels),
                        1.0F, dw.f32() + grp * d.cinG * d.patch, static_cast<int>(d.patch));
                }
            }
        }
        g.gradIn[0] = dx;
        g.gradIn[1] = dw;
        if (v.in.size() > 2 && g.needGrad[2])
            g.gradIn[2] = channelSums(dy, ctx);
    }

    // ---- BatchNorm over (N, spatial) per channel; training uses batch statistics and updates the
    // running ones (momentum as ONNX: running = momentum * running + (1 - momentum) * batch) ----

    // A channel's sums in kLanes interleaved partial sums, as math::channelPartial and
    // math::channelGradPartial with `lanes` kLanes compute them (lane = element mod kLanes in each
    // image's plane), combined pairwise as the CUDA kernel combines its lanes: independent adds
    // the CPU pipelines and vectorizes, where one running double sum waits on every add (the
    // single sum made BatchNorm about six times slower than its bytes on a core).
    constexpr int kLanes = 8;

    template <typename Term>
    math::ChannelSums laneSums(std::int64_t n, std::int64_t c, std::int64_t spatial, std::int64_t ch, const Term& term)
    {
        double sum[kLanes] = {};
        double squares[kLanes] = {};
        for (std::int64_t i = 0; i < n; ++i) {
            const auto base = (i * c + ch) * spatial;
            std::int64_t e = 0;
            for (; e + kLanes <= spatial; e += kLanes) {
                for (int l = 0; l < kLanes; ++l)
                    term(base + e + l, sum[l], squares[l]);
            }
            for (; e < spatial; ++e)
                term(base + e, sum[e % kLanes], squares[e % kLanes]);
        }
        for (int half = kLanes / 2; half > 0; half /= 2) {
            for (int l = 0; l < half; ++l) {
                sum[l] += sum[l + half];
                squares[l] += squares[l + half];
            }
        }
        return { sum[0], squares[0] };
    }

    math::ChannelSums batchNormSums(
        const float* x, std::int64_t n, std::int64_t c, std::int64_t spatial, std::int64_t ch)
    {
        return laneSums(n, c, spatial, ch, [x](std::int64_t e, double& sum, double& squares) {
            const double v = x[e];
            sum += v;
            squares += v * v;
        });
    }

    math::ChannelSums batchNormGradSums(const float* x, const float* dy, std::int64_t n, std::int64_t c,
        std::int64_t spatial, std::int64_t ch, float mean, float rstd)
    {
        return laneSums(n, c, spatial, ch, [=](std::int64_t e, double& sum, double& squares) {
            sum += dy[e];
            squares += dy[e] * (x[e] - mean) * rstd;
        });
    }

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
            const auto sums = ctx.training ? batchNormSums(x.f32(), n, c, spatial, ch) : math::ChannelSums {};
            const auto st = math::batchNormStats(
                sums, count, eps, momentum, ctx.training, runningMean.f32()[ch], runningVar.f32()[ch]);
            mean.f32()[ch] = st.mean;
            rstd.f32()[ch] = st.rstd;
            const float gamma = v.in[1].f32()[ch];
            const float beta = v.in[2].f32()[ch];
            for (std::int64_t i = 0; i < n; ++i) {
                const float* p = x.f32() + (i * c + ch) * spatial;
                float* o = out.f32() + (i * c + ch) * spatial;
                for (std::int64_t s = 0; s < spatial; ++s)
                    o[s] = math::batchNormValue(p[s], st.mean, st.rstd, gamma, beta);
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
            const auto sums = batchNormGradSums(x.f32(), dy.f32(), n, c, spatial, ch, mu, rs);
            dgamma.f32()[ch] = static_cast<float>(sums.squares);
            dbeta.f32()[ch] = static_cast<float>(sums.sum);
            const auto mg = static_cast<float>(sums.sum / count);
            const auto mgx = static_cast<float>(sums.squares / count);
            for (std::int64_t i = 0; i < n; ++i) {
                const auto base = (i * c + ch) * spatial;
                const float* xs = x.f32() + base;
                const float* d = dy.f32() + base;
                float* o = dx.f32() + base;
                for (std::int64_t s = 0; s < spatial; ++s)
                    o[s] = math::batchNormGradInput(xs[s], d[s], mu, rs, gamma, mg, mgx);
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

    // A pool's output shape: (N, C, [od,] oh, ow), as many spatial axes as the input's.
    Shape pooledShape(const Shape& x, std::int64_t od, std::int64_t oh, std::int64_t ow)
    {
        return batchShape(x[0], x[1], od, oh, ow, x.size() == 5);
    }

    // Whether output (z, y, xo)'s window lies inside the input, where interiorMax needs no bounds.
    bool interior(const Window& w, std::int64_t z, std::int64_t y, std::int64_t xo)
    {
        const auto iz = z * w.sd - w.pf;
        const auto iy = y * w.sh - w.pt;
        const auto ix = xo * w.sw - w.pl;
        return iz >= 0 && iz + (w.kd - 1) * w.dd < w.id && iy >= 0 && iy + (w.kh - 1) * w.dh < w.h && ix >= 0
            && ix + (w.kw - 1) * w.dw < w.w;
    }

    // math::maxPoolWindow of an interior window: the same taps in the same order (the first
    // largest wins; NaN never does), without the bounds checks.
    math::MaxTap interiorMax(const float* volume, const Window& w, std::int64_t z, std::int64_t y, std::int64_t xo)
    {
        math::MaxTap best { -INFINITY, -1 };
        for (std::int64_t kz = 0; kz < w.kd; ++kz) {
            for (std::int64_t ki = 0; ki < w.kh; ++ki) {
                const auto row = ((z * w.sd - w.pf + kz * w.dd) * w.h + y * w.sh - w.pt + ki * w.dh) * w.w;
                for (std::int64_t kj = 0; kj < w.kw; ++kj) {
                    const auto at = row + xo * w.sw - w.pl + kj * w.dw;
                    if (volume[at] > best.value) {
                        best.value = volume[at];
                        best.at = at;
                    }
                }
            }
        }
        return best;
    }

    void maxPoolForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto w = maxPoolWindow(node, x.shape());
        const auto volumes = x.shape()[0] * x.shape()[1];
        auto out = NdArray::empty(ctx.allocator, pooledShape(x.shape(), w.od, w.oh, w.ow));
        auto argmax = NdArray::empty(ctx.allocator, out.shape(), DType::I64);
        std::int64_t o = 0;
        float* values = out.f32();
        std::int64_t* at = argmax.i64();
        for (std::int64_t vol = 0; vol < volumes; ++vol) {
            const float* img = x.f32() + vol * w.id * w.h * w.w;
            for (std::int64_t z = 0; z < w.od; ++z) {
                for (std::int64_t y = 0; y < w.oh; ++y) {
                    for (std::int64_t xo = 0; xo < w.ow; ++xo, ++o) {
                        const auto best = interior(w, z, y, xo) ? interiorMax(img, w, z, y, xo)
                                                                : math::maxPoolWindow(img, w, z, y, xo);
                        values[o] = best.value;
                        at[o] = best.at;
                    }
                }
            }
        }
        v.out = { out };
        v.saved = { argmax };
    }

    void maxPoolBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto w = maxPoolWindow(node, x.shape());
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        const auto volumes = x.shape()[0] * x.shape()[1];
        const auto inVolume = w.id * w.h * w.w;
        const auto outVolume = w.od * w.oh * w.ow;
        // Each output's gradient to its window's argmax, outputs in order: every input pixel gets
        // the sum math::maxPoolGradPixel gathers (the CUDA kernel's), in the same order, in one
        // pass over the outputs instead of one over every window reaching each pixel.
        for (std::int64_t vol = 0; vol < volumes; ++vol) {
            const float* d = dy.f32() + vol * outVolume;
            const std::int64_t* at = v.saved[0].i64() + vol * outVolume;
            float* plane = dx.f32() + vol * inVolume;
            for (std::int64_t o = 0; o < outVolume; ++o) {
                if (at[o] >= 0)
                    plane[at[o]] += d[o];
            }
        }
        g.gradIn[0] = dx;
    }

    void globalAvgPoolForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto planes = x.shape()[0] * x.shape()[1];
        const auto area = planes > 0 ? x.numel() / planes : 0; // an (H, W) plane or a (D, H, W) volume
        Shape pooled(x.shape().size(), 1);
        pooled[0] = x.shape()[0];
        pooled[1] = x.shape()[1];
        auto out = NdArray::empty(ctx.allocator, pooled);
        for (std::int64_t pl = 0; pl < planes; ++pl)
            out.f32()[pl] = math::planeMean(x.f32() + pl * area, area);
        v.out = { out };
    }

    void globalAvgPoolBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        const auto planes = x.shape()[0] * x.shape()[1];
        const auto area = planes > 0 ? x.numel() / planes : 0;
        for (std::int64_t pl = 0; pl < planes; ++pl) {
            for (std::int64_t s = 0; s < area; ++s)
                dx.f32()[pl * area + s] = dy.f32()[pl] / static_cast<float>(area);
        }
        g.gradIn[0] = dx;
    }

    // ---- AvgPool on (N, C, H, W) or (N, C, D, H, W), as torch.nn.functional.avg_pool2d/3d ----

    void avgPoolForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        requireDType(node, x, DType::F32, "the input");
        const auto p = avgPoolGeometry(node, x.shape());
        const auto volumes = x.shape()[0] * x.shape()[1];
        auto out = NdArray::empty(ctx.allocator, pooledShape(x.shape(), p.d.out, p.h.out, p.w.out));
        float* o = out.f32();
        for (std::int64_t vol = 0; vol < volumes; ++vol) {
            const float* img = x.f32() + vol * p.d.size * p.h.size * p.w.size;
            for (std::int64_t oz = 0; oz < p.d.out; ++oz) {
                for (std::int64_t oy = 0; oy < p.h.out; ++oy) {
                    for (std::int64_t ox = 0; ox < p.w.out; ++ox)
                        *o++ = math::avgPoolValue(img, p.d, p.h, p.w, p.includePad, oz, oy, ox);
                }
            }
        }
        v.out = { out };
    }

    void avgPoolBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto p = avgPoolGeometry(node, x.shape());
        const auto volumes = x.shape()[0] * x.shape()[1];
        const auto dy = gradOrZeros(g.gradOut[0], pooledShape(x.shape(), p.d.out, p.h.out, p.w.out), ctx.allocator);
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        float* o = dx.f32();
        for (std::int64_t vol = 0; vol < volumes; ++vol) {
            const float* d = dy.f32() + vol * p.d.out * p.h.out * p.w.out;
            for (std::int64_t iz = 0; iz < p.d.size; ++iz) {
                for (std::int64_t iy = 0; iy < p.h.size; ++iy) {
                    for (std::int64_t ix = 0; ix < p.w.size; ++ix)
                        *o++ = math::avgPoolGradPixel(d, p.d, p.h, p.w, p.includePad, iz, iy, ix);
                }
            }
        }
        g.gradIn[0] = dx;
    }

} // namespace

void registerConvKernels(KernelTable& table)
{
    table.add(OpType::Conv, { convForward, convBackward });
    table.add(OpType::ConvTranspose, { convTransposeForward, convTransposeBackward });
    table.add(OpType::BatchNorm, { batchNormForward, batchNormBackward });
    table.add(OpType::MaxPool, { maxPoolForward, maxPoolBackward });
    table.add(OpType::GlobalAvgPool, { globalAvgPoolForward, globalAvgPoolBackward });
    table.add(OpType::AvgPool, { avgPoolForward, avgPoolBackward });
}

} // namespace ps::engine::detail
