#include "cpu/packed_gemm.h"

#include "cpu/blas_core.h"

#include <algorithm>
#include <cblas.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define PS_PACKED_GEMM 1
// Packing and the micro-kernel touch only the caller's operands and its thread's own buffers; they
// are left uninstrumented by ThreadSanitizer, as OpenBLAS is (instrumented, every pipeline test under
// TSan would spend most of its time in GEMMs).
#define PS_UNRACED __attribute__((no_sanitize("thread")))
#define PS_AVX512 __attribute__((target("avx512f"), no_sanitize("thread")))
#else
#define PS_PACKED_GEMM 0
#endif

namespace ps::engine {

#if PS_PACKED_GEMM
namespace {

    constexpr int kMr = 12; // rows of a micro-tile: 24 accumulators, two per row
    constexpr int kNr = 32; // columns: two 16-float vectors
    constexpr std::int64_t kKc = 256; // depth of a block: a 256 x 32 panel of B (32 KiB) stays in L1
    constexpr std::int64_t kMc = 144; // rows of A a block reads across B's panels (144 KiB): L2
    constexpr std::int64_t kNc = 1024; // columns of a block of B (1 MiB): L2/L3

    // One thread's buffer for B's packed panels, 64-byte aligned, made on its first product (a
    // failed allocation throws, and the next product tries again).
    struct PackBuffer
    {
        float* b = nullptr;
        PackBuffer() = default;
        PackBuffer(const PackBuffer&) = delete;
        PackBuffer& operator=(const PackBuffer&) = delete;
        ~PackBuffer()
        {
            std::free(b);
        }
        float* get()
        {
            if (b == nullptr)
                b = static_cast<float*>(std::aligned_alloc(64, sizeof(float) * kKc * kNc));
            if (b == nullptr)
                throw std::bad_alloc();
            return b;
        }
    };
    thread_local PackBuffer tPack;

    // Depths [k0, k0 + kc) and columns [j0, j0 + nc) of op(B), as panels of kNr columns.
    PS_UNRACED void packB(bool transB, const float* b, std::int64_t ldb, std::int64_t k0, std::int64_t kc,
        std::int64_t j0, std::int64_t nc, float* out)
    {
        for (std::int64_t q = 0; q * kNr < nc; ++q) {
            const auto cols = std::min<std::int64_t>(kNr, nc - q * kNr);
            float* panel = out + q * kc * kNr;
            if (cols < kNr)
                std::memset(panel, 0, sizeof(float) * static_cast<std::size_t>(kc * kNr));
            if (transB) { // op(B)'s columns are B's rows: a column at a time
                for (std::int64_t j = 0; j < cols; ++j) {
                    const float* src = b + (j0 + q * kNr + j) * ldb + k0;
                    for (std::int64_t k = 0; k < kc; ++k)
                        panel[k * kNr + j] = src[k];
                }
                continue;
            }
            for (std::int64_t k = 0; k < kc; ++k)
                std::memcpy(
                    panel + k * kNr, b + (k0 + k) * ldb + j0 + q * kNr, sizeof(float) * static_cast<std::size_t>(cols));
        }
    }

