// CUDA kernels of the CNN ops: Conv (cuDNN where it applies, cuda_cudnn.cu; else im2col + one
// cuBLAS GEMM per chunk of images, batched over groups), ConvTranspose (that Conv with the roles of
// input and output gradient swapped), BatchNorm (cuDNN in training where it
// applies; else per-channel sums in double, one block per channel) (the pools: cuda_pool_kernels.cu), forward and
// backward, on (N, C, H, W) and (N, C, D, H, W) f32 arrays. The index math and the per-element and per-channel
// arithmetic are engine/conv_math.h's, which the CPU kernels run too; these backwards gather (one thread per input
// element), so they need no atomics and their sums come in the CPU's order. Windows are read from the node by
// engine/conv_geometry.h, as on the CPU.
#include "conv_geometry.h"
#include "cuda/cuda_common.cuh"

#include <algorithm>

namespace ps::engine::cuda {
namespace {

    // Column matrices are built for as many images as fit this budget (at least one image).
    constexpr std::int64_t kColumnBytes = std::int64_t { 256 } << 20;
    constexpr int kChannelLanes = 256; // threads per channel in the BatchNorm and bias reductions

    int asInt(std::int64_t v, const Node& node)
    {
        if (v > 2147483647)
            throw Error(label(node) + ": a GEMM dimension of " + std::to_string(v) + " is above cuBLAS's int range");
        return static_cast<int>(v);
    }

    // ---- Conv ----

    struct ConvShape
    {
        math::Window w;
        std::int64_t n, cin, cout, group, cinG, coutG, patch, pixels;
    };

    ConvShape convShape(const Node& node, const NdArray& x, const NdArray& weight)
    {
        requireF32(node, x);
        requireF32(node, weight);
        const auto& ws = weight.shape();
        if (ws.size() != 4 && ws.size() != 5)
            throw Error(label(node) + ": needs a 4-d or 5-d weight, got " + formatShape(ws));
        ConvShape s { convWindow(node, x.shape(), ws), x.shape()[0], x.shape()[1], ws[0], node.intAttr("group", 1), 0,
            0, 0, 0 };
        if (s.group < 1 || s.cin % s.group != 0 || s.cout % s.group != 0 || ws[1] * s.group != s.cin)
            throw Error(label(node) + ": weight " + formatShape(ws) + " does not fit input " + formatShape(x.shape())
                + " in " + std::to_string(s.group) + " group(s)");
        s.cinG = s.cin / s.group;
        s.coutG = s.cout / s.group;
        s.patch = s.cinG * s.w.kd * s.w.kh * s.w.kw;
        s.pixels = s.w.od * s.w.oh * s.w.ow;
        return s;
    }

    // Values of one image's channel: its (depth,) height and width.
    long long volumeOf(const math::Window& w)
    {
        return w.id * w.h * w.w;
    }

    ConvParams cudnnParams(const Node& node, const ConvShape& s)
    {
        const auto pads = node.intsAttr("pads");
        const bool symmetric = pads.empty() || (pads.size() == 4 && pads[0] == pads[2] && pads[1] == pads[3]);
        return { s.w, s.n, s.cin, s.cout, s.group, symmetric };
    }

    // out (N, C, pixels) += bias[c] (cuDNN's output has no bias).
    __global__ void channelBiasKernel(float* out, const float* bias, long long channels, long long pixels, long long n)
    {
        PS_FOR_EACH(e, n)
        out[e] += bias[(e / pixels) % channels];
    }

    std::int64_t imagesPerChunk(const ConvShape& s)
    {
        const auto perImage = std::max<std::int64_t>(1, s.cin * s.w.kd * s.w.kh * s.w.kw * s.pixels * 4);
        return std::clamp<std::int64_t>(kColumnBytes / perImage, 1, std::max<std::int64_t>(s.n, 1));
    }

