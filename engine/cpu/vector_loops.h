// The CPU backend's hottest element-wise loops, compiled so that they vectorize (this file's
// translation unit gets -O3 -fno-trapping-math; with GCC on x86-64 each loop is also built for
// AVX-512 and AVX2 and picked at load time) and shared across the device's GEMM team. The math
// per element is engine/kernel_math.h's, the same the scalar kernels and the CUDA kernels run.
// Depends on: kernel_math.h, cpu/gemm_team.h.
#pragma once

#include "kernel_math.h"

#include <cstdint>

namespace ps::engine::cpu {

// y = geluTanh(x), n elements.
void geluTanhForward(const float* x, float* y, std::int64_t n);
// dx = dy * geluTanhGrad(x), n elements.
void geluTanhBackward(const float* dy, const float* x, float* dx, std::int64_t n);

// y = geluErf(x) and dx = dy * geluErfGrad(x) (GELU's exact form), n elements.
void geluErfForward(const float* x, float* y, std::int64_t n);
void geluErfBackward(const float* dy, const float* x, float* dx, std::int64_t n);

// Dropout: mask[i] = math::dropoutKeep(seed, i, threshold), y[i] = mask ? x[i] * keep : 0.
void dropoutForward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, unsigned long long seed,
    unsigned int threshold, float keep);
// dx[i] = mask[i] ? dy[i] * keep : 0.
void dropoutBackward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n, float keep);

// Softmax over the last axis: rows x c values. Row maxima, and sums in double, in 16 lanes combined
// in a fixed order (the same bits on every instruction set), e^x by math::expArith.
void softmaxRows(const float* x, float* y, std::int64_t rows, std::int64_t c);
// dx = y * (dy - sum(y * dy)) per row, the sum blocked as above.
void softmaxBackwardRows(const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t c);

// Which keys of attention-score rows a Mask node hides: row r of (..., Tq, Tk) scores is query
// r % Tq of batch r / rowsPerBatch; causal hides the keys j > q + Tk - Tq, padding those whose
// entry (batch, j) is 0 (pad or padF; neither: no padding).
struct ScoreMask
{
    std::int64_t tq = 1;
    std::int64_t tk = 1;
    std::int64_t rowsPerBatch = 1;
    bool causal = false;
    const std::int64_t* pad = nullptr;
    const float* padF = nullptr;
};
// Softmax of mask(x * scale) per row (mask nullptr: none), the bits of the Scale, Mask and
// Softmax kernels run one after another (engine/fusion.h).
void maskedSoftmaxRows(const float* x, float* y, std::int64_t rows, std::int64_t c, float scale, const ScoreMask* mask);
// Its backward: dx = (masked ? 0 : y * (dy - sum(y * dy))) * scale.
void maskedSoftmaxBackwardRows(
    const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t c, float scale, const ScoreMask* mask);

// LayerNorm (RMSNorm when `rms`: no mean taken, no beta) over the last axis of rows x c values:
// y = (x - mean) * rstd * gamma + beta, mean and rstd per row stored. The row sums run in double,
// in 16 lanes combined in a fixed order. `beta` may be null.
void normRowsForward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
    std::int64_t rows, std::int64_t c, float eps, bool rms);

// Floats of scratch normRowsBackward needs for rows x c (its per-block column sums).
[[nodiscard]] std::int64_t normBackwardScratch(std::int64_t rows, std::int64_t c);

// Its backward: dx per row; dgamma (and dbeta, when not null) written as sums over the rows, taken
// per block of rows (at most 64 blocks, fixed by `rows` alone) and the blocks added in order, so the
// bits do not depend on how the device's team shares the blocks.
void normRowsBackward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
    float* dx, float* dgamma, float* dbeta, float* scratch, std::int64_t rows, std::int64_t c, bool rms);

// dst += src and out = a + b over n elements (gradient accumulation, a value's gradients from its
// several readers): each element one rounded add, as the scalar loops did; the arrays do not overlap.
void addInto(float* dst, const float* src, std::int64_t n);
void addArrays(const float* a, const float* b, float* out, std::int64_t n);

// torch.optim.AdamW's step over n elements, kernel_math.h's adamwElement per element (the same bits
// as the scalar loop: square roots and divisions are correctly rounded in every lane).
void adamwStep(float* w, const float* grad, float* m, float* v, std::int64_t n, const math::AdamWCoefficients& c);

// The vector peak of these loops, for the CPU probe (engine/cpu_probe.h): `iterations` rounds of
// kMultiplyAddPeakFlops FLOPs (independent multiply-add chains, as wide as the instruction set
// picked at load time); returns a sum so that nothing is optimised away.
inline constexpr int kMultiplyAddPeakFlops = 2 * 128;
[[nodiscard]] float multiplyAddPeakLoop(std::int64_t iterations);

} // namespace ps::engine::cpu
