#include "cpu/vector_loops.h"

#include "cpu/gemm_team.h"
#include "kernel_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ps::engine::cpu {
namespace {

// Not under the sanitizers: an ifunc resolver runs during relocation, before their runtimes are
// set up, and an instrumented one crashes the process at load (seen with TSan).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)                   \
    && !defined(__SANITIZE_ADDRESS__)
#define PS_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PS_VECTOR_CLONES
#endif

    // Below this many elements per thread, waking the team costs more than it saves.
    constexpr std::int64_t kMinLoopShare = std::int64_t { 1 } << 14;

    PS_VECTOR_CLONES void geluForwardRange(const float* __restrict x, float* __restrict y, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            y[i] = math::geluTanh(x[i]);
    }

    PS_VECTOR_CLONES void geluBackwardRange(
        const float* __restrict dy, const float* __restrict x, float* __restrict dx, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            dx[i] = dy[i] * math::geluTanhGrad(x[i]);
    }

    PS_VECTOR_CLONES void geluErfForwardRange(const float* __restrict x, float* __restrict y, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            y[i] = math::geluErf(x[i]);
    }

    PS_VECTOR_CLONES void geluErfBackwardRange(
        const float* __restrict dy, const float* __restrict x, float* __restrict dx, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            dx[i] = dy[i] * math::geluErfGrad(x[i]);
    }

    PS_VECTOR_CLONES void adamwRange(float* __restrict w, const float* __restrict grad, float* __restrict m,
        float* __restrict v, std::int64_t n, const math::AdamWCoefficients c)
    {
        for (std::int64_t i = 0; i < n; ++i)
            math::adamwElement(w[i], grad[i], m[i], v[i], c);
    }

    PS_VECTOR_CLONES void addIntoRange(float* __restrict dst, const float* __restrict src, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            dst[i] += src[i];
    }

    PS_VECTOR_CLONES void addRange(
        const float* __restrict a, const float* __restrict b, float* __restrict out, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            out[i] = a[i] + b[i];
    }

    constexpr int kLanes = 16;

    // Lane k holds the elements k, k + 16, ...; the lanes are combined pairwise, in a fixed order.
    template <typename T> T combineSum(T (&lane)[kLanes])
    {
        for (int width = kLanes / 2; width > 0; width /= 2) {
            for (int k = 0; k < width; ++k)
                lane[k] += lane[k + width];
        }
        return lane[0];
    }