    __global__ void im2colKernel(
        const float* x, float* col, long long channels, math::Window w, long long columns, long long total)
    {
        PS_FOR_EACH(e, total)
        col[e] = math::im2colTap(x, channels, w, e / columns, e % columns);
    }

    // Wide (cout, images * pixels) <-> the array's (images, cout, pixels); toWide adds nothing,
    // fromWide adds the bias (or nothing).
    __global__ void fromWideKernel(
        const float* wide, const float* bias, float* out, long long images, long long channels, long long pixels)
    {
        PS_FOR_EACH(e, images * channels * pixels)
        {
            const long long p = e % pixels;
            const long long f = (e / pixels) % channels;
            const long long i = e / (pixels * channels);
            out[e] = wide[f * images * pixels + i * pixels + p] + (bias != nullptr ? bias[f] : 0.0F);
        }
    }

    __global__ void toWideKernel(const float* in, float* wide, long long images, long long channels, long long pixels)
    {
        PS_FOR_EACH(e, images * channels * pixels)
        {
            const long long p = e % pixels;
            const long long i = (e / pixels) % images;
            const long long f = e / (pixels * images);
            wide[e] = in[(i * channels + f) * pixels + p];
        }
    }

    __global__ void col2imKernel(const float* dcol, float* dx, long long channels, math::Window w, long long images)
    {
        const long long columns = images * w.od * w.oh * w.ow;
        PS_FOR_EACH(e, images * channels * w.id * w.h * w.w)
        {
            const long long ix = e % w.w;
            const long long iy = (e / w.w) % w.h;
            const long long iz = (e / (w.w * w.h)) % w.id;
            const long long c = (e / (w.w * w.h * w.id)) % channels;
            const long long i = e / (w.w * w.h * w.id * channels);
            dx[e] = math::col2imPixel(dcol, columns, w, i, c, iz, iy, ix);
        }
    }

    // The wide column matrix of images [first, first + count).
    NdArray columnsOf(const NdArray& x, const ConvShape& s, std::int64_t first, std::int64_t count, KernelContext& ctx,
        const Node& node)
    {
        const auto columns = count * s.pixels;
        auto col = NdArray::empty(ctx.allocator, { s.cin * s.w.kd * s.w.kh * s.w.kw, columns });
        const auto total = col.numel();
        if (total > 0)
            im2colKernel<<<blocksFor(total), kThreads>>>(
                f32(x) + first * s.cin * volumeOf(s.w), f32(col), s.cin, s.w, columns, total);
        checkLaunch(label(node) + " im2col");
        return col;
    }

    // Sums of channel ch of an (N, C, spatial) array (and of its squares), lanes combined in double.
    __global__ void channelSumsKernel(const float* x, const float* dy, long long n, long long channels,
        long long spatial, const float* mean, const float* rstd, double* sums, double* squares)
    {
        __shared__ double partialSum[kChannelLanes];
        __shared__ double partialSquares[kChannelLanes];
        const long long ch = blockIdx.x;
        const int lane = static_cast<int>(threadIdx.x);
        const auto part = dy == nullptr
            ? math::channelPartial(x, n, channels, spatial, ch, lane, kChannelLanes)
            : math::channelGradPartial(x, dy, n, channels, spatial, ch, mean[ch], rstd[ch], lane, kChannelLanes);
        partialSum[lane] = part.sum;
        partialSquares[lane] = part.squares;
        __syncthreads();
        for (int half = kChannelLanes / 2; half > 0; half /= 2) {
            if (lane < half) {
                partialSum[lane] += partialSum[lane + half];
                partialSquares[lane] += partialSquares[lane + half];
            }
            __syncthreads();
        }
        if (lane == 0) {
            sums[ch] = partialSum[0];
            squares[ch] = partialSquares[0];
        }
    }

    struct Sums
    {
        NdArray sum, squares; // (C) doubles, as U8 arrays of 8 bytes per channel
    };

