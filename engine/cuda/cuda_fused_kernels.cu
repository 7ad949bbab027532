// The CUDA backend's fused kernels (engine/fusion.h): an attention score's Scale -> Mask -> Softmax
// in one pass. One warp per row, as engine/row_math.h blocks rows (lane partials, a butterfly);
// rows up to 1,024 keys stay in registers, so the scores are read once and the probabilities
// written once, and a masked key is never read. Longer rows take three passes over the row.
// Backward: dx = scale * (masked ? 0 : row_math's softmaxGradElement(y, dy, sum(y * dy))).
#include "attention_kernel.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_rows.cuh"

#include <type_traits>

namespace ps::engine::cuda {
namespace {

    constexpr int kMaxPerLane = 32; // keys per lane held in registers: rows up to 1,024

    // The Mask node's rule (cpu/vector_loops.h's ScoreMask): off, or causal and/or padding.
    struct MaskRule
    {
        bool on = false;
        bool causal = false;
        long long tq = 1, tk = 1, rowsPerBatch = 1;
        const long long* pad = nullptr;
        const float* padF = nullptr;
    };

    // A row's view of the rule: keys [0, visible) pass the causal test; padding may hide more.
    struct RowMask
    {
        int visible;
        long long padBase;
        __device__ RowMask(const MaskRule& m, long long row, int c)
            : visible(c)
            , padBase(0)
        {
            if (!m.on)
                return;
            const long long q = (row % m.rowsPerBatch) % m.tq;
            if (m.causal) {
                const long long v = q + m.tk - m.tq + 1;
                visible = static_cast<int>(v < 0 ? 0 : (v > c ? c : v));
            }
            padBase = (row / m.rowsPerBatch) * m.tk;
        }
        __device__ bool hidden(const MaskRule& m, int j) const
        {
            if (j >= visible)
                return true;
            if (m.padF != nullptr)
                return m.padF[padBase + j] == 0.0F;
            return m.pad != nullptr && m.pad[padBase + j] == 0;
        }
    };