    PS_VECTOR_CLONES void softmaxRange(
        const float* __restrict x, float* __restrict y, std::int64_t rows, std::int64_t c)
    {
        const std::int64_t blocked = c / kLanes * kLanes;
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* xr = x + r * c;
            float* yr = y + r * c;
            float top[kLanes];
            for (auto& t : top)
                t = -std::numeric_limits<float>::infinity();
            for (std::int64_t j = 0; j < blocked; j += kLanes) {
                for (int k = 0; k < kLanes; ++k)
                    top[k] = xr[j + k] > top[k] ? xr[j + k] : top[k];
            }
            float m = -std::numeric_limits<float>::infinity();
            for (const float t : top)
                m = t > m ? t : m;
            for (std::int64_t j = blocked; j < c; ++j)
                m = xr[j] > m ? xr[j] : m;
            double lane[kLanes] = {};
            for (std::int64_t j = 0; j < blocked; j += kLanes) {
                for (int k = 0; k < kLanes; ++k) {
                    yr[j + k] = math::expArith(xr[j + k] - m);
                    lane[k] += yr[j + k];
                }
            }
            for (std::int64_t j = blocked; j < c; ++j) {
                yr[j] = math::expArith(xr[j] - m);
                lane[j - blocked] += yr[j];
            }
            const auto inv = static_cast<float>(1.0 / combineSum(lane));
            for (std::int64_t j = 0; j < c; ++j)
                yr[j] *= inv;
        }
    }

    PS_VECTOR_CLONES void softmaxBackwardRange(
        const float* __restrict y, const float* __restrict dy, float* __restrict dx, std::int64_t rows, std::int64_t c)
    {
        const std::int64_t blocked = c / kLanes * kLanes;
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* yr = y + r * c;
            const float* gr = dy + r * c;
            double lane[kLanes] = {};
            for (std::int64_t j = 0; j < blocked; j += kLanes) {
                for (int k = 0; k < kLanes; ++k)
                    lane[k] += yr[j + k] * gr[j + k];
            }
            for (std::int64_t j = blocked; j < c; ++j)
                lane[j - blocked] += yr[j] * gr[j];
            const auto dot = static_cast<float>(combineSum(lane));
            float* o = dx + r * c;
            for (std::int64_t j = 0; j < c; ++j)
                o[j] = yr[j] * (gr[j] - dot);
        }
    }

    // Keys [0, visible) of row r pass the causal rule; padding may hide some of them too.
    std::int64_t visibleKeys(const ScoreMask& m, std::int64_t r)
    {
        const auto q = (r % m.rowsPerBatch) % m.tq;
        return m.causal ? std::clamp<std::int64_t>(q + m.tk - m.tq + 1, 0, m.tk) : m.tk;
    }
    bool padded(const ScoreMask& m, std::int64_t r, std::int64_t j)
    {
        const auto b = r / m.rowsPerBatch;
        return m.padF != nullptr ? m.padF[b * m.tk + j] == 0.0F : m.pad != nullptr && m.pad[b * m.tk + j] == 0;
    }

    void maskedSoftmaxRange(const float* x, float* y, std::int64_t first, std::int64_t last, std::int64_t c,
        float scale, const ScoreMask* mask)
    {
        std::vector<float> row(static_cast<std::size_t>(c));
        for (auto r = first; r < last; ++r) {
            const float* xr = x + r * c;
            const auto visible = mask != nullptr ? visibleKeys(*mask, r) : c;
            for (std::int64_t j = 0; j < visible; ++j)
                row[static_cast<std::size_t>(j)] = xr[j] * scale;
            std::fill(row.begin() + visible, row.end(), -std::numeric_limits<float>::infinity());
            if (mask != nullptr && (mask->pad != nullptr || mask->padF != nullptr)) {
                for (std::int64_t j = 0; j < visible; ++j) {
                    if (padded(*mask, r, j))
                        row[static_cast<std::size_t>(j)] = -std::numeric_limits<float>::infinity();
                }
            }
            softmaxRange(row.data(), y + r * c, 1, c);
        }
    }

    void maskedSoftmaxBackwardRange(const float* y, const float* dy, float* dx, std::int64_t first, std::int64_t last,
        std::int64_t c, float scale, const ScoreMask* mask)
    {
        softmaxBackwardRange(y + first * c, dy + first * c, dx + first * c, last - first, c);
        for (auto r = first; r < last; ++r) {
            float* o = dx + r * c;
            const auto visible = mask != nullptr ? visibleKeys(*mask, r) : c;
            const bool pads = mask != nullptr && (mask->pad != nullptr || mask->padF != nullptr);
            for (std::int64_t j = 0; j < visible; ++j)
                o[j] = (pads && padded(*mask, r, j) ? 0.0F : o[j]) * scale;
            std::fill(o + visible, o + c, 0.0F * scale);
        }
    }

    PS_VECTOR_CLONES void normForwardRange(const float* __restrict x, const float* __restrict gamma,
        const float* __restrict beta, float* __restrict y, float* __restrict mean, float* __restrict rstd,
        std::int64_t rows, std::int64_t c, float eps, bool rms)
    {
        const std::int64_t blocked = c / kLanes * kLanes;
        for (std::int64_t r = 0; r < rows; ++r) {
            const float* xr = x + r * c;
            double mu = 0;
            if (!rms) {
                double lane[kLanes] = {};
                for (std::int64_t j = 0; j < blocked; j += kLanes) {
                    for (int k = 0; k < kLanes; ++k)
                        lane[k] += xr[j + k];
                }
                for (std::int64_t j = blocked; j < c; ++j)
                    lane[j - blocked] += xr[j];
                mu = combineSum(lane) / static_cast<double>(c);
            }
            double lane[kLanes] = {};
            for (std::int64_t j = 0; j < blocked; j += kLanes) {
                for (int k = 0; k < kLanes; ++k)
                    lane[k] += (xr[j + k] - mu) * (xr[j + k] - mu);
            }
            for (std::int64_t j = blocked; j < c; ++j)
                lane[j - blocked] += (xr[j] - mu) * (xr[j] - mu);
            const auto rs = static_cast<float>(1.0 / std::sqrt(combineSum(lane) / static_cast<double>(c) + eps));
            const auto m = static_cast<float>(mu);
            mean[r] = m;
            rstd[r] = rs;
            float* yr = y + r * c;
            for (std::int64_t j = 0; j < c; ++j)
                yr[j] = (xr[j] - m) * rs * gamma[j] + (beta != nullptr ? beta[j] : 0.0F);
        }
    }

    // Rows [first, last): dx, and the block's column sums of dy * xhat into sumGamma and of dy into
    // sumBeta (null: RMSNorm or no beta).
    PS_VECTOR_CLONES void normBackwardRange(const float* __restrict x, const float* __restrict dy,
        const float* __restrict gamma, const float* __restrict mean, const float* __restrict rstd, float* __restrict dx,
        float* __restrict sumGamma, float* __restrict sumBeta, std::int64_t first, std::int64_t last, std::int64_t c,
        bool rms)
    {
        const std::int64_t blocked = c / kLanes * kLanes;
        for (std::int64_t j = 0; j < c; ++j) {
            sumGamma[j] = 0.0F;
            if (sumBeta != nullptr)
                sumBeta[j] = 0.0F;
        }
        for (std::int64_t r = first; r < last; ++r) {
            const float* xr = x + r * c;
            const float* gr = dy + r * c;
            const float mu = mean[r];
            const float rs = rstd[r];
            double lg[kLanes] = {};
            double lgx[kLanes] = {};
            for (std::int64_t j = 0; j < blocked; j += kLanes) {
                for (int k = 0; k < kLanes; ++k) {
                    const float xhat = (xr[j + k] - mu) * rs;
                    const float g = gr[j + k] * gamma[j + k];
                    lg[k] += g;
                    lgx[k] += g * xhat;
                    sumGamma[j + k] += gr[j + k] * xhat;
                }
            }
            for (std::int64_t j = blocked; j < c; ++j) {
                const float xhat = (xr[j] - mu) * rs;
                const float g = gr[j] * gamma[j];
                lg[j - blocked] += g;
                lgx[j - blocked] += g * xhat;
                sumGamma[j] += gr[j] * xhat;
            }
            if (sumBeta != nullptr) {
                for (std::int64_t j = 0; j < c; ++j)
                    sumBeta[j] += gr[j];
            }
            const auto mg = rms ? 0.0F : static_cast<float>(combineSum(lg) / static_cast<double>(c));
            const auto mgx = static_cast<float>(combineSum(lgx) / static_cast<double>(c));
            float* o = dx + r * c;
            for (std::int64_t j = 0; j < c; ++j) {
                const float xhat = (xr[j] - mu) * rs;
                o[j] = rs * (gr[j] * gamma[j] - mg - xhat * mgx);
            }
        }
    }

    std::int64_t normBlocks(std::int64_t rows)
    {
        constexpr std::int64_t kRowsPerBlock = 32;
        constexpr std::int64_t kMaxBlocks = 64;
        return std::clamp<std::int64_t>((rows + kRowsPerBlock - 1) / kRowsPerBlock, 1, kMaxBlocks);
    }

    // The element index is the global one (offset + i), so a split draws the same mask.
    PS_VECTOR_CLONES void dropoutForwardRange(const float* __restrict x, float* __restrict y,
        std::uint8_t* __restrict mask, std::int64_t n, std::int64_t offset, unsigned long long seed,
        unsigned int threshold, float keep)
    {
        for (std::int64_t i = 0; i < n; ++i) {
            const bool kept = math::dropoutKeep(seed, static_cast<unsigned long long>(offset + i), threshold);
            mask[i] = kept ? 1 : 0;
            y[i] = kept ? x[i] * keep : 0.0F;
        }
    }

    PS_VECTOR_CLONES void dropoutBackwardRange(const float* __restrict dy, const std::uint8_t* __restrict mask,
        float* __restrict dx, std::int64_t n, float keep)
    {
        for (std::int64_t i = 0; i < n; ++i)
            dx[i] = mask[i] != 0 ? dy[i] * keep : 0.0F;
    }

} // namespace

