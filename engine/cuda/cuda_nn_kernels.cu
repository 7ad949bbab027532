// CUDA kernels of Embedding, LayerNorm/RMSNorm, Softmax, Mask, Dropout and CrossEntropy. The row
// reductions run one warp per row in engine/row_math.h's blocking (lane partials, then a
// __shfl_xor_sync butterfly), the host reference the CPU tests check; the per-element math is
// row_math.h's and kernel_math.h's.
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_rows.cuh"
#include "kernel_math.h"
#include "row_math.h"

#include <algorithm>
#include <cstring>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

namespace ps::engine::cuda {
namespace {

    const dim3 kRowThreads = rowThreads();

    std::int64_t lastDim(const NdArray& a)
    {
        return a.shape().empty() ? 1 : a.shape().back();
    }

    // A device report of bad data: {1, the offending value} when a kernel found one, {0, 0} if not.
    struct Bad
    {
        std::int64_t found = 0;
        std::int64_t value = 0;
    };
    Bad readBad(const NdArray& flag)
    {
        Bad host;
        flag.memory().copy(reinterpret_cast<std::byte*>(&host), flag.data(), sizeof host);
        return host;
    }

    // ---- LayerNorm and RMSNorm ----

    __global__ void normForwardKernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
        float* rstd, std::int64_t rows, int c, float eps, bool rms)
    {
        const auto row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
        if (row >= rows)
            return;
        const int lane = static_cast<int>(threadIdx.x);
        const float* xr = x + row * c;
        const float mu = rms ? 0.0F : warpSum(math::laneSum(xr, c, lane)) / static_cast<float>(c);
        const float rs = math::normRstd(warpSum(math::laneSquaredDeviation(xr, c, lane, mu)), c, eps);
        for (int j = lane; j < c; j += math::kRowLanes)
            y[row * c + j] = math::normElement(xr[j], mu, rs, gamma[j], beta != nullptr ? beta[j] : 0.0F);
        if (lane == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
    }

    __global__ void normBackwardKernel(const float* x, const float* dy, const float* gamma, const float* mean,
        const float* rstd, float* dx, std::int64_t rows, int c, bool rms)
    {
        const auto row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
        if (row >= rows)
            return;
        const int lane = static_cast<int>(threadIdx.x);
        const float* xr = x + row * c;
        const float* gr = dy + row * c;
        float sumG = 0;
        float sumGX = 0;
        math::laneNormGradSums(xr, gr, gamma, c, lane, mean[row], rstd[row], sumG, sumGX);
        const float meanG = warpSum(sumG) / static_cast<float>(c);
        const float meanGX = warpSum(sumGX) / static_cast<float>(c);
        for (int j = lane; j < c; j += math::kRowLanes)
            dx[row * c + j] = math::normGradElement(xr[j], gr[j], gamma[j], mean[row], rstd[row], meanG, meanGX, rms);
    }

    // dgamma and dbeta: column sums over the rows (engine/column_math.h's two passes) of these.
    struct NormGammaGrad
    {
        const float* x;
        const float* dy;
        const float* mean;
        const float* rstd;
        std::int64_t c;
        PS_HOST_DEVICE float operator()(std::int64_t r, std::int64_t j) const
        {
            return dy[r * c + j] * (x[r * c + j] - mean[r]) * rstd[r];
        }
    };
    struct RowElement
    {
        const float* dy;
        std::int64_t c;
        PS_HOST_DEVICE float operator()(std::int64_t r, std::int64_t j) const
        {
            return dy[r * c + j];
        }
    };

    void normForward(const Node& node, NodeValues& v, KernelContext& ctx, bool rms)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto c = lastDim(x);
        const auto rows = c > 0 ? x.numel() / c : 0;
        auto out = NdArray::empty(ctx.allocator, x.shape());
        auto mean = NdArray::empty(ctx.allocator, { rows });
        auto rstd = NdArray::empty(ctx.allocator, { rows });
        const float* beta = !rms && v.in.size() > 2 ? f32(v.in[2]) : nullptr;
        if (rows > 0)
            normForwardKernel<<<rowBlocks(rows), kRowThreads>>>(f32(x), f32(v.in[1]), beta, f32(out), f32(mean),
                f32(rstd), rows, static_cast<int>(c), static_cast<float>(node.floatAttr("epsilon", 1e-5)), rms);
        checkLaunch("node '" + node.name + "'");
        v.out = { out };
        v.saved = { mean, rstd };
    }

