// engine/conv_math.h, the index math the CUDA CNN kernels run, against the CPU backend's kernels
// and against plain scatter references written here: the wide im2col + one GEMM per group and its
// gathered adjoint give the CPU's Conv forward and gradients; the gathered pooling gradients give
// what scattering each window's gradient back gives (dilations, ceil_mode, overlaps, pads), and
// the CPU's max pooling (bounds-free interior windows, gradients scattered) the GPU's bits; the
// BatchNorm channel sums of many lanes give the one-lane sums, and the CPU's eight lanes exactly
// those of channelPartial's lanes combined pairwise.
#include "backend.h"
#include "conv_geometry.h"
#include "conv_math.h"
#include "kernel_test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::makeNode;

namespace {

class ConvMath : public ps::engine::testing::KernelTest
{
protected:
    std::vector<NdArray> forwardCpu(const Node& node, const std::vector<NdArray>& in, NodeValues& v)
    {
        return forward(node, in, v);
    }
    std::vector<NdArray> backwardCpu(const Node& node, NodeValues& v, const NdArray& dy)
    {
        std::mt19937_64 rng(7);
        KernelContext ctx { m_alloc, rng, true };
        std::vector<bool> need(v.in.size(), true);
        return cpuBackend().backward(node, v, { dy }, need, ctx);
    }
};

float worstDifference(const float* a, const float* b, std::int64_t n)
{
    float worst = 0;
    for (std::int64_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(a[i] - b[i]));
    return worst;
}

// Row-major C (m, n) = op(A) op(B), k the inner size, as a plain triple loop.
void naiveGemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
    const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc)
{
    for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
            double s = 0;
            for (std::int64_t p = 0; p < k; ++p)
                s += double(ta ? a[p * lda + i] : a[i * lda + p]) * double(tb ? b[j * ldb + p] : b[p * ldb + j]);
            c[i * ldc + j] = static_cast<float>(s + beta * c[i * ldc + j]);
        }
    }
}

} // namespace