void dropoutForward(const float* x, float* y, std::uint8_t* mask, std::int64_t n, unsigned long long seed,
    unsigned int threshold, float keep)
{
    shareAcrossTeam(n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) {
        dropoutForwardRange(x + b, y + b, mask + b, e - b, b, seed, threshold, keep);
    });
}

void dropoutBackward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n, float keep)
{
    shareAcrossTeam(n, kMinLoopShare,
        [&](std::int64_t b, std::int64_t e) { dropoutBackwardRange(dy + b, mask + b, dx + b, e - b, keep); });
}

void softmaxRows(const float* x, float* y, std::int64_t rows, std::int64_t c)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinLoopShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) { softmaxRange(x + b * c, y + b * c, e - b, c); });
}

void softmaxBackwardRows(const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t c)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinLoopShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) { softmaxBackwardRange(y + b * c, dy + b * c, dx + b * c, e - b, c); });
}

void maskedSoftmaxRows(const float* x, float* y, std::int64_t rows, std::int64_t c, float scale, const ScoreMask* mask)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinLoopShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) { maskedSoftmaxRange(x, y, b, e, c, scale, mask); });
}

void maskedSoftmaxBackwardRows(
    const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t c, float scale, const ScoreMask* mask)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinLoopShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) { maskedSoftmaxBackwardRange(y, dy, dx, b, e, c, scale, mask); });
}

