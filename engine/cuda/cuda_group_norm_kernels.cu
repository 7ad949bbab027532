// CUDA kernels of GroupNorm: one warp per (sample, group) row in engine/row_math.h's blocking (the
// row statistics and the backward's two sums), the per-element math and the dgamma/dbeta column
// sums from engine/group_norm_math.h, which the CPU tests check against the CPU kernels.
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_rows.cuh"
#include "group_norm_math.h"

#include <algorithm>

namespace ps::engine::cuda {
namespace {

    __global__ void groupNormForwardKernel(const float* x, const float* gamma, const float* beta, float* y, float* mean,
        float* rstd, math::GroupNormLayout l, float eps)
    {
        const auto row = warpRow();
        if (row >= l.rows())
            return;
        const int lane = rowLane();
        const auto n = l.rowLength();
        const float* xr = x + row * n;
        const float mu = warpSum(math::laneSum(xr, static_cast<int>(n), lane)) / static_cast<float>(n);
        const float rs = math::normRstd(
            warpSum(math::laneSquaredDeviation(xr, static_cast<int>(n), lane, mu)), static_cast<int>(n), eps);
        for (std::int64_t j = lane; j < n; j += math::kRowLanes) {
            const auto c = l.channel(row, j);
            y[row * n + j] =
                math::normElement(xr[j], mu, rs, math::channelValue(gamma, c, 1.0F), math::channelValue(beta, c, 0.0F));
        }
        if (lane == 0) {
            mean[row] = mu;
            rstd[row] = rs;
        }
    }

    __global__ void groupNormBackwardKernel(const float* x, const float* dy, const float* gamma, const float* mean,
        const float* rstd, float* dx, math::GroupNormLayout l)
    {
        const auto row = warpRow();
        if (row >= l.rows())
            return;
        const int lane = rowLane();
        const auto n = l.rowLength();
        const float* xr = x + row * n;
        const float* gr = dy + row * n;
        float sumG = 0;
        float sumGX = 0;
        math::laneGroupNormGradSums(xr, gr, gamma, l, row, lane, mean[row], rstd[row], sumG, sumGX);
        const float meanG = warpSum(sumG) / static_cast<float>(n);
        const float meanGX = warpSum(sumGX) / static_cast<float>(n);
        for (std::int64_t j = lane; j < n; j += math::kRowLanes)
            dx[row * n + j] = math::normGradElement(xr[j], gr[j], math::channelValue(gamma, l.channel(row, j), 1.0F),
                mean[row], rstd[row], meanG, meanGX, false);
    }

    const float* optional(const NodeValues& v, std::size_t i)
    {
        return v.in.size() > i ? f32(v.in[i]) : nullptr;
    }

    void groupNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto l = math::groupNormLayout(x.shape(), node.intAttr("groups", 1));
        auto out = NdArray::empty(ctx.allocator, x.shape());
        auto mean = NdArray::empty(ctx.allocator, { l.rows() });
        auto rstd = NdArray::empty(ctx.allocator, { l.rows() });
        if (l.rows() > 0 && l.rowLength() > 0)
            groupNormForwardKernel<<<rowBlocks(l.rows()), rowThreads()>>>(f32(x), optional(v, 1), optional(v, 2),
                f32(out), f32(mean), f32(rstd), l, static_cast<float>(node.floatAttr("epsilon", 1e-5)));
        checkLaunch("node '" + node.name + "'");
        v.out = { out };
        v.saved = { mean, rstd };
    }

    void groupNormBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto l = math::groupNormLayout(x.shape(), node.intAttr("groups", 1));
        const float* mean = f32(v.saved[0]);
        const float* rstd = f32(v.saved[1]);
        if (g.needGrad[0]) {
            auto dx = NdArray::empty(ctx.allocator, x.shape());
            if (l.rows() > 0 && l.rowLength() > 0)
                groupNormBackwardKernel<<<rowBlocks(l.rows()), rowThreads()>>>(
                    f32(x), f32(dy), optional(v, 1), mean, rstd, f32(dx), l);
            g.gradIn[0] = dx;
        }
        for (std::size_t i = 1; i < v.in.size() && i < 3; ++i) {
            if (!g.needGrad[i])
                continue;
            auto grad = NdArray::empty(ctx.allocator, v.in[i].shape());
            columnSums(math::GroupNormAffineGrad { f32(x), f32(dy), mean, rstd, l, i == 2 }, l.batch * l.spatial,
                l.channels, f32(grad), ctx.allocator);
            g.gradIn[i] = grad;
        }
        checkLaunch("node '" + node.name + "' backward");
    }

} // namespace

void registerCudaGroupNormKernels(KernelTable& table)
{
    table.add(OpType::GroupNorm, { groupNormForward, groupNormBackward });
}

} // namespace ps::engine::cuda