    template <int kPer>
    __global__ void maskedSoftmaxKernel(const float* x, float* y, long long rows, int c, float scale, MaskRule m)
    {
        const long long row = warpRow();
        if (row >= rows)
            return;
        const int lane = rowLane();
        const float* xr = x + row * c;
        float* yr = y + row * c;
        const RowMask rm(m, row, c);
        float v[kPer];
        float top = -INFINITY;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int j = lane + i * math::kRowLanes;
            v[i] = j < c && !rm.hidden(m, j) ? xr[j] * scale : -INFINITY;
            top = fmaxf(top, v[i]);
        }
        top = warpMax(top);
        float sum = 0.0F;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int j = lane + i * math::kRowLanes;
            v[i] = j < c ? expf(v[i] - top) : 0.0F;
            sum += v[i];
        }
        const float inv = 1.0F / warpSum(sum);
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int j = lane + i * math::kRowLanes;
            if (j < c)
                yr[j] = v[i] * inv;
        }
    }

    __global__ void maskedSoftmaxLongKernel(const float* x, float* y, long long rows, int c, float scale, MaskRule m)
    {
        const long long row = warpRow();
        if (row >= rows)
            return;
        const int lane = rowLane();
        const float* xr = x + row * c;
        float* yr = y + row * c;
        const RowMask rm(m, row, c);
        float top = -INFINITY;
        for (int j = lane; j < c; j += math::kRowLanes)
            top = fmaxf(top, rm.hidden(m, j) ? -INFINITY : xr[j] * scale);
        top = warpMax(top);
        float sum = 0.0F;
        for (int j = lane; j < c; j += math::kRowLanes)
            sum += expf((rm.hidden(m, j) ? -INFINITY : xr[j] * scale) - top);
        const float inv = 1.0F / warpSum(sum);
        for (int j = lane; j < c; j += math::kRowLanes)
            yr[j] = expf((rm.hidden(m, j) ? -INFINITY : xr[j] * scale) - top) * inv;
    }

    template <int kPer>
    __global__ void maskedSoftmaxGradKernel(
        const float* y, const float* dy, float* dx, long long rows, int c, float scale, MaskRule m)
    {
        const long long row = warpRow();
        if (row >= rows)
            return;
        const int lane = rowLane();
        const long long base = row * c;
        const RowMask rm(m, row, c);
        float yv[kPer];
        float gv[kPer];
        float dot = 0.0F;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int j = lane + i * math::kRowLanes;
            const bool live = j < c && !rm.hidden(m, j); // a hidden key's probability is 0
            yv[i] = live ? y[base + j] : 0.0F;
            gv[i] = live ? dy[base + j] : 0.0F;
            dot += yv[i] * gv[i];
        }
        dot = warpSum(dot);
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
            const int j = lane + i * math::kRowLanes;
            if (j < c)
                dx[base + j] = rm.hidden(m, j) ? 0.0F : scale * math::softmaxGradElement(yv[i], gv[i], dot);
        }
    }

    __global__ void maskedSoftmaxGradLongKernel(
        const float* y, const float* dy, float* dx, long long rows, int c, float scale, MaskRule m)
    {
        const long long row = warpRow();
        if (row >= rows)
            return;
        const int lane = rowLane();
        const long long base = row * c;
        const RowMask rm(m, row, c);
        float dot = 0.0F;
        for (int j = lane; j < c; j += math::kRowLanes)
            dot += rm.hidden(m, j) ? 0.0F : y[base + j] * dy[base + j];
        dot = warpSum(dot);
        for (int j = lane; j < c; j += math::kRowLanes)
            dx[base + j] = rm.hidden(m, j) ? 0.0F : scale * math::softmaxGradElement(y[base + j], dy[base + j], dot);
    }

    MaskRule ruleOf(const Shape& s, const MaskedSoftmaxArgs& a)
    {
        MaskRule m;
        m.on = (a.causal || a.padding.defined()) && s.size() >= 2;
        if (!m.on)
            return m;
        m.causal = a.causal;
        m.tk = s.back();
        m.tq = s[s.size() - 2];
        const auto rows = m.tk > 0 ? numElements(s) / m.tk : 0;
        const auto batches = s.size() > 2 ? s[0] : 1;
        m.rowsPerBatch = std::max<long long>(1, rows / std::max<long long>(1, batches));
        if (a.padding.defined() && a.padding.dtype() == DType::I64)
            m.pad = reinterpret_cast<const long long*>(i64(a.padding));
        else if (a.padding.defined())
            m.padF = f32(a.padding);
        return m;
    }

    // Registers per lane for a row of c keys: the next power of two of c / 32, 0 when too long.
    int perLane(std::int64_t c)
    {
        int per = 1;
        while (per * math::kRowLanes < c && per < kMaxPerLane)
            per *= 2;
        return per * math::kRowLanes >= c ? per : 0;
    }

    const dim3 kRowThreads = rowThreads();

    // Calls launch(std::integral_constant<int, P>) with P the registers per lane for rows of c
    // keys (0: the three-pass kernel).
    template <typename Launch> void byRowLength(std::int64_t c, Launch launch)
    {
        switch (perLane(c)) {
        case 1:
            return launch(std::integral_constant<int, 1> {});
        case 2:
            return launch(std::integral_constant<int, 2> {});
        case 4:
            return launch(std::integral_constant<int, 4> {});
        case 8:
            return launch(std::integral_constant<int, 8> {});
        case 16:
            return launch(std::integral_constant<int, 16> {});
        case 32:
            return launch(std::integral_constant<int, 32> {});
        default:
            return launch(std::integral_constant<int, 0> {});
        }
    }

    NdArray maskedSoftmaxForward(const NdArray& x, const MaskedSoftmaxArgs& a, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        auto y = NdArray::empty(ctx.allocator, x.shape());
        const auto c = x.shape().empty() ? 1 : x.shape().back();
        const auto rows = c > 0 ? x.numel() / c : 0;
        const auto m = ruleOf(x.shape(), a);
        const int ci = static_cast<int>(c);
        const float* px = f32(x);
        float* py = f32(y);
        if (rows > 0) {
            byRowLength(c, [&](auto per) {
                if constexpr (decltype(per)::value == 0)
                    maskedSoftmaxLongKernel<<<rowBlocks(rows), kRowThreads>>>(px, py, rows, ci, a.scale, m);
                else
                    maskedSoftmaxKernel<decltype(per)::value>
                        <<<rowBlocks(rows), kRowThreads>>>(px, py, rows, ci, a.scale, m);
            });
        }
        checkLaunch("fused scale-mask-softmax");
        return y;
    }

    NdArray maskedSoftmaxBackward(const NdArray& y, const NdArray& dy, const MaskedSoftmaxArgs& a, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        auto dx = NdArray::empty(ctx.allocator, y.shape());
        const auto c = y.shape().empty() ? 1 : y.shape().back();
        const auto rows = c > 0 ? y.numel() / c : 0;
        const auto m = ruleOf(y.shape(), a);
        const int ci = static_cast<int>(c);
        const float* py = f32(y);
        const float* pg = f32(dy);
        float* pd = f32(dx);
        if (rows > 0) {
            byRowLength(c, [&](auto per) {
                if constexpr (decltype(per)::value == 0)
                    maskedSoftmaxGradLongKernel<<<rowBlocks(rows), kRowThreads>>>(py, pg, pd, rows, ci, a.scale, m);
                else
                    maskedSoftmaxGradKernel<decltype(per)::value>
                        <<<rowBlocks(rows), kRowThreads>>>(py, pg, pd, rows, ci, a.scale, m);
            });
        }
        checkLaunch("fused scale-mask-softmax backward");
        return dx;
    }
} // namespace

namespace {

    // Attention (engine/attention_kernel.h) over the kernels of the GPU the allocator is on.
    const KernelTable& tableOf(Allocator& allocator)
    {
        useDevice(allocator);
        int device = 0;
        check(cudaGetDevice(&device), allocator.device());
        return cudaBackend(device).kernels();
    }

    void attentionForwardCuda(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        attentionForward(tableOf(ctx.allocator), node, v, ctx);
    }

    void attentionBackwardCuda(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        attentionBackward(tableOf(ctx.allocator), node, v, g, ctx);
    }

} // namespace

void registerCudaFusedKernels(KernelTable& table)
{
    table.setMaskedSoftmax({ maskedSoftmaxForward, maskedSoftmaxBackward });
    table.add(OpType::Attention, { attentionForwardCuda, attentionBackwardCuda });
}

} // namespace ps::engine::cuda