void normRowsForward(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
    std::int64_t rows, std::int64_t c, float eps, bool rms)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinLoopShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) {
            normForwardRange(x + b * c, gamma, beta, y + b * c, mean + b, rstd + b, e - b, c, eps, rms);
        });
}

std::int64_t normBackwardScratch(std::int64_t rows, std::int64_t c)
{
    return 2 * normBlocks(rows) * c;
}

void normRowsBackward(const float* x, const float* dy, const float* gamma, const float* mean, const float* rstd,
    float* dx, float* dgamma, float* dbeta, float* scratch, std::int64_t rows, std::int64_t c, bool rms)
{
    const auto blocks = normBlocks(rows);
    float* sums = scratch; // blocks x c: dy * xhat
    float* betaSums = scratch + blocks * c; // blocks x c: dy
    const auto rowsPerShare = std::max<std::int64_t>(1, kMinLoopShare / std::max<std::int64_t>(1, c));
    shareAcrossTeam(blocks, std::max<std::int64_t>(1, rowsPerShare * blocks / std::max<std::int64_t>(1, rows)),
        [&](std::int64_t b, std::int64_t e) {
            for (auto k = b; k < e; ++k)
                normBackwardRange(x, dy, gamma, mean, rstd, dx, sums + k * c,
                    dbeta != nullptr ? betaSums + k * c : nullptr, rows * k / blocks, rows * (k + 1) / blocks, c, rms);
        });
    for (std::int64_t j = 0; j < c; ++j) {
        double g = 0;
        double bsum = 0;
        for (std::int64_t k = 0; k < blocks; ++k) {
            g += sums[k * c + j];
            if (dbeta != nullptr)
                bsum += betaSums[k * c + j];
        }
        dgamma[j] = static_cast<float>(g);
        if (dbeta != nullptr)
            dbeta[j] = static_cast<float>(bsum);
    }
}

namespace {
    PS_VECTOR_CLONES float multiplyAddRounds(float* acc, std::int64_t iterations)
    {
        const float a = 0.999999F;
        const float b = 1e-7F;
        for (std::int64_t it = 0; it < iterations; ++it) {
            for (int i = 0; i < kMultiplyAddPeakFlops / 2; ++i)
                acc[i] = acc[i] * a + b;
        }
        float sum = 0;
        for (int i = 0; i < kMultiplyAddPeakFlops / 2; ++i)
            sum += acc[i];
        return sum;
    }
} // namespace

void geluErfForward(const float* x, float* y, std::int64_t n)
{
    shareAcrossTeam(
        n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) { geluErfForwardRange(x + b, y + b, e - b); });
}

void geluErfBackward(const float* dy, const float* x, float* dx, std::int64_t n)
{
    shareAcrossTeam(
        n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) { geluErfBackwardRange(dy + b, x + b, dx + b, e - b); });
}

void adamwStep(float* w, const float* grad, float* m, float* v, std::int64_t n, const math::AdamWCoefficients& c)
{
    shareAcrossTeam(
        n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) { adamwRange(w + b, grad + b, m + b, v + b, e - b, c); });
}

void addInto(float* dst, const float* src, std::int64_t n)
{
    shareAcrossTeam(n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) { addIntoRange(dst + b, src + b, e - b); });
}

void addArrays(const float* a, const float* b, float* out, std::int64_t n)
{
    shareAcrossTeam(n, kMinLoopShare, [&](std::int64_t s, std::int64_t e) { addRange(a + s, b + s, out + s, e - s); });
}

float multiplyAddPeakLoop(std::int64_t iterations)
{
    alignas(64) float acc[kMultiplyAddPeakFlops / 2];
    for (int i = 0; i < kMultiplyAddPeakFlops / 2; ++i)
        acc[i] = static_cast<float>(i) * 1e-3F;
    return multiplyAddRounds(acc, iterations);
}

void geluTanhForward(const float* x, float* y, std::int64_t n)
{
    shareAcrossTeam(n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) { geluForwardRange(x + b, y + b, e - b); });
}

void geluTanhBackward(const float* dy, const float* x, float* dx, std::int64_t n)
{
    shareAcrossTeam(
        n, kMinLoopShare, [&](std::int64_t b, std::int64_t e) { geluBackwardRange(dy + b, x + b, dx + b, e - b); });
}

} // namespace ps::engine::cpu