    void normBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx, bool rms)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto c = lastDim(x);
        const auto rows = c > 0 ? x.numel() / c : 0;
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        auto dgamma = NdArray::empty(ctx.allocator, v.in[1].shape());
        NdArray dbeta = !rms && v.in.size() > 2 ? NdArray::empty(ctx.allocator, v.in[2].shape()) : NdArray();
        if (rows > 0)
            normBackwardKernel<<<rowBlocks(rows), kRowThreads>>>(f32(x), f32(dy), f32(v.in[1]), f32(v.saved[0]),
                f32(v.saved[1]), f32(dx), rows, static_cast<int>(c), rms);
        columnSums(NormGammaGrad { f32(x), f32(dy), f32(v.saved[0]), f32(v.saved[1]), c }, rows, c, f32(dgamma),
            ctx.allocator);
        if (dbeta.defined())
            columnSums(RowElement { f32(dy), c }, rows, c, f32(dbeta), ctx.allocator);
        checkLaunch("node '" + node.name + "' backward");
        if (g.needGrad[0])
            g.gradIn[0] = dx;
        if (g.needGrad[1])
            g.gradIn[1] = dgamma;
        if (dbeta.defined() && g.needGrad[2])
            g.gradIn[2] = dbeta;
    }

    void layerNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        normForward(node, v, ctx, false);
    }
    void layerNormBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        normBackward(node, v, g, ctx, false);
    }
    void rmsNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        normForward(node, v, ctx, true);
    }
    void rmsNormBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        normBackward(node, v, g, ctx, true);
    }

    // ---- Softmax over the last dim ----

    __device__ void softmaxRow(const float* x, float* y, int c, int lane)
    {
        const float m = warpMax(math::laneMax(x, c, lane));
        const float inv = 1.0F / warpSum(math::laneExpSum(x, c, lane, m));
        for (int j = lane; j < c; j += math::kRowLanes)
            y[j] = expf(x[j] - m) * inv;
    }

    __global__ void softmaxKernel(const float* x, float* y, std::int64_t rows, int c)
    {
        const auto row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
        if (row < rows)
            softmaxRow(x + row * c, y + row * c, c, static_cast<int>(threadIdx.x));
    }

    __global__ void softmaxGradKernel(const float* y, const float* dy, float* dx, std::int64_t rows, int c)
    {
        const auto row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
        if (row >= rows)
            return;
        const int lane = static_cast<int>(threadIdx.x);
        const float dot = warpSum(math::laneDot(y + row * c, dy + row * c, c, lane));
        for (int j = lane; j < c; j += math::kRowLanes)
            dx[row * c + j] = math::softmaxGradElement(y[row * c + j], dy[row * c + j], dot);
    }

    void softmaxForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        auto out = NdArray::empty(ctx.allocator, x.shape());
        const auto c = lastDim(x);
        const auto rows = c > 0 ? x.numel() / c : 0;
        if (rows > 0)
            softmaxKernel<<<rowBlocks(rows), kRowThreads>>>(f32(x), f32(out), rows, static_cast<int>(c));
        checkLaunch("node '" + node.name + "'");
        v.out = { out };
    }

    void softmaxBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& y = v.out[0];
        auto dx = NdArray::empty(ctx.allocator, y.shape());
        const auto c = lastDim(y);
        const auto rows = c > 0 ? y.numel() / c : 0;
        if (rows > 0)
            softmaxGradKernel<<<rowBlocks(rows), kRowThreads>>>(
                f32(y), f32(g.gradOut[0]), f32(dx), rows, static_cast<int>(c));
        checkLaunch("node '" + node.name + "' backward");
        g.gradIn[0] = dx;
    }

    // ---- Mask: causal (key j visible to query i when j <= i + Tk - Tq) and padding (0 = masked) ----

    // One block per row (query) of scores at a time, its threads over the keys: the row's query
    // and batch come from one division per row, not three per element.
    __global__ void maskKernel(const float* in, float* out, float fill, std::int64_t rows, int tq, int tk,
        std::int64_t rowsPerBatch, bool causal, const std::int64_t* pad, const float* padF)
    {
        for (auto row = static_cast<std::int64_t>(blockIdx.x); row < rows; row += gridDim.x) {
            const auto q = static_cast<int>(row % tq);
            const auto b = row / rowsPerBatch;
            const float* src = in + row * tk;
            float* dst = out + row * tk;
            for (int j = static_cast<int>(threadIdx.x); j < tk; j += static_cast<int>(blockDim.x)) {
                bool masked = causal && j > q + tk - tq;
                if (!masked && pad != nullptr)
                    masked = pad[b * tk + j] == 0;
                if (!masked && padF != nullptr)
                    masked = padF[b * tk + j] == 0.0F;
                dst[j] = masked ? fill : src[j];
            }
        }
    }

    NdArray masked(const Node& node, const NodeValues& v, const NdArray& source, float fill, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& s = v.in[0].shape();
        if (s.size() < 2)
            throw Error("node '" + node.name + "': Mask needs scores of rank 2 or more, not " + formatShape(s));
        auto out = NdArray::empty(ctx.allocator, source.shape());
        const auto n = out.numel();
        const auto batches = s.size() > 2 ? s[0] : 1;
        const bool padded = v.in.size() > 1;
        const std::int64_t* pad = padded && v.in[1].dtype() == DType::I64 ? i64(v.in[1]) : nullptr;
        const float* padF = padded && v.in[1].dtype() == DType::F32 ? f32(v.in[1]) : nullptr;
        const auto tk = s.back();
        const auto rows = tk > 0 ? n / tk : 0;
        if (rows > 0)
            maskKernel<<<static_cast<unsigned>(std::min<std::int64_t>(rows, 1 << 20)), kThreads>>>(f32(source),
                f32(out), fill, rows, static_cast<int>(s[s.size() - 2]), static_cast<int>(tk), rows / batches,
                node.intAttr("causal", 0) != 0, pad, padF);
        checkLaunch("node '" + node.name + "'");
        return out;
    }

    void maskForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { masked(node, v, v.in[0], -INFINITY, ctx) };
    }

    void maskBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = masked(node, v, g.gradOut[0], 0.0F, ctx);
    }

    // ---- Dropout: kernel_math.h's counter-based keep decision; one seed per call from the
    // context's stream, as the CPU backend draws it (the same masks on both) ----

    __global__ void dropoutKernel(const float* x, float* y, std::uint8_t* mask, float keepScale,
        unsigned long long seed, unsigned int threshold, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            const bool kept = math::dropoutKeep(seed, static_cast<unsigned long long>(i), threshold);
            mask[i] = kept ? 1 : 0;
            y[i] = kept ? x[i] * keepScale : 0.0F;
        }
    }

    __global__ void dropoutGradKernel(
        const float* dy, const std::uint8_t* mask, float* dx, float keepScale, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            dx[i] = mask[i] != 0 ? dy[i] * keepScale : 0.0F;
    }

    void dropoutForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto p = node.floatAttr("p", 0.0);
        if (!ctx.training || p <= 0) {
            v.out = { x };
            return;
        }
        useDevice(ctx.allocator);
        auto mask = NdArray::empty(ctx.allocator, x.shape(), DType::U8);
        auto out = NdArray::empty(ctx.allocator, x.shape());
        const auto seed = static_cast<unsigned long long>(ctx.rng());
        const auto n = x.numel();
        if (n > 0)
            dropoutKernel<<<blocksFor(n), kThreads>>>(
                f32(x), f32(out), u8(mask), static_cast<float>(1.0 / (1.0 - p)), seed, math::dropoutThreshold(p), n);
        checkLaunch("node '" + node.name + "'");
        v.out = { out };
        v.saved = { mask };
    }

    void dropoutBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (v.saved.empty()) {
            g.gradIn[0] = g.gradOut[0];
            return;
        }
        useDevice(ctx.allocator);
        auto dx = NdArray::empty(ctx.allocator, v.in[0].shape());
        const auto n = dx.numel();
        if (n > 0)
            dropoutGradKernel<<<blocksFor(n), kThreads>>>(f32(g.gradOut[0]), u8(v.saved[0]), f32(dx),
                static_cast<float>(1.0 / (1.0 - node.floatAttr("p", 0.0))), n);
        checkLaunch("node '" + node.name + "' backward");
        g.gradIn[0] = dx;
    }

    // ---- Embedding: rows of the table (V, C) by id ----

    __global__ void embeddingKernel(const std::int64_t* ids, const float* table, float* out, std::int64_t n,
        std::int64_t c, std::int64_t vocab, std::int64_t* bad)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * c;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            const auto id = ids[i / c];
            if (id < 0 || id >= vocab) {
                bad[0] = 1;
                bad[1] = id;
                out[i] = 0.0F;
                continue;
            }
            out[i] = table[id * c + i % c];
        }
    }

    __global__ void iotaKernel(std::int64_t* out, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            out[i] = i;
    }

    // The table's gradient from the token positions sorted stably by id: the first position of each
    // id's run sums that id's rows of dy in token order, one thread per (run, column), so every
    // row has one writer and the sum is the CPU kernel's, in its order, bit for bit (an atomicAdd
    // per token made each run's float sums differ, and AdamW turns such differences in near-zero
    // gradients into different updates: found on an H100, GpuSelfTest.OneFOneBOnTwoVirtualDevices...).
    __global__ void embeddingGradKernel(const std::int64_t* sortedIds, const std::int64_t* positions, const float* dy,
        float* dtable, std::int64_t n, std::int64_t c)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n * c;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            const auto k = i / c;
            const auto id = sortedIds[k];
            if (k > 0 && sortedIds[k - 1] == id)
                continue;
            const auto col = i % c;
            float sum = 0.0F;
            for (auto m = k; m < n && sortedIds[m] == id; ++m)
                sum += dy[positions[m] * c + col];
            dtable[id * c + col] += sum;
        }
    }

    void embeddingForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& table = v.in[1];
        const auto vocab = table.shape()[0];
        const auto c = table.shape()[1];
        auto shape = x.shape();
        shape.push_back(c);
        auto out = NdArray::empty(ctx.allocator, shape);
        auto bad = NdArray::zeros(ctx.allocator, { 2 }, DType::I64);
        if (out.numel() > 0)
            embeddingKernel<<<blocksFor(out.numel()), kThreads>>>(
                i64(x), f32(table), f32(out), x.numel(), c, vocab, i64(bad));
        checkLaunch("node '" + node.name + "'");
        if (const auto b = readBad(bad); b.found != 0)
            throw Error("node '" + node.name + "': id " + std::to_string(b.value) + " is outside the table of "
                + std::to_string(vocab) + " rows");
        v.out = { out };
    }

    void embeddingBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (!g.needGrad[1])
            return;
        useDevice(ctx.allocator);
        auto dt = NdArray::zeros(ctx.allocator, v.in[1].shape());
        const auto c = v.in[1].shape()[1];
        const auto n = v.in[0].numel();
        if (n * c > 0) {
            if (n > std::numeric_limits<int>::max())
                throw Error(
                    label(node) + ": " + std::to_string(n) + " ids are more than the CUDA backend sorts at once");
            const auto count = static_cast<int>(n);
            auto order = NdArray::empty(ctx.allocator, { n }, DType::I64);
            auto positions = NdArray::empty(ctx.allocator, { n }, DType::I64);
            auto sortedIds = NdArray::empty(ctx.allocator, { n }, DType::I64);
            iotaKernel<<<blocksFor(n), kThreads>>>(i64(order), n);
            // Ids were checked against the table in the forward pass: the bits of vocab - 1 order them.
            int bits = 1;
            while (bits < 63 && (std::int64_t { 1 } << bits) < v.in[1].shape()[0])
                ++bits;
            std::size_t scratchBytes = 0;
            check(cub::DeviceRadixSort::SortPairs(
                      nullptr, scratchBytes, i64(v.in[0]), i64(sortedIds), i64(order), i64(positions), count, 0, bits),
                "node '" + node.name + "' backward: sorting the ids");
            auto scratch = NdArray::empty(
                ctx.allocator, { static_cast<std::int64_t>(std::max<std::size_t>(scratchBytes, 1)) }, DType::U8);
            check(cub::DeviceRadixSort::SortPairs(scratch.data(), scratchBytes, i64(v.in[0]), i64(sortedIds),
                      i64(order), i64(positions), count, 0, bits),
                "node '" + node.name + "' backward: sorting the ids");
            embeddingGradKernel<<<blocksFor(n * c), kThreads>>>(
                i64(sortedIds), i64(positions), f32(g.gradOut[0]), f32(dt), n, c);
        }
        checkLaunch("node '" + node.name + "' backward");
        g.gradIn[1] = dt;
    }

    // ---- Cross-entropy: mean over rows whose label is not negative (ignore_index -100) ----

    __global__ void crossEntropyRowsKernel(const float* logits, const std::int64_t* labels, float* probs,
        float* rowLoss, std::int64_t rows, int c, std::int64_t* bad)
    {
        const auto row = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
        if (row >= rows)
            return;
        const int lane = static_cast<int>(threadIdx.x);
        softmaxRow(logits + row * c, probs + row * c, c, lane);
        __syncwarp();
        if (lane != 0)
            return;
        const auto label = labels[row];
        if (label >= c) {
            bad[0] = 1;
            bad[1] = label;
            rowLoss[row] = 0.0F;
            return;
        }
        rowLoss[row] = label < 0 ? 0.0F : math::crossEntropyTerm(probs[row * c + label]);
    }

    // One warp: the mean of the counted rows' terms, in row_math.h's lane blocking over rows.
    __global__ void crossEntropyMeanKernel(
        const float* rowLoss, const std::int64_t* labels, float* loss, float* count, std::int64_t rows)
    {
        const int lane = static_cast<int>(threadIdx.x);
        float sum = 0.0F;
        float counted = 0.0F;
        for (std::int64_t r = lane; r < rows; r += math::kRowLanes) {
            if (labels[r] >= 0) {
                sum += rowLoss[r];
                counted += 1.0F;
            }
        }
        sum = warpSum(sum);
        counted = warpSum(counted);
        if (lane == 0) {
            loss[0] = counted > 0.0F ? sum / counted : 0.0F;
            count[0] = counted;
        }
    }

    __global__ void crossEntropyGradKernel(const float* probs, const std::int64_t* labels, const float* dy,
        const float* count, float* dx, std::int64_t n, std::int64_t c)
    {
        const float scale = count[0] > 0.0F ? dy[0] / count[0] : 0.0F;
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            const auto label = labels[i / c];
            dx[i] = label < 0 ? 0.0F : math::crossEntropyGradElement(probs[i], i % c == label, scale);
        }
    }

    void crossEntropyForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& logits = v.in[0];
        const auto c = lastDim(logits);
        const auto rows = c > 0 ? logits.numel() / c : 0;
        auto probs = NdArray::empty(ctx.allocator, logits.shape());
        auto rowLoss = NdArray::empty(ctx.allocator, { rows });
        auto bad = NdArray::zeros(ctx.allocator, { 2 }, DType::I64);
        auto out = NdArray::empty(ctx.allocator, {});
        auto count = NdArray::empty(ctx.allocator, {});
        if (rows > 0)
            crossEntropyRowsKernel<<<rowBlocks(rows), kRowThreads>>>(
                f32(logits), i64(v.in[1]), f32(probs), f32(rowLoss), rows, static_cast<int>(c), i64(bad));
        crossEntropyMeanKernel<<<1, math::kRowLanes>>>(f32(rowLoss), i64(v.in[1]), f32(out), f32(count), rows);
        checkLaunch("node '" + node.name + "'");
        if (const auto b = readBad(bad); b.found != 0)
            throw Error("node '" + node.name + "': label " + std::to_string(b.value) + " is out of range for "
                + std::to_string(c) + " classes");
        v.out = { out };
        v.saved = { probs, count };
    }

    void crossEntropyBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& probs = v.saved[0];
        auto dx = NdArray::empty(ctx.allocator, probs.shape());
        const auto n = probs.numel();
        if (n > 0)
            crossEntropyGradKernel<<<blocksFor(n), kThreads>>>(
                f32(probs), i64(v.in[1]), f32(g.gradOut[0]), f32(v.saved[1]), f32(dx), n, lastDim(probs));
        checkLaunch("node '" + node.name + "' backward");
        g.gradIn[0] = dx;
    }

} // namespace

void registerCudaNnKernels(KernelTable& table)
{
    table.add(OpType::Embedding, { embeddingForward, embeddingBackward });
    table.add(OpType::LayerNorm, { layerNormForward, layerNormBackward });
    table.add(OpType::RMSNorm, { rmsNormForward, rmsNormBackward });
    table.add(OpType::Softmax, { softmaxForward, softmaxBackward });
    table.add(OpType::Mask, { maskForward, maskBackward });
    table.add(OpType::Dropout, { dropoutForward, dropoutBackward });
    table.add(OpType::CrossEntropy, { crossEntropyForward, crossEntropyBackward });
}

} // namespace ps::engine::cuda
