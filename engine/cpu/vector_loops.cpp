#include "cpu/vector_loops.h"

#include "cpu/gemm_team.h"
#include "kernel_math.h"

#include <algorithm>
#include <limits>

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
    constexpr std::int64_t kMinShare = std::int64_t { 1 } << 14;

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
    shareAcrossTeam(n, kMinShare, [&](std::int64_t b, std::int64_t e) {
        dropoutForwardRange(x + b, y + b, mask + b, e - b, b, seed, threshold, keep);
    });
}

void dropoutBackward(const float* dy, const std::uint8_t* mask, float* dx, std::int64_t n, float keep)
{
    shareAcrossTeam(n, kMinShare,
        [&](std::int64_t b, std::int64_t e) { dropoutBackwardRange(dy + b, mask + b, dx + b, e - b, keep); });
}

void softmaxRows(const float* x, float* y, std::int64_t rows, std::int64_t c)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) { softmaxRange(x + b * c, y + b * c, e - b, c); });
}

void softmaxBackwardRows(const float* y, const float* dy, float* dx, std::int64_t rows, std::int64_t c)
{
    shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinShare / std::max<std::int64_t>(1, c)),
        [&](std::int64_t b, std::int64_t e) { softmaxBackwardRange(y + b * c, dy + b * c, dx + b * c, e - b, c); });
}

void geluTanhForward(const float* x, float* y, std::int64_t n)
{
    shareAcrossTeam(n, kMinShare, [&](std::int64_t b, std::int64_t e) { geluForwardRange(x + b, y + b, e - b); });
}

void geluTanhBackward(const float* dy, const float* x, float* dx, std::int64_t n)
{
    shareAcrossTeam(
        n, kMinShare, [&](std::int64_t b, std::int64_t e) { geluBackwardRange(dy + b, x + b, dx + b, e - b); });
}

} // namespace ps::engine::cpu
