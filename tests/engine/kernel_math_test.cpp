// engine/kernel_math.h: the per-element math the CPU backend and the CUDA kernels share, against
// double-precision references (GELU and its derivatives by finite differences) and torch's AdamW
// step written out.
#include "kernel_math.h"
#include "update_table.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

using namespace ps::engine;

namespace {

double geluErfRef(double a)
{
    return 0.5 * a * (1.0 + std::erf(a / std::sqrt(2.0)));
}

double geluTanhRef(double a)
{
    return 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
}

} // namespace

TEST(KernelMath, GeluAndItsDerivativesMatchDoublePrecision)
{
    for (double a = -9.0; a <= 9.0; a += 0.0137) {
        const auto x = static_cast<float>(a);
        const double xd = x;
        EXPECT_NEAR(math::geluErf(x), geluErfRef(xd), 2e-6 + 2e-6 * std::fabs(xd)) << a;
        EXPECT_NEAR(math::geluTanh(x), geluTanhRef(xd), 2e-6 + 2e-6 * std::fabs(xd)) << a;
        const double h = 1e-4;
        EXPECT_NEAR(math::geluErfGrad(x), (geluErfRef(xd + h) - geluErfRef(xd - h)) / (2 * h), 2e-5) << a;
        EXPECT_NEAR(math::geluTanhGrad(x), (geluTanhRef(xd + h) - geluTanhRef(xd - h)) / (2 * h), 2e-5) << a;
        EXPECT_NEAR(math::fastTanh(x), std::tanh(xd), 2e-7) << a;
    }
}

// The arithmetic-only exp and tanh the vector loops and CUDA kernels run: within 2 and 1.5 ulp of
// double precision over a dense sweep (tanh: its series, its exp side and the switch at 0.55).
TEST(KernelMath, ArithmeticExpAndTanhAreWithinTwoUlp)
{
    const auto ulps = [](float got, double want) {
        const auto w = static_cast<float>(want);
        const float ulp = std::nextafter(std::fabs(w), std::numeric_limits<float>::infinity()) - std::fabs(w);
        return std::fabs(static_cast<double>(got) - want) / static_cast<double>(ulp);
    };
    double worstExp = 0;
    for (float x = -86.99F; x <= 88.0F; x += 0.00731F)
        worstExp = std::max(worstExp, ulps(math::expArith(x), std::exp(static_cast<double>(x))));
    EXPECT_LE(worstExp, 2.0);
    double worstTanh = 0;
    for (float x = -12.0F; x <= 12.0F; x += 0.0000731F) {
        if (x != 0.0F)
            worstTanh = std::max(worstTanh, ulps(math::fastTanh(x), std::tanh(static_cast<double>(x))));
    }
    EXPECT_LE(worstTanh, 1.5);
    EXPECT_EQ(math::fastTanh(0.0F), 0.0F);
    EXPECT_EQ(math::fastTanh(30.0F), 1.0F);
    EXPECT_EQ(math::fastTanh(-30.0F), -1.0F);
    EXPECT_EQ(math::expArith(-87.5F), 0.0F); // below float's normals: flushed, as a masked logit needs
    EXPECT_EQ(math::expArith(-std::numeric_limits<float>::infinity()), 0.0F);
    EXPECT_TRUE(std::isnan(math::expArith(std::numeric_limits<float>::quiet_NaN())));
}