    Sums channelSums(const NdArray& x, const NdArray* dy, const NdArray* mean, const NdArray* rstd, KernelContext& ctx,
        const Node& node)
    {
        const auto& xs = x.shape();
        const auto n = xs[0];
        const auto c = xs[1];
        const auto spatial = n * c > 0 ? x.numel() / (n * c) : 0;
        Sums s { NdArray::empty(ctx.allocator, { 8 * c }, DType::U8),
            NdArray::empty(ctx.allocator, { 8 * c }, DType::U8) };
        if (c > 0)
            channelSumsKernel<<<static_cast<unsigned>(c), kChannelLanes>>>(f32(x), dy ? f32(*dy) : nullptr, n, c,
                spatial, mean ? f32(*mean) : nullptr, rstd ? f32(*rstd) : nullptr, reinterpret_cast<double*>(u8(s.sum)),
                reinterpret_cast<double*>(u8(s.squares)));
        checkLaunch(label(node) + " channel sums");
        return s;
    }

    __global__ void doubleToFloatKernel(const double* in, float* out, long long n)
    {
        PS_FOR_EACH(i, n)
        out[i] = static_cast<float>(in[i]);
    }

    NdArray asFloats(const NdArray& doubles, std::int64_t n, KernelContext& ctx, const Node& node)
    {
        auto out = NdArray::empty(ctx.allocator, { n });
        if (n > 0)
            doubleToFloatKernel<<<blocksFor(n), kThreads>>>(reinterpret_cast<const double*>(u8(doubles)), f32(out), n);
        checkLaunch(label(node));
        return out;
    }

    void convForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto s = convShape(node, x, v.in[1]);
        const float* bias = v.in.size() > 2 ? f32(v.in[2]) : nullptr;
        auto out = NdArray::empty(ctx.allocator,
            x.shape().size() == 5 ? Shape { s.n, s.cout, s.w.od, s.w.oh, s.w.ow }
                                  : Shape { s.n, s.cout, s.w.oh, s.w.ow });
        if (cudnnConvForward(node, cudnnParams(node, s), x, v.in[1], out, ctx)) {
            const auto total = out.numel();
            if (bias != nullptr && total > 0)
                channelBiasKernel<<<blocksFor(total), kThreads>>>(f32(out), bias, s.cout, s.pixels, total);
            checkLaunch(label(node) + " bias");
            v.out = { out };
            return;
        }
        const auto weight = gemmOperand(v.in[1], ctx, node);
        const auto chunk = imagesPerChunk(s);
        for (std::int64_t first = 0; first < s.n; first += chunk) {
            const auto count = std::min(chunk, s.n - first);
            const auto columns = count * s.pixels;
            const auto colArray = columnsOf(x, s, first, count, ctx, node);
            const auto col = gemmOperand(colArray, ctx, node);
            auto wide = NdArray::empty(ctx.allocator, { s.cout, columns });
            // per group: wide (coutG, columns) = W_g (coutG, patch) col_g (patch, columns)
            gemm(ctx.gemm, false, false, asInt(s.coutG, node), asInt(columns, node), asInt(s.patch, node), weight.at(0),
                asInt(s.patch, node), s.coutG * s.patch, col.at(0), asInt(columns, node), s.patch * columns, 0.0F,
                f32(wide), asInt(columns, node), s.coutG * columns, asInt(s.group, node));
            const auto total = count * s.cout * s.pixels;
            if (total > 0)
                fromWideKernel<<<blocksFor(total), kThreads>>>(
                    f32(wide), bias, f32(out) + first * s.cout * s.pixels, count, s.cout, s.pixels);
            checkLaunch(label(node));
        }
        v.out = { out };
    }

