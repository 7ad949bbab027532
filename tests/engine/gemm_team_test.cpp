// A device's GEMM team splits a product across its cores: the same numbers as one OpenBLAS call for
// every transpose and split direction, helpers on their own cores, failures rethrown to the caller;
// element-wise loops shared across it.
#include "cpu/gemm_team.h"
#include "cpu/thread_affinity.h"
#include "cpu/vector_loops.h"
#include "kernel_math.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sched.h>

using namespace ps;
using namespace ps::engine;

namespace {

std::vector<int> twoCores()
{
    auto cores = allowedCores();
    cores.resize(std::min<std::size_t>(cores.size(), 2));
    while (cores.size() < 2) // a one-core machine: both members share it
        cores.push_back(cores.front());
    return cores;
}

std::vector<float> randomMatrix(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(n);
    for (auto& x : v)
        x = u(rng);
    return v;
}

} // namespace

TEST(GemmTeam, SplitProductsEqualOneCall)
{
    GemmTeam team(twoCores());
    ASSERT_EQ(team.size(), 2);
    // Tall (split by rows of C) and wide (split by columns), every transpose, beta 0 and 1.
    for (const auto& [m, n, k] : std::vector<std::array<std::int64_t, 3>> { { 300, 70, 128 }, { 5, 900, 512 } }) {
        for (int t = 0; t < 4; ++t) {
            const bool ta = (t & 1) != 0;
            const bool tb = (t & 2) != 0;
            for (const float beta : { 0.0F, 1.0F }) {
                const auto a = randomMatrix(static_cast<std::size_t>(m * k), 1);
                const auto b = randomMatrix(static_cast<std::size_t>(k * n), 2);
                auto expected = randomMatrix(static_cast<std::size_t>(m * n), 3);
                auto split = expected;
                const auto lda = ta ? m : k;
                const auto ldb = tb ? k : n;
                sgemm(ta, tb, m, n, k, 0.5F, a.data(), lda, b.data(), ldb, beta, expected.data(), n);
                {
                    const GemmTeamScope scope(&team);
                    sgemm(ta, tb, m, n, k, 0.5F, a.data(), lda, b.data(), ldb, beta, split.data(), n);
                }
                double worst = 0;
                for (std::size_t i = 0; i < expected.size(); ++i)
                    worst = std::max(worst, std::abs(static_cast<double>(expected[i]) - split[i]));
                EXPECT_LT(worst, 1e-4) << m << "x" << n << "x" << k << " transA " << ta << " transB " << tb << " beta "
                                       << beta;
            }
        }
    }
}

TEST(GemmTeam, HelpersRunOnTheirOwnCoreAndFailuresReachTheCaller)
{
    const auto cores = twoCores();
    GemmTeam team(cores);
    std::vector<int> pinned(2, -1);
    team.run([&](int member) {
        if (member == 0)
            return;
        cpu_set_t set;
        CPU_ZERO(&set);
        ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
        if (CPU_COUNT(&set) == 1 && CPU_ISSET(cores[1], &set))
            pinned[1] = cores[1];
    });
    EXPECT_EQ(pinned[1], cores[1]);
    EXPECT_THROW(team.run([](int member) {
        if (member == 1)
            throw Error("helper failed");
    }),
        Error);
    int calls = 0; // still usable after a failure
    std::mutex m;
    team.run([&](int) {
        const std::lock_guard lock(m);
        ++calls;
    });
    EXPECT_EQ(calls, 2);
}

// The vectorised GELU loops, shared across a team or not, give the scalar math's bits for every
// element (no FMA contraction: ISO C++ mode), at sizes around the split and vector widths.
TEST(GemmTeam, SharedVectorLoopsEqualTheScalarMath)
{
    GemmTeam team(twoCores());
    for (const std::int64_t n : { 1, 7, 16, 100, 32769, 200001 }) {
        auto x = randomMatrix(static_cast<std::size_t>(n), 11);
        const auto dy = randomMatrix(static_cast<std::size_t>(n), 12);
        for (auto& v : x)
            v *= 8; // into tanh's saturated and series ranges too
        for (const bool withTeam : { false, true }) {
            const GemmTeamScope scope(withTeam ? &team : nullptr);
            std::vector<float> y(x.size());
            std::vector<float> dx(x.size());
            cpu::geluTanhForward(x.data(), y.data(), n);
            cpu::geluTanhBackward(dy.data(), x.data(), dx.data(), n);
            for (std::size_t i = 0; i < x.size(); ++i) {
                ASSERT_EQ(y[i], math::geluTanh(x[i])) << n << " " << i;
                ASSERT_EQ(dx[i], dy[i] * math::geluTanhGrad(x[i])) << n << " " << i;
            }
            // Dropout draws by the element's global index, whichever member runs it.
            std::vector<std::uint8_t> mask(x.size());
            const auto threshold = math::dropoutThreshold(0.3);
            cpu::dropoutForward(x.data(), y.data(), mask.data(), n, 99, threshold, 2.0F);
            cpu::dropoutBackward(dy.data(), mask.data(), dx.data(), n, 2.0F);
            for (std::size_t i = 0; i < x.size(); ++i) {
                const bool kept = math::dropoutKeep(99, i, threshold);
                ASSERT_EQ(mask[i], kept ? 1 : 0) << n << " " << i;
                ASSERT_EQ(y[i], kept ? x[i] * 2.0F : 0.0F);
                ASSERT_EQ(dx[i], kept ? dy[i] * 2.0F : 0.0F);
            }
        }
    }
}

// Softmax rows give the same bits split across the team or not, and sum to one.
TEST(GemmTeam, SharedSoftmaxRowsDoNotDependOnTheSplit)
{
    GemmTeam team(twoCores());
    for (const std::int64_t c : { 1, 5, 16, 50, 256 }) {
        const std::int64_t rows = 2 * (std::int64_t { 1 } << 14) / c + 7; // enough rows to split
        auto x = randomMatrix(static_cast<std::size_t>(rows * c), 21);
        const auto dy = randomMatrix(x.size(), 22);
        if (c > 1)
            x[0] = -std::numeric_limits<float>::infinity(); // a masked logit
        std::vector<std::vector<float>> results;
        for (const bool withTeam : { false, true }) {
            const GemmTeamScope scope(withTeam ? &team : nullptr);
            std::vector<float> y(x.size());
            std::vector<float> dx(x.size());
            cpu::softmaxRows(x.data(), y.data(), rows, c);
            cpu::softmaxBackwardRows(y.data(), dy.data(), dx.data(), rows, c);
            y.insert(y.end(), dx.begin(), dx.end());
            results.push_back(std::move(y));
        }
        ASSERT_EQ(results[0], results[1]) << c;
        for (std::int64_t r = 0; r < rows; r += 499) {
            double sum = 0;
            for (std::int64_t j = 0; j < c; ++j)
                sum += results[0][static_cast<std::size_t>(r * c + j)];
            EXPECT_NEAR(sum, 1.0, 1e-6) << c << " row " << r;
        }
        EXPECT_TRUE(c == 1 || results[0][0] == 0.0F); // e^-inf
    }
}
