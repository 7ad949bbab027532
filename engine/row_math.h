// Row reductions of the training kernels (LayerNorm/RMSNorm, Softmax, cross-entropy), in the
// blocking the CUDA kernels use, with a host reference of that same blocking (issue P14's rule
// for reductions): the GPU self-test compares the device's rows with these references, and the
// CPU tests compare the references with the CPU backend's kernels.
//
// Blocking: one warp of kRowLanes = 32 lanes per row. Lane l accumulates, in float, the elements
// l, l + 32, l + 64, ... (lane*Partial below, the same code on both sides); then the lanes combine
// by a butterfly: for offsets 16, 8, 4, 2, 1 every lane adds (or takes the max of) the value of
// lane l ^ offset (__shfl_xor_sync on the device, butterflyReference here). The order of every
// addition is the same on both sides; they still differ in the last bits where nvcc fuses a
// multiply and an add (its default) and where the device's expf/logf round differently, so the
// GPU self-test compares with a relative tolerance.
// Depends on: kernel_math.h (PS_HOST_DEVICE); no CUDA headers.
#pragma once

#include "kernel_math.h"

#include <cfloat>

namespace ps::engine::math {

inline constexpr int kRowLanes = 32;

// ---- Per-lane partials (lane l of kRowLanes over a row of n) ----

PS_HOST_DEVICE inline float laneSum(const float* x, int n, int lane)
{
    float s = 0.0F;
    for (int j = lane; j < n; j += kRowLanes)
        s += x[j];
    return s;
}

PS_HOST_DEVICE inline float laneSquaredDeviation(const float* x, int n, int lane, float mean)
{
    float s = 0.0F;
    for (int j = lane; j < n; j += kRowLanes) {
        const float d = x[j] - mean;
        s += d * d;
    }
    return s;
}

PS_HOST_DEVICE inline float laneMax(const float* x, int n, int lane)
{
    float m = -FLT_MAX;
    for (int j = lane; j < n; j += kRowLanes)
        m = fmaxf(m, x[j]);
    return m;
}

PS_HOST_DEVICE inline float laneExpSum(const float* x, int n, int lane, float max)
{
    float s = 0.0F;
    for (int j = lane; j < n; j += kRowLanes)
        s += expf(x[j] - max);
    return s;
}

PS_HOST_DEVICE inline float laneDot(const float* a, const float* b, int n, int lane)
{
    float s = 0.0F;
    for (int j = lane; j < n; j += kRowLanes)
        s += a[j] * b[j];
    return s;
}

// LayerNorm backward's two sums: dxhat = dy * gamma, sum of dxhat and of dxhat * xhat.
PS_HOST_DEVICE inline void laneNormGradSums(const float* x, const float* dy, const float* gamma, int n, int lane,
    float mean, float rstd, float& sumG, float& sumGX)
{
    sumG = 0.0F;
    sumGX = 0.0F;
    for (int j = lane; j < n; j += kRowLanes) {
        const float xhat = (x[j] - mean) * rstd;
        const float dxhat = dy[j] * gamma[j];
        sumG += dxhat;
        sumGX += dxhat * xhat;
    }
}

// ---- Per-element steps after the reductions ----

PS_HOST_DEVICE inline float normRstd(float sumSquares, int n, float eps)
{
    return 1.0F / sqrtf(sumSquares / static_cast<float>(n) + eps);
}

PS_HOST_DEVICE inline float normElement(float x, float mean, float rstd, float gamma, float beta)
{
    return (x - mean) * rstd * gamma + beta;
}

// dx of LayerNorm (meanG the mean of dxhat) or RMSNorm (rms: meanG unused).
PS_HOST_DEVICE inline float normGradElement(
    float x, float dy, float gamma, float mean, float rstd, float meanG, float meanGX, bool rms)
{
    const float xhat = (x - mean) * rstd;
    return rstd * (dy * gamma - (rms ? 0.0F : meanG) - xhat * meanGX);
}

PS_HOST_DEVICE inline float softmaxGradElement(float y, float dy, float dot)
{
    return y * (dy - dot);
}

// One row's loss term: -log p[label], p floored at the smallest normal float (as the CPU kernel).
PS_HOST_DEVICE inline float crossEntropyTerm(float probLabel)
{
    return -logf(fmaxf(probLabel, FLT_MIN));
}

PS_HOST_DEVICE inline float crossEntropyGradElement(float prob, bool isLabel, float scale)
{
    return (prob - (isLabel ? 1.0F : 0.0F)) * scale;
}

// ---- Host references of the warp blocking ----

// Every lane's value after the butterfly (they are all equal); `max` combines by fmaxf.
inline float butterflyReference(float (&lanes)[kRowLanes], bool max = false)
{
    for (int offset = kRowLanes / 2; offset > 0; offset /= 2) {
        float next[kRowLanes];
        for (int l = 0; l < kRowLanes; ++l)
            next[l] = max ? fmaxf(lanes[l], lanes[l ^ offset]) : lanes[l] + lanes[l ^ offset];
        for (int l = 0; l < kRowLanes; ++l)
            lanes[l] = next[l];
    }
    return lanes[0];
}

template <class Partial> float rowReference(Partial partial, bool max = false)
{
    float lanes[kRowLanes];
    for (int l = 0; l < kRowLanes; ++l)
        lanes[l] = partial(l);
    return butterflyReference(lanes, max);
}

// LayerNorm (or RMSNorm: rms, beta unused) of one row; writes y and returns mean and rstd.
inline void normRowReference(const float* x, const float* gamma, const float* beta, int n, float eps, bool rms,
    float* y, float& mean, float& rstd)
{
    mean = rms ? 0.0F : rowReference([&](int l) { return laneSum(x, n, l); }) / static_cast<float>(n);
    const float m = mean;
    rstd = normRstd(rowReference([&](int l) { return laneSquaredDeviation(x, n, l, m); }), n, eps);
    for (int j = 0; j < n; ++j)
        y[j] = normElement(x[j], mean, rstd, gamma[j], beta != nullptr ? beta[j] : 0.0F);
}

inline void normGradRowReference(
    const float* x, const float* dy, const float* gamma, int n, float mean, float rstd, bool rms, float* dx)
{
    float lanesG[kRowLanes];
    float lanesGX[kRowLanes];
    for (int l = 0; l < kRowLanes; ++l)
        laneNormGradSums(x, dy, gamma, n, l, mean, rstd, lanesG[l], lanesGX[l]);
    const float meanG = butterflyReference(lanesG) / static_cast<float>(n);
    const float meanGX = butterflyReference(lanesGX) / static_cast<float>(n);
    for (int j = 0; j < n; ++j)
        dx[j] = normGradElement(x[j], dy[j], gamma[j], mean, rstd, meanG, meanGX, rms);
}

inline void softmaxRowReference(const float* x, int n, float* y)
{
    const float m = rowReference([&](int l) { return laneMax(x, n, l); }, true);
    const float inv = 1.0F / rowReference([&](int l) { return laneExpSum(x, n, l, m); });
    for (int j = 0; j < n; ++j)
        y[j] = expf(x[j] - m) * inv;
}

inline void softmaxGradRowReference(const float* y, const float* dy, int n, float* dx)
{
    const float dot = rowReference([&](int l) { return laneDot(y, dy, n, l); });
    for (int j = 0; j < n; ++j)
        dx[j] = softmaxGradElement(y[j], dy[j], dot);
}

// The mean loss over the rows with a label >= 0, from each row's term: one warp sums the terms
// and counts the rows in the same lane blocking over rows (the device's finishing kernel).
inline float crossEntropyMeanReference(const float* rowLoss, const long long* labels, int rows, float& counted)
{
    float lanesSum[kRowLanes];
    float lanesCount[kRowLanes];
    for (int l = 0; l < kRowLanes; ++l) {
        lanesSum[l] = 0.0F;
        lanesCount[l] = 0.0F;
        for (int r = l; r < rows; r += kRowLanes) {
            if (labels[r] >= 0) {
                lanesSum[l] += rowLoss[r];
                lanesCount[l] += 1.0F;
            }
        }
    }
    const float sum = butterflyReference(lanesSum);
    counted = butterflyReference(lanesCount);
    return counted > 0.0F ? sum / counted : 0.0F;
}

} // namespace ps::engine::math