    void convBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto s = convShape(node, x, v.in[1]);
        const auto weight = gemmOperand(v.in[1], ctx, node);
        NdArray dx = g.needGrad[0] ? NdArray::empty(ctx.allocator, x.shape()) : NdArray();
        NdArray dw = !g.needGrad[1] ? NdArray()
            : s.n > 0               ? NdArray::empty(ctx.allocator, v.in[1].shape())
                                    : NdArray::zeros(ctx.allocator, v.in[1].shape()); // no image adds to it
        const bool viaCudnn = cudnnConvBackward(node, cudnnParams(node, s), x, v.in[1], dy,
            dx.defined() ? &dx : nullptr, dw.defined() ? &dw : nullptr, ctx);
        const auto chunk = viaCudnn ? s.n : imagesPerChunk(s);
        for (std::int64_t first = 0; !viaCudnn && first < s.n; first += chunk) {
            const auto count = std::min(chunk, s.n - first);
            const auto columns = count * s.pixels;
            const int cols = asInt(columns, node);
            auto wideArray = NdArray::empty(ctx.allocator, { s.cout, columns });
            const auto total = count * s.cout * s.pixels;
            if (total > 0)
                toWideKernel<<<blocksFor(total), kThreads>>>(
                    f32(dy) + first * s.cout * s.pixels, f32(wideArray), count, s.cout, s.pixels);
            checkLaunch(label(node));
            const auto wide = gemmOperand(wideArray, ctx, node);
            if (dw.defined()) { // dW_g (coutG, patch) += dY_g (coutG, columns) col_g^T
                const auto colArray = columnsOf(x, s, first, count, ctx, node);
                const auto col = gemmOperand(colArray, ctx, node);
                gemm(ctx.gemm, false, true, asInt(s.coutG, node), asInt(s.patch, node), cols, wide.at(0), cols,
                    s.coutG * columns, col.at(0), cols, s.patch * columns, first == 0 ? 0.0F : 1.0F, f32(dw),
                    asInt(s.patch, node), s.coutG * s.patch, asInt(s.group, node));
            }
            if (dx.defined()) { // dcol_g (patch, columns) = W_g^T dY_g, then gathered back to the images
                auto dcol = NdArray::empty(ctx.allocator, { s.cin * s.w.kd * s.w.kh * s.w.kw, columns });
                gemm(ctx.gemm, true, false, asInt(s.patch, node), cols, asInt(s.coutG, node), weight.at(0),
                    asInt(s.patch, node), s.coutG * s.patch, wide.at(0), cols, s.coutG * columns, 0.0F, f32(dcol), cols,
                    s.patch * columns, asInt(s.group, node));
                const auto pixelsIn = count * s.cin * volumeOf(s.w);
                if (pixelsIn > 0)
                    col2imKernel<<<blocksFor(pixelsIn), kThreads>>>(
                        f32(dcol), f32(dx) + first * s.cin * volumeOf(s.w), s.cin, s.w, count);
                checkLaunch(label(node) + " col2im");
            }
        }
        g.gradIn[0] = dx;
        g.gradIn[1] = dw;
        if (v.in.size() > 2 && g.needGrad[2])
            g.gradIn[2] = asFloats(channelSums(dy, nullptr, nullptr, nullptr, ctx, node).sum, s.cout, ctx, node);
    }

    // ---- ConvTranspose: the Conv of its output image (its weight as that Conv's), roles swapped ----

    // The Conv whose input gradient `node` computes: same window attributes, output_padding taken
    // off the end pads, so that its windows over the output image are exactly the input's H x W.
    Node asConv(const Node& node)
    {
        Node conv = node;
        conv.op = OpType::Conv;
        const auto extra = node.intsAttr("output_padding"); // one per spatial axis
        auto pads = node.intsAttr("pads"); // begins, then ends
        if (pads.empty())
            pads.assign(2 * extra.size(), 0);
        if (!extra.empty() && pads.size() == 2 * extra.size()) {
            for (std::size_t i = 0; i < extra.size(); ++i)
                pads[extra.size() + i] -= extra[i];
            conv.attrs["pads"] = pads;
        }
        conv.attrs.erase("output_padding");
        return conv;
    }

    void convTransposeForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& weight = v.in[1]; // (C, F / group, [kd,] kh, kw): a Conv weight from F to C channels
        requireF32(node, x);
        requireF32(node, weight);
        const auto& ws = weight.shape();
        const auto w = transposedConvWindow(node, x.shape(), ws);
        const auto filters = ws[1] * node.intAttr("group", 1);
        // y = dL/dz of Conv(z, W) at dL/dout = x, z of y's shape (allocated for its shape only).
        const Node conv = asConv(node);
        NodeValues cv;
        cv.in = { NdArray::empty(ctx.allocator,
                      x.shape().size() == 5 ? Shape { x.shape()[0], filters, w.id, w.h, w.w }
                                            : Shape { x.shape()[0], filters, w.h, w.w }),
            weight };
        const std::vector<NdArray> gradOut { x };
        const std::vector<bool> need { true, false };
        std::vector<NdArray> gradIn(2);
        BackwardArgs args { gradOut, need, gradIn };
        convBackward(conv, cv, args, ctx);
        auto out = gradIn[0];
        const auto total = out.numel();
        if (v.in.size() > 2 && total > 0)
            channelBiasKernel<<<blocksFor(total), kThreads>>>(f32(out), f32(v.in[2]), filters, volumeOf(w), total);
        checkLaunch(label(node) + " bias");
        v.out = { out };
    }

    void convTransposeBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const Node conv = asConv(node);
        if (g.needGrad[0]) { // dx = Conv(dy, W)
            NodeValues fwd;
            fwd.in = { dy, v.in[1] };
            convForward(conv, fwd, ctx);
            g.gradIn[0] = fwd.out[0];
        }
        if (g.needGrad[1]) { // dW: the Conv's weight gradient at input dy and output gradient x
            NodeValues cv;
            cv.in = { dy, v.in[1] };
            const std::vector<NdArray> gradOut { x };
            const std::vector<bool> need { false, true };
            std::vector<NdArray> gradIn(2);
            BackwardArgs args { gradOut, need, gradIn };
            convBackward(conv, cv, args, ctx);
            g.gradIn[1] = gradIn[1];
        }
        if (v.in.size() > 2 && g.needGrad[2]) {
            const auto filters = dy.shape()[1];
            g.gradIn[2] = asFloats(channelSums(dy, nullptr, nullptr, nullptr, ctx, node).sum, filters, ctx, node);
        }
    }

    // ---- BatchNorm ----

    __global__ void batchNormStatsKernel(const double* sums, const double* squares, float* mean, float* rstd,
        float* runningMean, float* runningVar, long long channels, double count, float eps, float momentum,
        bool training)
    {
        PS_FOR_EACH(ch, channels)
        {
            const math::ChannelSums s { training ? sums[ch] : 0.0, training ? squares[ch] : 0.0 };
            const auto st = math::batchNormStats(s, count, eps, momentum, training, runningMean[ch], runningVar[ch]);
            mean[ch] = st.mean;
            rstd[ch] = st.rstd;
        }
    }

    __global__ void batchNormKernel(const float* x, const float* mean, const float* rstd, const float* gamma,
        const float* beta, float* out, long long channels, long long spatial, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long ch = (e / spatial) % channels;
            out[e] = math::batchNormValue(x[e], mean[ch], rstd[ch], gamma[ch], beta[ch]);
        }
    }

    __global__ void batchNormGradKernel(const float* x, const float* dy, const float* mean, const float* rstd,
        const float* gamma, const double* sumDy, const double* sumDyXhat, float* dx, long long channels,
        long long spatial, double count, long long n)
    {
        PS_FOR_EACH(e, n)
        {
            const long long ch = (e / spatial) % channels;
            dx[e] = math::batchNormGradInput(x[e], dy[e], mean[ch], rstd[ch], gamma[ch],
                static_cast<float>(sumDy[ch] / count), static_cast<float>(sumDyXhat[ch] / count));
        }
    }

    BatchNormParams batchNormParams(const Node& node, const NdArray& x)
    {
        const auto n = x.shape()[0];
        const auto c = x.shape()[1];
        return { n, c, n * c > 0 ? x.numel() / (n * c) : 1, node.floatAttr("epsilon", 1e-5),
            node.floatAttr("momentum", 0.9) };
    }

    void batchNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        for (const auto& in : v.in)
            requireF32(node, in);
        const auto n = x.shape()[0];
        const auto c = x.shape()[1];
        const auto spatial = n * c > 0 ? x.numel() / (n * c) : 1;
        auto out = NdArray::empty(ctx.allocator, x.shape());
        auto mean = NdArray::empty(ctx.allocator, { c });
        auto rstd = NdArray::empty(ctx.allocator, { c });
        if (cudnnBatchNormForward(node, batchNormParams(node, x), v, out, mean, rstd, ctx)) {
            v.out = { out };
            v.saved = { mean, rstd };
            return;
        }
        const auto sums = ctx.training ? channelSums(x, nullptr, nullptr, nullptr, ctx, node) : Sums {};
        if (c > 0)
            batchNormStatsKernel<<<blocksFor(c), kThreads>>>(
                ctx.training ? reinterpret_cast<const double*>(u8(sums.sum)) : nullptr,
                ctx.training ? reinterpret_cast<const double*>(u8(sums.squares)) : nullptr, f32(mean), f32(rstd),
                f32(v.in[3]), f32(v.in[4]), c, static_cast<double>(n * spatial),
                static_cast<float>(node.floatAttr("epsilon", 1e-5)),
                static_cast<float>(node.floatAttr("momentum", 0.9)), ctx.training);
        checkLaunch(label(node) + " statistics");
        const auto total = x.numel();
        if (total > 0)
            batchNormKernel<<<blocksFor(total), kThreads>>>(
                f32(x), f32(mean), f32(rstd), f32(v.in[1]), f32(v.in[2]), f32(out), c, spatial, total);
        checkLaunch(label(node));
        v.out = { out };
        v.saved = { mean, rstd };
    }

    void batchNormBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto n = x.shape()[0];
        const auto c = x.shape()[1];
        const auto spatial = n * c > 0 ? x.numel() / (n * c) : 1;
        if (cudnnBatchNormBackward(node, batchNormParams(node, x), v, dy, g, ctx))
            return;
        const auto sums = channelSums(x, &dy, &v.saved[0], &v.saved[1], ctx, node); // sum(dy), sum(dy xhat)
        if (g.needGrad[0]) {
            auto dx = NdArray::empty(ctx.allocator, x.shape());
            const auto total = x.numel();
            if (total > 0)
                batchNormGradKernel<<<blocksFor(total), kThreads>>>(f32(x), f32(dy), f32(v.saved[0]), f32(v.saved[1]),
                    f32(v.in[1]), reinterpret_cast<const double*>(u8(sums.sum)),
                    reinterpret_cast<const double*>(u8(sums.squares)), f32(dx), c, spatial,
                    static_cast<double>(n * spatial), total);
            checkLaunch(label(node));
            g.gradIn[0] = dx;
        }
        if (g.needGrad[1])
            g.gradIn[1] = asFloats(sums.squares, c, ctx, node);
        if (g.needGrad[2])
            g.gradIn[2] = asFloats(sums.sum, c, ctx, node);
    }

} // namespace

void registerCudaConvKernels(KernelTable& table)
{
    table.add(OpType::Conv, { convForward, convBackward });
    table.add(OpType::ConvTranspose, { convTransposeForward, convTransposeBackward });
    table.add(OpType::BatchNorm, { batchNormForward, batchNormBackward });
}

} // namespace ps::engine::cuda
