// The engine's packed AVX-512 GEMM against a double-precision reference: every transpose, edges of
// its 12 x 32 tiles and 256-deep blocks, padded leading dimensions, alpha and beta (beta 0 never
// reading C); rows computed apart equal to the bit the same rows of one call. Skips where the CPU
// has no AVX-512 (the engine then runs OpenBLAS only).
#include "cpu/packed_gemm.h"
#include "kernel_test_support.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace ps::engine;
using ps::engine::testing::randomMatrix;

namespace {

struct Product
{
    std::int64_t m, n, k;
    bool transA, transB;
    std::int64_t pad; // added to every leading dimension
    [[nodiscard]] std::int64_t lda() const
    {
        return (transA ? m : k) + pad;
    }
    [[nodiscard]] std::int64_t ldb() const
    {
        return (transB ? k : n) + pad;
    }
    [[nodiscard]] std::int64_t ldc() const
    {
        return n + pad;
    }
};

// alpha op(A) op(B) + beta C in double, beta 0 ignoring C.
std::vector<double> reference(const Product& p, const std::vector<float>& a, const std::vector<float>& b,
    const std::vector<float>& c, float alpha, float beta)
{
    std::vector<double> out(c.begin(), c.end());
    for (std::int64_t i = 0; i < p.m; ++i) {
        for (std::int64_t j = 0; j < p.n; ++j) {
            double sum = 0;
            for (std::int64_t l = 0; l < p.k; ++l) {
                const double x = p.transA ? a[l * p.lda() + i] : a[i * p.lda() + l];
                const double y = p.transB ? b[j * p.ldb() + l] : b[l * p.ldb() + j];
                sum += x * y;
            }
            const double old = beta == 0.0F ? 0.0 : beta * static_cast<double>(c[i * p.ldc() + j]);
            out[i * p.ldc() + j] = alpha * sum + old;
        }
    }
    return out;
}

} // namespace

TEST(PackedGemm, EqualsTheReferenceForEveryLayoutEdgeAndScaling)
{
    if (!packedGemmAvailable())
        GTEST_SKIP() << "this CPU has no AVX-512: the engine runs OpenBLAS's GEMM only";
    // Whole tiles and blocks, one past them, and less than one; deeper than two k-blocks.
    const std::vector<std::array<std::int64_t, 3>> sizes { { 12, 32, 256 }, { 13, 33, 257 }, { 4, 1, 1 },
        { 150, 70, 600 }, { 7, 1100, 40 }, { 25, 31, 3 } };
    int checked = 0;
    for (const auto& [m, n, k] : sizes) {
        for (int t = 0; t < 4; ++t) {
            for (const std::int64_t pad : { 0, 5 }) {
                const Product p { m, n, k, (t & 1) != 0, (t & 2) != 0, pad };
                const auto a = randomMatrix(static_cast<std::size_t>((p.transA ? k : m) * p.lda()), 1);
                const auto b = randomMatrix(static_cast<std::size_t>((p.transB ? n : k) * p.ldb()), 2);
                for (const auto& [alpha, beta] :
                    std::vector<std::pair<float, float>> { { 1, 0 }, { 0.5F, 1 }, { -2, 0.25F } }) {
                    auto c = randomMatrix(static_cast<std::size_t>(m * p.ldc()), 3);
                    if (beta == 0.0F) // never read: a NaN there would show
                        std::fill(c.begin(), c.end(), std::numeric_limits<float>::quiet_NaN());
                    const auto expected = reference(p, a, b, c, alpha, beta);
                    packedSgemm(p.transA, p.transB, m, n, k, alpha, a.data(), p.lda(), b.data(), p.ldb(), beta,
                        c.data(), p.ldc());
                    for (std::int64_t i = 0; i < m; ++i) {
                        for (std::int64_t j = 0; j < p.ldc(); ++j) {
                            const auto at = static_cast<std::size_t>(i * p.ldc() + j);
                            if (j >= n) { // the padding is left alone
                                if (std::isnan(expected[at]))
                                    EXPECT_TRUE(std::isnan(c[at]));
                                else
                                    EXPECT_EQ(c[at], static_cast<float>(expected[at]));
                                continue;
                            }
                            ASSERT_NEAR(c[at], expected[at], 1e-5 * (1 + std::sqrt(static_cast<double>(k))))
                                << m << "x" << n << "x" << k << " transA " << p.transA << " transB " << p.transB
                                << " pad " << pad << " alpha " << alpha << " beta " << beta << " at " << i << "," << j;
                        }
                    }
                    ++checked;
                }
            }
        }
    }
    EXPECT_EQ(checked, 6 * 4 * 2 * 3);
}

// A row's result does not depend on which rows are computed with it, nor a column's on its
// columns: GEMM teams split products so and expect one call's bits.
TEST(PackedGemm, RowsAndColumnsComputedApartEqualOneCall)
{
    if (!packedGemmAvailable())
        GTEST_SKIP() << "this CPU has no AVX-512: the engine runs OpenBLAS's GEMM only";
    const std::int64_t m = 61, n = 1500, k = 700;
    const auto a = randomMatrix(static_cast<std::size_t>(m * k), 4);
    const auto b = randomMatrix(static_cast<std::size_t>(k * n), 5);
    std::vector<float> whole(static_cast<std::size_t>(m * n));
    packedSgemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, whole.data(), n);
    std::vector<float> parts(whole.size());
    packedSgemm(false, false, 29, n, k, 1, a.data(), k, b.data(), n, 0, parts.data(), n);
    packedSgemm(false, false, m - 29, n, k, 1, a.data() + 29 * k, k, b.data(), n, 0, parts.data() + 29 * n, n);
    EXPECT_EQ(parts, whole);
    std::vector<float> columns(whole.size());
    packedSgemm(false, false, m, 777, k, 1, a.data(), k, b.data(), n, 0, columns.data(), n);
    packedSgemm(false, false, m, n - 777, k, 1, a.data(), k, b.data() + 777, n, 0, columns.data() + 777, n);
    EXPECT_EQ(columns, whole);
}

// k = 0: C = beta C, as BLAS defines it (beta 0: zeros, whatever C held).
TEST(PackedGemm, NoDepthScalesC)
{
    if (!packedGemmAvailable())
        GTEST_SKIP() << "this CPU has no AVX-512: the engine runs OpenBLAS's GEMM only";
    std::vector<float> c { 1, 2, 3, 4, 5, 6 };
    packedSgemm(false, false, 2, 3, 0, 1, nullptr, 1, nullptr, 3, 0.5F, c.data(), 3);
    EXPECT_EQ(c, (std::vector<float> { 0.5F, 1, 1.5F, 2, 2.5F, 3 }));
    c.assign(6, std::numeric_limits<float>::quiet_NaN());
    packedSgemm(false, false, 2, 3, 0, 1, nullptr, 1, nullptr, 3, 0, c.data(), 3);
    EXPECT_EQ(c, std::vector<float>(6, 0.0F));
}