// The exact GELU in arithmetic only (erfcPositive, normalCdf) against double precision over a
// dense sweep, the far negative tail included (Phi down to 1e-30, where 0.5 (1 + erff(x / sqrt 2))
// cancels to 0). Bound: 5e-7 (4 ulp) plus what rounding x / sqrt 2 to float costs e^(-x^2 / 2) (x^2 ulps).
TEST(KernelMath, ExactGeluFollowsTheErfForm)
{
    const auto cdf = [](double a) { return 0.5 * std::erfc(-a / std::sqrt(2.0)); };
    double worst = 0; // of the bound
    for (float x = -13.0F; x <= 13.0F; x += 0.000917F) {
        const double a = x;
        const double want = cdf(a);
        if (want < 1e-30)
            continue;
        const double bound = 5e-7 + 1e-7 * a * a;
        worst = std::max(worst, std::fabs(math::normalCdf(x) - want) / want / bound);
        if (x != 0.0F)
            worst = std::max(worst, std::fabs(math::geluErf(x) - a * want) / std::fabs(a * want) / bound);
        // The derivative Phi + a phi, relative to the size of its two terms (they cancel near -0.75).
        const double density = a * std::exp(-0.5 * a * a) / std::sqrt(2.0 * M_PI);
        worst =
            std::max(worst, std::fabs(math::geluErfGrad(x) - (want + density)) / (want + std::fabs(density)) / bound);
    }
    std::printf("worst error %.2f of the bound\n", worst);
    EXPECT_LE(worst, 1.0);
    EXPECT_GT(math::normalCdf(-8.0F), 0.0F); // 6.2e-16
    EXPECT_EQ(math::geluErf(0.0F), 0.0F);
    EXPECT_EQ(math::geluErf(-20.0F), -0.0F);
    EXPECT_EQ(math::geluErf(20.0F), 20.0F);
    EXPECT_TRUE(std::isnan(math::geluErf(std::numeric_limits<float>::quiet_NaN())));
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(math::geluErf(inf), inf); // erff's form gave these; z = inf must not meet inf - inf
    EXPECT_EQ(math::geluErf(3e38F), 3e38F);
    EXPECT_EQ(math::normalCdf(-inf), 0.0F);
}

TEST(KernelMath, AdamWStepIsTorchs)
{
    // torch.optim.AdamW(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1), step 1 then 2,
    // written out in double precision.
    float w = 0.5F;
    float m = 0;
    float v = 0;
    double wd = 0.5;
    double md = 0;
    double vd = 0;
    for (int step = 1; step <= 2; ++step) {
        const float g = step == 1 ? 0.2F : -0.1F;
        const math::AdamWCoefficients c { 1e-2F, 0.1F, 0.9F, 0.999F, 1e-8F,
            1.0F - std::pow(0.9F, static_cast<float>(step)),
            std::sqrt(1.0F - std::pow(0.999F, static_cast<float>(step))), 1.0F };
        math::adamwElement(w, g, m, v, c);
        wd *= 1 - 1e-2 * 0.1;
        md = 0.9 * md + 0.1 * g;
        vd = 0.999 * vd + 0.001 * static_cast<double>(g) * g;
        const double mhat = md / (1 - std::pow(0.9, step));
        const double denom = std::sqrt(vd) / std::sqrt(1 - std::pow(0.999, step)) + 1e-8;
        wd -= 1e-2 * mhat / denom;
        EXPECT_NEAR(w, wd, 1e-6) << "step " << step;
        EXPECT_NEAR(m, md, 1e-7);
        EXPECT_NEAR(v, vd, 1e-9);
    }
    // The gradient scale divides the gradient first (accumulated micro-batches).
    float w1 = 1;
    float m1 = 0;
    float v1 = 0;
    float w2 = 1;
    float m2 = 0;
    float v2 = 0;
    const math::AdamWCoefficients half { 1e-3F, 0, 0.9F, 0.999F, 1e-8F, 0.1F, std::sqrt(0.001F), 0.5F };
    auto whole = half;
    whole.gradScale = 1;
    math::adamwElement(w1, 0.4F, m1, v1, half);
    math::adamwElement(w2, 0.2F, m2, v2, whole);
    EXPECT_FLOAT_EQ(w1, w2);
    EXPECT_FLOAT_EQ(m1, m2);
}