    // C's rows x cols tile (at most kMr x kNr) = alpha A B + beta C over a panel of B and A read in
    // place: element (i, k) of the tile's rows at a[i aRow + k aK] (rows past `rows` read the last
    // one; their sums are not stored). Beta 0: C not read.
    PS_AVX512 void microKernel(std::int64_t kc, const float* __restrict a, std::int64_t aRow, std::int64_t aK,
        const float* __restrict b, float* c, std::int64_t ldc, int rows, int cols, float alpha, float beta)
    {
        __m512 acc[kMr][2];
        const float* aRows[kMr];
#pragma GCC unroll 12
        for (int i = 0; i < kMr; ++i) {
            acc[i][0] = _mm512_setzero_ps();
            acc[i][1] = _mm512_setzero_ps();
            aRows[i] = a + std::min(i, rows - 1) * aRow;
        }
        for (std::int64_t k = 0; k < kc; ++k) {
            const __m512 b0 = _mm512_load_ps(b + k * kNr);
            const __m512 b1 = _mm512_load_ps(b + k * kNr + 16);
            const std::int64_t at = k * aK;
#pragma GCC unroll 12
            for (int i = 0; i < kMr; ++i) {
                const __m512 ai = _mm512_set1_ps(aRows[i][at]);
                acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
            }
        }
        const auto lanes = [](int n) -> __mmask16 {
            return n >= 16 ? __mmask16 { 0xFFFF } : static_cast<__mmask16>((1U << std::max(n, 0)) - 1U);
        };
        const __mmask16 m0 = lanes(cols);
        const __mmask16 m1 = lanes(cols - 16);
        const __m512 va = _mm512_set1_ps(alpha);
        const __m512 vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
        for (int i = 0; i < kMr; ++i) {
            if (i < rows) {
                float* row = c + i * ldc;
                __m512 v0 = _mm512_mul_ps(va, acc[i][0]);
                __m512 v1 = _mm512_mul_ps(va, acc[i][1]);
                if (beta != 0.0F) {
                    v0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, row), v0);
                    v1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, row + 16), v1);
                }
                _mm512_mask_storeu_ps(row, m0, v0);
                _mm512_mask_storeu_ps(row + 16, m1, v1);
            }
        }
    }

    void scaleRows(std::int64_t m, std::int64_t n, float beta, float* c, std::int64_t ldc)
    {
        for (std::int64_t i = 0; i < m; ++i) {
            float* row = c + i * ldc;
            for (std::int64_t j = 0; j < n; ++j)
                row[j] = beta == 0.0F ? 0.0F : beta * row[j];
        }
    }

} // namespace

bool packedGemmAvailable()
{
    static const bool available = [] {
        __builtin_cpu_init(); // in case this runs during static initialisation
        return __builtin_cpu_supports("avx512f") != 0;
    }();
    return available;
}

void packedSgemm(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
    std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0 || alpha == 0.0F) { // C = beta C; A and B are not read (BLAS's rule)
        scaleRows(m, n, beta, c, ldc);
        return;
    }
    float* packedB = tPack.get();
    // op(A)'s element (i, k) is a[i aRow + k aK].
    const std::int64_t aRow = transA ? 1 : lda;
    const std::int64_t aK = transA ? lda : 1;
    for (std::int64_t jc = 0; jc < n; jc += kNc) {
        const auto nc = std::min(kNc, n - jc);
        for (std::int64_t pc = 0; pc < k; pc += kKc) {
            const auto kc = std::min(kKc, k - pc);
            packB(transB, b, ldb, pc, kc, jc, nc, packedB);
            const float blockBeta = pc == 0 ? beta : 1.0F; // later depths add to the first's sum
            for (std::int64_t ic = 0; ic < m; ic += kMc) {
                const auto mc = std::min(kMc, m - ic);
                for (std::int64_t q = 0; q * kNr < nc; ++q) {
                    const auto cols = static_cast<int>(std::min<std::int64_t>(kNr, nc - q * kNr));
                    for (std::int64_t p = 0; p * kMr < mc; ++p) {
                        const auto rows = static_cast<int>(std::min<std::int64_t>(kMr, mc - p * kMr));
                        const auto i0 = ic + p * kMr; // op(A)'s first row here, read in place
                        microKernel(kc, transA ? a + pc * lda + i0 : a + i0 * lda + pc, aRow, aK,
                            packedB + q * kc * kNr, c + i0 * ldc + jc + q * kNr, ldc, rows, cols, alpha, blockBeta);
                    }
                }
            }
        }
    }
}

#else

bool packedGemmAvailable()
{
    return false;
}

void packedSgemm(bool, bool, std::int64_t, std::int64_t, std::int64_t, float, const float*, std::int64_t, const float*,
    std::int64_t, float, float*, std::int64_t)
{
    throw std::logic_error("packedSgemm: this build has no AVX-512 GEMM");
}

#endif

std::string_view cpuGemmKernels()
{
    static const std::string_view kernels = [] {
        const char* asked = std::getenv("PS_CPU_GEMM");
        const std::string choice = asked == nullptr ? "" : asked;
        if (!choice.empty() && choice != "openblas" && choice != "packed")
            std::fprintf(stderr, "note: PS_CPU_GEMM=%s ignored (openblas or packed)\n", choice.c_str());
        if (choice == "openblas" || !packedGemmAvailable())
            return std::string_view("openblas");
        if (choice == "packed")
            return std::string_view("packed");
        return std::string_view(blasCoreLevel(openblas_get_corename()) < 3 ? "packed" : "openblas");
    }();
    return kernels;
}

} // namespace ps::engine