// The CUDA Conv's algorithm (engine/cuda/cuda_conv_kernels.cu), run on the host over the same
// functions: the wide column matrix of all images, one GEMM per group, the output permuted back;
// backward: dY made wide, dW = dY col^T, dcol = W^T dY gathered into dX by col2imPixel.
TEST_F(ConvMath, WideIm2colGemmAndGatheredCol2imGiveTheCpuConv)
{
    struct Case
    {
        Attributes attrs;
        Shape x, w;
    };
    const std::vector<Case> cases {
        { { { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } }, { 3, 3, 7, 6 }, { 4, 3, 3, 3 } },
        { { { "group", std::int64_t { 2 } }, { "dilations", Shape { 2, 1 } }, { "pads", Shape { 0, 1, 2, 0 } } },
            { 2, 4, 6, 6 }, { 6, 2, 2, 3 } },
        { { { "group", std::int64_t { 3 } }, { "strides", Shape { 1, 3 } } }, { 2, 3, 5, 8 }, { 3, 1, 3, 2 } },
        // 3-D: over (N, C, D, H, W), the depth strided, padded and dilated too
        { { { "strides", Shape { 2, 1, 2 } }, { "pads", Shape { 1, 0, 1, 0, 1, 1 } },
              { "dilations", Shape { 1, 2, 1 } } },
            { 2, 2, 5, 6, 5 }, { 3, 2, 2, 2, 3 } },
        { { { "group", std::int64_t { 2 } }, { "dilations", Shape { 2, 1, 1 } } }, { 1, 4, 6, 3, 4 },
            { 4, 2, 2, 2, 2 } },
        // 1x1 over every pixel: the CPU reads the image as its columns and writes dX in place
        { {}, { 3, 4, 5, 6 }, { 5, 4, 1, 1 } },
        { { { "group", std::int64_t { 2 } } }, { 2, 4, 3, 7 }, { 6, 2, 1, 1 } },
        { { { "strides", Shape { 2, 2 } } }, { 2, 3, 5, 6 }, { 4, 3, 1, 1 } }, // strided: columns as before
        // strided with trailing pads: as many outputs as pixels, the last row and column padding
        { { { "strides", Shape { 2, 2 } }, { "pads", Shape { 0, 0, 1, 1 } } }, { 1, 2, 2, 2 }, { 3, 2, 1, 1 } },
    };
    for (const auto& c : cases) {
        const auto node = makeNode(OpType::Conv, c.attrs);
        NodeValues v;
        const auto out = forwardCpu(node, { random(c.x), random(c.w) }, v);
        const auto dy = random(out[0].shape());
        const auto grads = backwardCpu(node, v, dy);

        const auto win = convWindow(node, c.x, c.w);
        const std::int64_t taps = win.kd * win.kh * win.kw;
        const std::int64_t n = c.x[0], cin = c.x[1], cout = c.w[0], group = cin / c.w[1];
        const std::int64_t cinG = cin / group, coutG = cout / group, patch = cinG * taps;
        const std::int64_t pixels = win.od * win.oh * win.ow, columns = n * pixels, rows = cin * taps;
        std::vector<float> col(static_cast<std::size_t>(rows * columns));
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t q = 0; q < columns; ++q)
                col[static_cast<std::size_t>(r * columns + q)] = math::im2colTap(v.in[0].f32(), cin, win, r, q);
        std::vector<float> wide(static_cast<std::size_t>(cout * columns));
        for (std::int64_t g = 0; g < group; ++g)
            naiveGemm(false, false, coutG, columns, patch, v.in[1].f32() + g * coutG * patch, patch,
                col.data() + g * patch * columns, columns, 0.0F, wide.data() + g * coutG * columns, columns);
        std::vector<float> y(static_cast<std::size_t>(out[0].numel()));
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t f = 0; f < cout; ++f)
                for (std::int64_t p = 0; p < pixels; ++p)
                    y[static_cast<std::size_t>((i * cout + f) * pixels + p)] =
                        wide[static_cast<std::size_t>(f * columns + i * pixels + p)];
        EXPECT_LT(worstDifference(y.data(), out[0].f32(), out[0].numel()), 1e-5F) << node.name << " forward";

        std::vector<float> dyWide(wide.size());
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t f = 0; f < cout; ++f)
                for (std::int64_t p = 0; p < pixels; ++p)
                    dyWide[static_cast<std::size_t>(f * columns + i * pixels + p)] =
                        dy.f32()[(i * cout + f) * pixels + p];
        std::vector<float> dw(static_cast<std::size_t>(cout * patch));
        std::vector<float> dcol(col.size());
        for (std::int64_t g = 0; g < group; ++g) {
            naiveGemm(false, true, coutG, patch, columns, dyWide.data() + g * coutG * columns, columns,
                col.data() + g * patch * columns, columns, 0.0F, dw.data() + g * coutG * patch, patch);
            naiveGemm(true, false, patch, columns, coutG, v.in[1].f32() + g * coutG * patch, patch,
                dyWide.data() + g * coutG * columns, columns, 0.0F, dcol.data() + g * patch * columns, columns);
        }
        std::vector<float> dx(static_cast<std::size_t>(v.in[0].numel()));
        for (std::int64_t i = 0; i < n; ++i)
            for (std::int64_t ch = 0; ch < cin; ++ch)
                for (std::int64_t iz = 0; iz < win.id; ++iz)
                    for (std::int64_t iy = 0; iy < win.h; ++iy)
                        for (std::int64_t ix = 0; ix < win.w; ++ix)
                            dx[static_cast<std::size_t>((((i * cin + ch) * win.id + iz) * win.h + iy) * win.w + ix)] =
                                math::col2imPixel(dcol.data(), columns, win, i, ch, iz, iy, ix);
        EXPECT_LT(worstDifference(dx.data(), grads[0].f32(), grads[0].numel()), 1e-5F) << node.name << " dX";
        EXPECT_LT(worstDifference(dw.data(), grads[1].f32(), grads[1].numel()), 1e-4F) << node.name << " dW";
    }
}