TEST(KernelMath, DropoutKeepsTheRightShareAndRepeatsPerSeed)
{
    for (const double p : { 0.0, 0.1, 0.5, 0.9 }) {
        const auto threshold = math::dropoutThreshold(p);
        constexpr int n = 200'000;
        int kept = 0;
        int same = 0;
        for (int i = 0; i < n; ++i) {
            const bool k = math::dropoutKeep(42, static_cast<unsigned long long>(i), threshold);
            kept += k ? 1 : 0;
            same += k == math::dropoutKeep(42, static_cast<unsigned long long>(i), threshold) ? 1 : 0;
        }
        EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.005) << "p = " << p;
        EXPECT_EQ(same, n); // a recompute draws the same mask
    }
    // Another seed, another mask; neighbouring elements independent.
    int differ = 0;
    int runs = 0;
    const auto half = math::dropoutThreshold(0.5);
    for (int i = 0; i < 10'000; ++i) {
        differ += math::dropoutKeep(1, i, half) != math::dropoutKeep(2, i, half) ? 1 : 0;
        runs += math::dropoutKeep(1, i, half) != math::dropoutKeep(1, i + 1, half) ? 1 : 0;
    }
    EXPECT_NEAR(differ / 10'000.0, 0.5, 0.03);
    EXPECT_NEAR(runs / 10'000.0, 0.5, 0.03);
    EXPECT_EQ(math::dropoutThreshold(1.0), 4294967295U);
    EXPECT_EQ(math::dropoutThreshold(-0.1), 0U);
}

// The bf16 cast the CUDA kernels apply to GEMM operands: round to nearest, ties to even.
TEST(KernelMath, Bf16CastRoundsToNearestEven)
{
    const auto bits = [](float f) { return math::floatToBf16Bits(f); };
    EXPECT_EQ(bits(1.0F), 0x3F80);
    EXPECT_EQ(bits(-2.0F), 0xC000);
    EXPECT_EQ(bits(0.0F), 0x0000);
    // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    EXPECT_EQ(bits(1.0F + 1.0F / 256.0F), 0x3F80);
    // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one.
    EXPECT_EQ(bits(1.0F + 3.0F / 256.0F), 0x3F82);
    EXPECT_EQ(bits(1.0F + 1.0F / 256.0F + 1.0F / 4096.0F), 0x3F81); // above halfway: up
    EXPECT_EQ(bits(3.0e38F), 0x7F62); // large finite values stay finite
    EXPECT_EQ(bits(std::numeric_limits<float>::infinity()), 0x7F80);
    EXPECT_TRUE(std::isnan(math::bf16BitsToFloat(bits(std::numeric_limits<float>::quiet_NaN()))));
    for (float x = -10.0F; x < 10.0F; x += 0.173F) { // within half a unit of bf16's 8-bit mantissa
        const float back = math::bf16BitsToFloat(bits(x));
        EXPECT_LE(std::abs(back - x), std::abs(x) / 256.0F + 1e-30F) << x;
    }
}

// The CNN and imported-model activations both backends run, at their edges.
TEST(KernelMath, ActivationsAtTheirEdges)
{
    EXPECT_FLOAT_EQ(math::sigmoid(-200.0F), 0.0F); // no overflow of exp either way
    EXPECT_FLOAT_EQ(math::sigmoid(200.0F), 1.0F);
    EXPECT_NEAR(math::sigmoid(0.5F), 1.0 / (1.0 + std::exp(-0.5)), 1e-7);
    EXPECT_FLOAT_EQ(math::hardSwish(-3.5F), -0.0F);
    EXPECT_FLOAT_EQ(math::hardSwish(1.0F), 1.0F * 4.0F / 6.0F);
    EXPECT_FLOAT_EQ(math::hardSwishGrad(1.5F), 1.0F);
    EXPECT_FLOAT_EQ(math::hardSigmoidGrad(10.0F, 0.2F, 0.5F), 0.0F);
    EXPECT_FLOAT_EQ(math::hardSigmoidGrad(0.0F, 0.2F, 0.5F), 0.2F);
    EXPECT_TRUE(std::isnan(math::clip(std::nanf(""), -1.0F, 1.0F))); // torch.clamp keeps NaN
    EXPECT_FLOAT_EQ(math::clip(0.0F, 2.0F, 1.0F), 1.0F); // min > max gives max (ONNX)
    EXPECT_FLOAT_EQ(math::clipGrad(1.0F, -1.0F, 1.0F), 1.0F); // the bounds pass the gradient
    EXPECT_FLOAT_EQ(math::power(-3.0F, 2.0F), 9.0F);
    EXPECT_FLOAT_EQ(math::powerGrad(2.0F, 3.0F), 12.0F);
    EXPECT_NEAR(math::erfGrad(0.0F), 2.0 / std::sqrt(3.141592653589793), 1e-6);
    EXPECT_TRUE(math::triluKeeps(2, 3, true, 1) && !math::triluKeeps(2, 2, true, 1));
    EXPECT_TRUE(math::triluKeeps(3, 1, false, -2) && !math::triluKeeps(3, 2, false, -2));
}

// Casts to the integer types as static_cast and ONNX: truncation, wrap to the width, saturation of
// out-of-range floats (NaN to the minimum), bool as nonzero.
TEST(KernelMath, CastsToIntegersTruncateWrapAndSaturate)
{
    using math::IntegerType;
    EXPECT_EQ(math::floatToInteger(-2.7F, IntegerType::I64), -2);
    EXPECT_EQ(math::floatToInteger(3e19F, IntegerType::I64), std::numeric_limits<std::int64_t>::max());
    EXPECT_EQ(math::floatToInteger(std::nanf(""), IntegerType::I64), std::numeric_limits<std::int64_t>::min());
    EXPECT_EQ(math::floatToInteger(std::nanf(""), IntegerType::Bool), 1);
    EXPECT_EQ(math::floatToInteger(0.0F, IntegerType::Bool), 0);
    EXPECT_EQ(math::narrowInteger(300, IntegerType::U8), 44);
    EXPECT_EQ(math::narrowInteger(200, IntegerType::I8), -56);
    EXPECT_EQ(math::narrowInteger((1LL << 32) + 5, IntegerType::I32), 5);
    EXPECT_EQ(math::narrowInteger(-7, IntegerType::Bool), 1);
}

// A fused AdamW launch finds each element's parameter by its slot's end offset.
TEST(KernelMath, SlotOfFindsTheArrayHoldingAnElement)
{
    const long long ends[] = { 3, 3, 10, 11 }; // an empty slot 1
    const int want[] = { 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 3 };
    for (long long e = 0; e < 11; ++e)
        EXPECT_EQ(math::slotOf(ends, 4, e), want[e]) << "element " << e;
    EXPECT_EQ(math::slotOf(ends, 1, 2), 0);
}

// The table of a one-launch AdamW (engine/update_table.h), packed on the host and read as the CUDA
// kernel reads it: every element of every slot is located once, in its own slot, and the update
// through the table is the per-parameter one, bit for bit.
TEST(KernelMath, UpdateTableLocatesEveryElementOnceInItsSlot)
{
    const std::vector<long long> sizes { 3, 0, 1, 7, 0, 5 };
    struct Arrays
    {
        std::vector<float> w, g, m, v;
    };
    std::vector<Arrays> viaTable;
    std::vector<Arrays> direct;
    for (std::size_t s = 0; s < sizes.size(); ++s) {
        Arrays a;
        for (long long i = 0; i < sizes[s]; ++i) {
            const auto x = static_cast<float>(s * 10 + static_cast<std::size_t>(i));
            a.w.push_back(0.5F + 0.01F * x);
            a.g.push_back(0.1F - 0.003F * x);
            a.m.push_back(0.01F * x);
            a.v.push_back(0.001F * x);
        }
        viaTable.push_back(a);
        direct.push_back(a);
    }
    std::vector<UpdateSlot> slots;
    for (std::size_t s = 0; s < sizes.size(); ++s) {
        auto& a = viaTable[s];
        slots.push_back({ a.w.data(), a.g.data(), a.m.data(), a.v.data(), sizes[s] });
    }
    std::vector<std::uint64_t> words(updateTableWords(slots.size()));
    packUpdateTable(slots, words.data());
    const auto table = updateTableAt(words.data(), static_cast<int>(slots.size()));
    ASSERT_EQ(table.total(), 16);
    const auto c = math::adamwCoefficients(1e-2F, 0.01F, 0.9F, 0.999F, 1e-8F, 3, 0.5F);
    std::vector<std::vector<int>> visits(sizes.size());
    for (std::size_t s = 0; s < sizes.size(); ++s)
        visits[s].assign(static_cast<std::size_t>(sizes[s]), 0);
    for (long long e = 0; e < table.total(); ++e) {
        int s = 0;
        long long i = 0;
        table.locate(e, s, i);
        ASSERT_GE(s, 0);
        ASSERT_LT(s, static_cast<int>(sizes.size()));
        ASSERT_GE(i, 0);
        ASSERT_LT(i, sizes[static_cast<std::size_t>(s)]) << "element " << e;
        ++visits[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
        math::adamwElement(table.w[s][i], table.g[s][i], table.m[s][i], table.v[s][i], c);
    }
    for (std::size_t s = 0; s < sizes.size(); ++s) {
        for (long long i = 0; i < sizes[s]; ++i) {
            const auto k = static_cast<std::size_t>(i);
            EXPECT_EQ(visits[s][k], 1) << "slot " << s << " element " << i;
            auto& d = direct[s];
            math::adamwElement(d.w[k], d.g[k], d.m[k], d.v[k], c);
            EXPECT_EQ(viaTable[s].w[k], d.w[k]) << "slot " << s << " element " << i;
            EXPECT_EQ(viaTable[s].v[k], d.v[k]);
        }
    }
    const auto empty = updateTableAt(words.data(), 0);
    EXPECT_EQ(empty.total(), 0);
}
