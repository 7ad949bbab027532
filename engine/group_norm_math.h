// GroupNorm's math (Wu and He 2018, eq. 1-3: each sample's channels cut into `groups` groups, each
// group normalized over its channels and every position, then a scale and shift per channel), in
// the blocking the CUDA kernels use, with host references of it that the CPU tests compare with
// the CPU backend's kernels (issue P14's rule for reductions).
//
// x (N, C, S...) is viewed as rows r = n * groups + g of length (C / groups) * S (S the product of
// the spatial dims): row element j is channel g * (C / groups) + j / S at position j % S. Row
// statistics run one warp per row in engine/row_math.h's blocking (lane partials, butterfly); the
// per-element steps are row_math.h's normElement / normGradElement with the element's channel's
// gamma (1 and 0 where the node has no scale or shift). dgamma and dbeta are column sums
// (engine/column_math.h) over a (N * S) x C view.
// Depends on: kernel_math.h, row_math.h; no CUDA headers.
#pragma once

#include "kernel_math.h"
#include "row_math.h"

#include <cstdint>
#include <vector>

namespace ps::engine::math {

struct GroupNormLayout
{
    std::int64_t batch = 0; // N
    std::int64_t channels = 0; // C
    std::int64_t groups = 1;
    std::int64_t spatial = 1; // product of the dims after C

    PS_HOST_DEVICE std::int64_t rows() const
    {
        return batch * groups;
    }
    PS_HOST_DEVICE std::int64_t channelsPerGroup() const
    {
        return channels / groups;
    }
    PS_HOST_DEVICE std::int64_t rowLength() const
    {
        return channelsPerGroup() * spatial;
    }
    // The channel of element j of row r.
    PS_HOST_DEVICE std::int64_t channel(std::int64_t r, std::int64_t j) const
    {
        return (r % groups) * channelsPerGroup() + j / spatial;
    }
};

// The layout of an x of `shape` (N, C, ...) cut into `groups` groups (at least 1).
inline GroupNormLayout groupNormLayout(const std::vector<std::int64_t>& shape, std::int64_t groups)
{
    GroupNormLayout l;
    l.batch = shape.empty() ? 0 : shape[0];
    l.channels = shape.size() > 1 ? shape[1] : 1;
    l.groups = groups > 1 ? groups : 1;
    for (std::size_t i = 2; i < shape.size(); ++i)
        l.spatial *= shape[i];
    return l;
}

PS_HOST_DEVICE inline float channelValue(const float* v, std::int64_t c, float fallback)
{
    return v != nullptr ? v[c] : fallback;
}

// The backward's two row sums with the element's channel's gamma: dxhat = dy * gamma.
PS_HOST_DEVICE inline void laneGroupNormGradSums(const float* x, const float* dy, const float* gamma,
    const GroupNormLayout& l, std::int64_t row, int lane, float mean, float rstd, float& sumG, float& sumGX)
{
    sumG = 0.0F;
    sumGX = 0.0F;
    const auto n = l.rowLength();
    for (std::int64_t j = lane; j < n; j += kRowLanes) {
        const float xhat = (x[j] - mean) * rstd;
        const float dxhat = dy[j] * channelValue(gamma, l.channel(row, j), 1.0F);
        sumG += dxhat;
        sumGX += dxhat * xhat;
    }
}

// dgamma (with `shift` false) or dbeta of a (N * S) x C view: element (r, c) of sample r / S at
// position r % S.
struct GroupNormAffineGrad
{
    const float* x;
    const float* dy;
    const float* mean; // per row of the normalization (N * groups)
    const float* rstd;
    GroupNormLayout l;
    bool shift;

    PS_HOST_DEVICE float operator()(std::int64_t r, std::int64_t c) const
    {
        const auto n = r / l.spatial;
        const auto at = (n * l.channels + c) * l.spatial + r % l.spatial;
        if (shift)
            return dy[at];
        const auto row = n * l.groups + c / l.channelsPerGroup();
        return dy[at] * (x[at] - mean[row]) * rstd[row];
    }
};

// ---- Host references of the warp blocking (one row) ----

inline void groupNormRowReference(const float* x, const float* gamma, const float* beta, const GroupNormLayout& l,
    std::int64_t row, float eps, float* y, float& mean, float& rstd)
{
    const int n = static_cast<int>(l.rowLength());
    mean = rowReference([&](int lane) { return laneSum(x, n, lane); }) / static_cast<float>(n);
    const float m = mean;
    rstd = normRstd(rowReference([&](int lane) { return laneSquaredDeviation(x, n, lane, m); }), n, eps);
    for (int j = 0; j < n; ++j) {
        const auto c = l.channel(row, j);
        y[j] = normElement(x[j], mean, rstd, channelValue(gamma, c, 1.0F), channelValue(beta, c, 0.0F));
    }
}

inline void groupNormGradRowReference(const float* x, const float* dy, const float* gamma, const GroupNormLayout& l,
    std::int64_t row, float mean, float rstd, float* dx)
{
    float lanesG[kRowLanes];
    float lanesGX[kRowLanes];
    for (int lane = 0; lane < kRowLanes; ++lane)
        laneGroupNormGradSums(x, dy, gamma, l, row, lane, mean, rstd, lanesG[lane], lanesGX[lane]);
    const auto n = l.rowLength();
    const float meanG = butterflyReference(lanesG) / static_cast<float>(n);
    const float meanGX = butterflyReference(lanesGX) / static_cast<float>(n);
    for (std::int64_t j = 0; j < n; ++j)
        dx[j] = normGradElement(
            x[j], dy[j], channelValue(gamma, l.channel(row, j), 1.0F), mean, rstd, meanG, meanGX, false);
}

} // namespace ps::engine::math