// Pooling gradients gathered per input pixel equal the scatter of each window's gradient.
TEST_F(ConvMath, GatheredPoolGradientsEqualTheWindowScatter)
{
    struct Case
    {
        Attributes attrs;
        Shape x;
    };
    const Shape planes { 2, 2, 9, 8 };
    const std::vector<Case> maxCases {
        { { { "kernel", Shape { 3, 3 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } }, planes },
        // AmoebaNet's 3x3 max pool: stride 1, same padding (interior and border windows)
        { { { "kernel", Shape { 3, 3 } }, { "strides", Shape { 1, 1 } }, { "pads", Shape { 1, 1, 1, 1 } } }, planes },
        { { { "kernel", Shape { 2, 3 } }, { "strides", Shape { 1, 2 } }, { "dilations", Shape { 2, 2 } },
              { "ceil_mode", std::int64_t { 1 } } },
            planes },
        { { { "kernel", Shape { 3, 2 } }, { "strides", Shape { 3, 3 } }, { "pads", Shape { 1, 0, 1, 1 } },
              { "ceil_mode", std::int64_t { 1 } } },
            planes },
        // MaxPool3d: over (N, C, D, H, W), depth strided, padded, dilated and in ceil mode
        { { { "kernel", Shape { 2, 3, 3 } }, { "strides", Shape { 2, 2, 1 } }, { "pads", Shape { 1, 1, 0, 0, 1, 1 } },
              { "dilations", Shape { 2, 1, 1 } }, { "ceil_mode", std::int64_t { 1 } } },
            { 2, 2, 6, 7, 5 } },
    };
    for (const auto& c : maxCases) {
        const auto node = makeNode(OpType::MaxPool, c.attrs);
        NodeValues v;
        const auto out = forwardCpu(node, { random(c.x) }, v);
        const auto dy = random(out[0].shape());
        const auto w = maxPoolWindow(node, c.x);
        const auto outVolume = w.od * w.oh * w.ow;
        std::vector<float> want(static_cast<std::size_t>(numElements(c.x)), 0.0F);
        for (std::int64_t vol = 0; vol < c.x[0] * c.x[1]; ++vol) {
            for (std::int64_t o = 0; o < outVolume; ++o) {
                const auto at = v.saved[0].i64()[vol * outVolume + o];
                ASSERT_GE(at, 0);
                want[static_cast<std::size_t>(vol * w.id * w.h * w.w + at)] += dy.f32()[vol * outVolume + o];
            }
        }
        const auto grads = backwardCpu(node, v, dy);
        EXPECT_LT(worstDifference(want.data(), grads[0].f32(), grads[0].numel()), 1e-6F) << "MaxPool " << c.x.size();
        // The CPU's windows and scattered gradients are the GPU's gathered ones, bit for bit.
        const auto volume = w.id * w.h * w.w;
        for (std::int64_t vol = 0; vol < c.x[0] * c.x[1]; ++vol) {
            const float* img = v.in[0].f32() + vol * volume;
            for (std::int64_t o = 0; o < outVolume; ++o) {
                const auto z = o / (w.oh * w.ow);
                const auto tap = math::maxPoolWindow(img, w, z, (o / w.ow) % w.oh, o % w.ow);
                ASSERT_EQ(out[0].f32()[vol * outVolume + o], tap.value) << "MaxPool " << c.x.size() << " output " << o;
                ASSERT_EQ(v.saved[0].i64()[vol * outVolume + o], tap.at);
            }
            for (std::int64_t p = 0; p < volume; ++p) {
                const auto gathered = math::maxPoolGradPixel(dy.f32() + vol * outVolume,
                    v.saved[0].i64() + vol * outVolume, w, p / (w.h * w.w), (p / w.w) % w.h, p % w.w);
                ASSERT_EQ(grads[0].f32()[vol * volume + p], gathered) << "MaxPool " << c.x.size() << " pixel " << p;
            }
        }
    }
    const std::vector<Case> avgCases {
        { { { "kernel", Shape { 3, 2 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } },
              { "ceil_mode", std::int64_t { 1 } } },
            planes },
        { { { "kernel", Shape { 3, 3, 2 } }, { "strides", Shape { 2, 2, 2 } }, { "pads", Shape { 1, 1, 1, 1, 0, 1 } },
              { "ceil_mode", std::int64_t { 1 } } },
            { 2, 2, 6, 7, 5 } },
    };
    for (const auto& c : avgCases) {
        for (const bool includePad : { false, true }) {
            auto attrs = c.attrs;
            attrs["count_include_pad"] = std::int64_t { includePad };
            const auto node = makeNode(OpType::AvgPool, attrs);
            NodeValues v;
            const auto out = forwardCpu(node, { random(c.x) }, v);
            const auto dy = random(out[0].shape());
            const auto p = avgPoolGeometry(node, c.x);
            std::vector<float> want(static_cast<std::size_t>(numElements(c.x)), 0.0F);
            for (std::int64_t vol = 0; vol < c.x[0] * c.x[1]; ++vol) {
                for (std::int64_t oz = 0; oz < p.d.out; ++oz) {
                    const auto zs = math::poolSpan(p.d, oz);
                    for (std::int64_t oy = 0; oy < p.h.out; ++oy) {
                        const auto ys = math::poolSpan(p.h, oy);
                        for (std::int64_t ox = 0; ox < p.w.out; ++ox) {
                            const auto xsp = math::poolSpan(p.w, ox);
                            const float share = dy.f32()[((vol * p.d.out + oz) * p.h.out + oy) * p.w.out + ox]
                                / math::poolDivisor(includePad, zs, ys, xsp);
                            for (auto iz = zs.lo; iz < zs.hi; ++iz)
                                for (auto iy = ys.lo; iy < ys.hi; ++iy)
                                    for (auto ix = xsp.lo; ix < xsp.hi; ++ix)
                                        want[static_cast<std::size_t>(
                                            ((vol * p.d.size + iz) * p.h.size + iy) * p.w.size + ix)] += share;
                        }
                    }
                }
            }
            const auto grads = backwardCpu(node, v, dy);
            EXPECT_LT(worstDifference(want.data(), grads[0].f32(), grads[0].numel()), 1e-6F)
                << "AvgPool " << c.x.size() << "-d count_include_pad " << includePad;
        }
    }
}

// The 3-D kernels against the operators' definitions, written as plain loops over (N, C, D, H, W)
// (pads: all begins, then all ends): Conv3d and ConvTranspose3d (strided, padded, dilated, grouped;
// the transpose as the scatter of each input element), MaxPool3d and AvgPool3d.
TEST_F(ConvMath, ThreeDimensionalWindowsEqualTheirDefinitions)
{
    using V = std::vector<std::int64_t>;
    const V s { 2, 1, 2 }, p { 1, 0, 1, 0, 1, 1 }, d { 1, 2, 1 };
    const auto at = [](const Shape& sh, std::int64_t n, std::int64_t c, std::int64_t z, std::int64_t y,
                        std::int64_t x) { return (((n * sh[1] + c) * sh[2] + z) * sh[3] + y) * sh[4] + x; };
    const auto inside = [](const Shape& sh, std::int64_t z, std::int64_t y, std::int64_t x) {
        return z >= 0 && z < sh[2] && y >= 0 && y < sh[3] && x >= 0 && x < sh[4];
    };
    const Attributes window { { "strides", Shape(s) }, { "pads", Shape(p) }, { "dilations", Shape(d) },
        { "group", std::int64_t { 2 } } };
    { // Conv3d
        const auto x = random({ 2, 4, 5, 6, 5 });
        const auto w = random({ 6, 2, 2, 2, 3 });
        NodeValues v;
        const auto out = forwardCpu(makeNode(OpType::Conv, window), { x, w }, v)[0];
        const auto& os = out.shape();
        std::vector<float> want(static_cast<std::size_t>(out.numel()), 0.0F);
        for (std::int64_t n = 0; n < os[0]; ++n)
            for (std::int64_t f = 0; f < os[1]; ++f)
                for (std::int64_t oz = 0; oz < os[2]; ++oz)
                    for (std::int64_t oy = 0; oy < os[3]; ++oy)
                        for (std::int64_t ox = 0; ox < os[4]; ++ox) {
                            double sum = 0;
                            for (std::int64_t c = 0; c < 2; ++c)
                                for (std::int64_t a = 0; a < 2; ++a)
                                    for (std::int64_t b = 0; b < 2; ++b)
                                        for (std::int64_t e = 0; e < 3; ++e) {
                                            const auto iz = oz * s[0] - p[0] + a * d[0];
                                            const auto iy = oy * s[1] - p[1] + b * d[1];
                                            const auto ix = ox * s[2] - p[2] + e * d[2];
                                            if (inside(x.shape(), iz, iy, ix))
                                                sum += double(x.f32()[at(x.shape(), n, f / 3 * 2 + c, iz, iy, ix)])
                                                    * w.f32()[at(w.shape(), f, c, a, b, e)];
                                        }
                            want[static_cast<std::size_t>(at(os, n, f, oz, oy, ox))] = static_cast<float>(sum);
                        }
        EXPECT_EQ(os, (Shape { 2, 6, 3, 5, 3 }));
        EXPECT_LT(worstDifference(want.data(), out.f32(), out.numel()), 1e-5F) << "Conv3d";
    }
    { // ConvTranspose3d: each input element scatters x * w over its window of the output
        auto attrs = window;
        attrs["output_padding"] = Shape { 1, 0, 1 };
        const auto x = random({ 1, 4, 3, 3, 3 });
        const auto w = random({ 4, 3, 2, 2, 3 }); // (C, F / group, kd, kh, kw)
        NodeValues v;
        const auto out = forwardCpu(makeNode(OpType::ConvTranspose, attrs), { x, w }, v)[0];
        const auto& os = out.shape();
        std::vector<double> want(static_cast<std::size_t>(out.numel()), 0.0);
        for (std::int64_t c = 0; c < 4; ++c)
            for (std::int64_t z = 0; z < 3; ++z)
                for (std::int64_t y = 0; y < 3; ++y)
                    for (std::int64_t xx = 0; xx < 3; ++xx)
                        for (std::int64_t f = 0; f < 3; ++f)
                            for (std::int64_t a = 0; a < 2; ++a)
                                for (std::int64_t b = 0; b < 2; ++b)
                                    for (std::int64_t e = 0; e < 3; ++e) {
                                        const auto oz = z * s[0] - p[0] + a * d[0];
                                        const auto oy = y * s[1] - p[1] + b * d[1];
                                        const auto ox = xx * s[2] - p[2] + e * d[2];
                                        if (inside(os, oz, oy, ox))
                                            want[static_cast<std::size_t>(at(os, 0, c / 2 * 3 + f, oz, oy, ox))] +=
                                                double(x.f32()[at(x.shape(), 0, c, z, y, xx)])
                                                * w.f32()[at(w.shape(), c, f, a, b, e)];
                                    }
        EXPECT_EQ(os, (Shape { 1, 6, 6, 4, 6 }));
        const std::vector<float> wanted(want.begin(), want.end());
        EXPECT_LT(worstDifference(wanted.data(), out.f32(), out.numel()), 1e-5F) << "ConvTranspose3d";
    }
    // MaxPool3d (depth kernel 2, dilated, ceil mode) and AvgPool3d (count_include_pad off)
    const auto x = random({ 2, 2, 6, 7, 5 });
    for (const bool max : { true, false }) {
        Attributes attrs { { "kernel", Shape { 2, 3, 2 } }, { "strides", Shape { 2, 2, 1 } },
            { "pads", Shape { 1, 1, 0, 0, 1, 1 } }, { "ceil_mode", std::int64_t { 1 } } };
        if (max)
            attrs["dilations"] = Shape { 2, 1, 1 };
        const V dil { max ? 2 : 1, 1, 1 };
        NodeValues v;
        const auto out = forwardCpu(makeNode(max ? OpType::MaxPool : OpType::AvgPool, attrs), { x }, v)[0];
        const auto& os = out.shape();
        std::vector<float> want(static_cast<std::size_t>(out.numel()), 0.0F);
        for (std::int64_t n = 0; n < 2; ++n)
            for (std::int64_t c = 0; c < 2; ++c)
                for (std::int64_t oz = 0; oz < os[2]; ++oz)
                    for (std::int64_t oy = 0; oy < os[3]; ++oy)
                        for (std::int64_t ox = 0; ox < os[4]; ++ox) {
                            float best = -INFINITY;
                            double sum = 0;
                            int count = 0;
                            for (std::int64_t a = 0; a < 2; ++a)
                                for (std::int64_t b = 0; b < 3; ++b)
                                    for (std::int64_t e = 0; e < 2; ++e) {
                                        const auto iz = oz * 2 - 1 + a * dil[0];
                                        const auto iy = oy * 2 - 1 + b;
                                        const auto ix = ox - 0 + e;
                                        if (!inside(x.shape(), iz, iy, ix))
                                            continue;
                                        const float value = x.f32()[at(x.shape(), n, c, iz, iy, ix)];
                                        best = std::max(best, value);
                                        sum += value;
                                        ++count;
                                    }
                            want[static_cast<std::size_t>(at(os, n, c, oz, oy, ox))] =
                                max ? best : static_cast<float>(sum / std::max(count, 1));
                        }
        EXPECT_LT(worstDifference(want.data(), out.f32(), out.numel()), 1e-6F) << (max ? "MaxPool3d" : "AvgPool3d");
    }
}

// The GPU's 256 lanes per channel, combined in double, give the CPU's one-lane channel sums.
TEST_F(ConvMath, ManyLaneChannelSumsEqualOneLane)
{
    const auto x = random({ 5, 3, 7, 9 }, -2.0F, 3.0F);
    const auto dy = random({ 5, 3, 7, 9 });
    for (std::int64_t ch = 0; ch < 3; ++ch) {
        const auto one = math::channelPartial(x.f32(), 5, 3, 63, ch, 0, 1);
        const auto oneGrad = math::channelGradPartial(x.f32(), dy.f32(), 5, 3, 63, ch, 0.25F, 1.5F, 0, 1);
        math::ChannelSums many { 0, 0 };
        math::ChannelSums manyGrad { 0, 0 };
        for (int lane = 0; lane < 256; ++lane) {
            const auto p = math::channelPartial(x.f32(), 5, 3, 63, ch, lane, 256);
            const auto q = math::channelGradPartial(x.f32(), dy.f32(), 5, 3, 63, ch, 0.25F, 1.5F, lane, 256);
            many = { many.sum + p.sum, many.squares + p.squares };
            manyGrad = { manyGrad.sum + q.sum, manyGrad.squares + q.squares };
        }
        EXPECT_NEAR(many.sum, one.sum, 1e-9 * std::abs(one.squares));
        EXPECT_NEAR(many.squares, one.squares, 1e-9 * one.squares);
        EXPECT_NEAR(manyGrad.sum, oneGrad.sum, 1e-9);
        EXPECT_NEAR(manyGrad.squares, oneGrad.squares, 1e-9);
    }
    // Training moves the running statistics; evaluation normalizes with them and leaves them.
    float runningMean = 0.5F;
    float runningVar = 2.0F;
    const auto eval = math::batchNormStats({ 10.0, 30.0 }, 5.0, 1e-5F, 0.9F, false, runningMean, runningVar);
    EXPECT_FLOAT_EQ(eval.mean, 0.5F);
    EXPECT_NEAR(eval.rstd, 1.0 / std::sqrt(2.0 + 1e-5), 1e-7);
    EXPECT_EQ(runningMean, 0.5F);
    const auto train = math::batchNormStats({ 10.0, 30.0 }, 5.0, 1e-5F, 0.9F, true, runningMean, runningVar);
    EXPECT_FLOAT_EQ(train.mean, 2.0F); // var 30 / 5 - 4 = 2, unbiased 2.5
    EXPECT_NEAR(runningMean, 0.9 * 0.5 + 0.1 * 2.0, 1e-6);
    EXPECT_NEAR(runningVar, 0.9 * 2.0 + 0.1 * 2.5, 1e-6);
}

// The CPU's BatchNorm sums each channel in eight lanes (lane = element mod 8 in each plane, so
// that the adds do not wait on one another) combined pairwise: exactly channelPartial's and
// channelGradPartial's eight lanes so combined, through the statistics and the parameter
// gradients. A plane of 63 elements leaves a partial block.
TEST_F(ConvMath, CpuBatchNormSumsEightLanesPairwise)
{
    const Shape shape { 5, 3, 7, 9 };
    const auto x = random(shape, -2.0F, 3.0F);
    const auto dy = random(shape);
    const auto node = makeNode(OpType::BatchNorm, { { "epsilon", 1e-5 } });
    NodeValues v;
    const auto gamma = random({ 3 });
    const auto beta = random({ 3 });
    (void)forwardCpu(node, { x, gamma, beta, random({ 3 }, 0.0F, 1.0F), random({ 3 }, 1.0F, 2.0F) }, v);
    const auto grads = backwardCpu(node, v, dy);
    const auto pairwise = [](std::vector<math::ChannelSums> lanes) {
        for (std::size_t half = lanes.size() / 2; half > 0; half /= 2) {
            for (std::size_t l = 0; l < half; ++l)
                lanes[l] = { lanes[l].sum + lanes[l + half].sum, lanes[l].squares + lanes[l + half].squares };
        }
        return lanes.front();
    };
    for (std::int64_t ch = 0; ch < 3; ++ch) {
        std::vector<math::ChannelSums> lanes;
        for (int lane = 0; lane < 8; ++lane)
            lanes.push_back(math::channelPartial(x.f32(), 5, 3, 63, ch, lane, 8));
        const auto sums = pairwise(lanes);
        const auto mean = static_cast<float>(sums.sum / 315);
        EXPECT_EQ(v.saved[0].f32()[ch], mean) << "channel " << ch;
        const float rstd = v.saved[1].f32()[ch];
        lanes.clear();
        for (int lane = 0; lane < 8; ++lane)
            lanes.push_back(math::channelGradPartial(x.f32(), dy.f32(), 5, 3, 63, ch, mean, rstd, lane, 8));
        const auto grad = pairwise(lanes);
        EXPECT_EQ(grads[1].f32()[ch], static_cast<float>(grad.squares)) << "channel " << ch << " dgamma";
        EXPECT_EQ(grads[2].f32()[ch], static_cast<float>(grad.sum)) << "channel " << ch << " dbeta";
    }
}
