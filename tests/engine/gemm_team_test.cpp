// A device's GEMM team splits a product across its cores: the same numbers as one OpenBLAS call for
// every transpose and split direction, helpers on their own cores, failures rethrown to the caller;
// element-wise loops shared across it.
#include "backend.h"
#include "cpu/gemm_team.h"
#include "cpu/thread_affinity.h"
#include "cpu/vector_loops.h"
#include "kernel_math.h"
#include "kernel_test_support.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sched.h>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::randomMatrix;

namespace {

std::vector<int> twoCores()
{
    auto cores = allowedCores();
    cores.resize(std::min<std::size_t>(cores.size(), 2));
    while (cores.size() < 2) // a one-core machine: both members share it
        cores.push_back(cores.front());
    return cores;
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

// A product of few rows split across the team (by columns here; by rows of 3 or 4 with more
// members) runs one kernel for all its parts, chosen for the whole product: the same bits as one
// call, with OpenBLAS's kernels or the packed ones (the engine_packed_gemm run).
TEST(GemmTeam, FewRowsSplitRunOneKernelForTheWholeProduct)
{
    GemmTeam team(twoCores());
    const std::int64_t m = 6, n = 64, k = 4096;
    const auto a = randomMatrix(static_cast<std::size_t>(m * k), 7);
    const auto b = randomMatrix(static_cast<std::size_t>(k * n), 8);
    std::vector<float> alone(static_cast<std::size_t>(m * n));
    std::vector<float> split(alone.size());
    sgemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, alone.data(), n);
    {
        const GemmTeamScope scope(&team);
        sgemm(false, false, m, n, k, 1, a.data(), k, b.data(), n, 0, split.data(), n);
    }
    EXPECT_EQ(split, alone);
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

// LayerNorm and RMSNorm rows: the same bits with and without the team (the weight gradients are
// summed per fixed block of rows, blocks added in order), and the values of the plain formulas.
TEST(GemmTeam, SharedNormRowsDoNotDependOnTheSplitAndMatchTheFormulas)
{
    GemmTeam team(twoCores());
    for (const bool rms : { false, true }) {
        for (const std::int64_t c : { 3, 16, 50, 256 }) {
            const std::int64_t rows = 2 * (std::int64_t { 1 } << 14) / c + 37;
            const auto x = randomMatrix(static_cast<std::size_t>(rows * c), 31);
            const auto dy = randomMatrix(x.size(), 32);
            const auto gamma = randomMatrix(static_cast<std::size_t>(c), 33);
            const auto beta = randomMatrix(static_cast<std::size_t>(c), 34);
            std::vector<std::vector<float>> results;
            for (const bool withTeam : { false, true }) {
                const GemmTeamScope scope(withTeam ? &team : nullptr);
                std::vector<float> y(x.size());
                std::vector<float> dx(x.size());
                std::vector<float> mean(static_cast<std::size_t>(rows));
                std::vector<float> rstd(mean.size());
                std::vector<float> grads(static_cast<std::size_t>(2 * c));
                std::vector<float> scratch(static_cast<std::size_t>(cpu::normBackwardScratch(rows, c)));
                cpu::normRowsForward(x.data(), gamma.data(), rms ? nullptr : beta.data(), y.data(), mean.data(),
                    rstd.data(), rows, c, 1e-5F, rms);
                cpu::normRowsBackward(x.data(), dy.data(), gamma.data(), mean.data(), rstd.data(), dx.data(),
                    grads.data(), rms ? nullptr : grads.data() + c, scratch.data(), rows, c, rms);
                y.insert(y.end(), dx.begin(), dx.end());
                y.insert(y.end(), grads.begin(), grads.end());
                results.push_back(std::move(y));
            }
            ASSERT_EQ(results[0], results[1]) << "c " << c << (rms ? " rms" : "");
            // The formulas in double: one row's output and input gradient, and the weight gradients.
            const auto& got = results[0];
            const auto n = static_cast<std::size_t>(rows * c);
            std::vector<double> dgamma(static_cast<std::size_t>(c), 0.0);
            std::vector<double> dbeta(static_cast<std::size_t>(c), 0.0);
            for (std::int64_t r = 0; r < rows; ++r) {
                const auto* xr = x.data() + r * c;
                const auto* gr = dy.data() + r * c;
                double mu = 0;
                for (std::int64_t j = 0; !rms && j < c; ++j)
                    mu += xr[j] / static_cast<double>(c);
                double var = 0;
                for (std::int64_t j = 0; j < c; ++j)
                    var += (xr[j] - mu) * (xr[j] - mu) / static_cast<double>(c);
                const double rs = 1.0 / std::sqrt(var + 1e-5);
                double mg = 0;
                double mgx = 0;
                for (std::int64_t j = 0; j < c; ++j) {
                    const double xhat = (xr[j] - mu) * rs;
                    mg += gr[j] * gamma[static_cast<std::size_t>(j)] / static_cast<double>(c);
                    mgx += gr[j] * gamma[static_cast<std::size_t>(j)] * xhat / static_cast<double>(c);
                    dgamma[static_cast<std::size_t>(j)] += gr[j] * xhat;
                    dbeta[static_cast<std::size_t>(j)] += gr[j];
                }
                if (r % 997 != 0)
                    continue;
                for (std::int64_t j = 0; j < c; ++j) {
                    const double xhat = (xr[j] - mu) * rs;
                    const auto i = static_cast<std::size_t>(r * c + j);
                    const double want =
                        xhat * gamma[static_cast<std::size_t>(j)] + (rms ? 0.0 : beta[static_cast<std::size_t>(j)]);
                    EXPECT_NEAR(got[i], want, 1e-4 * (1 + std::abs(want)));
                    const double wantDx =
                        rs * (gr[j] * gamma[static_cast<std::size_t>(j)] - (rms ? 0.0 : mg) - xhat * mgx);
                    EXPECT_NEAR(got[n + i], wantDx, 1e-3 * (1 + std::abs(wantDx)));
                }
            }
            for (std::int64_t j = 0; j < c; ++j) {
                const auto k = static_cast<std::size_t>(j);
                EXPECT_NEAR(got[2 * n + k], dgamma[k], 1e-4 * (1 + std::abs(dgamma[k])));
                if (!rms) {
                    EXPECT_NEAR(
                        got[2 * n + static_cast<std::size_t>(c) + k], dbeta[k], 1e-4 * (1 + std::abs(dbeta[k])));
                }
            }
        }
    }
}

// Ops whose work is shared across the device's team: the same bits as on one thread, forward and
// every input gradient. Batched products (attention's heads times the batch) share whole matrices,
// and a broadcast operand (its gradient sums over the batch) keeps the sequential sum; copies
// (Transpose, Split), bias sums, masks and element-wise ops share rows or columns.
TEST(GemmTeam, OpsSharedAcrossTheTeamEqualOneThread)
{
    GemmTeam team(twoCores());
    engine::testing::RandomArrays arrays;
    struct Case
    {
        OpType op;
        Attributes attrs;
        std::vector<Shape> inputs;
    };
    const std::vector<Case> cases {
        { OpType::MatMul, {}, { { 2, 4, 33, 16 }, { 2, 4, 16, 29 } } },
        { OpType::MatMul, { { "trans_b", std::int64_t { 1 } } }, { { 2, 4, 33, 16 }, { 2, 4, 29, 16 } } },
        { OpType::MatMul, {}, { { 3, 5, 8, 7 }, { 1, 5, 7, 6 } } },
        { OpType::Transpose, { { "perm", Shape { 0, 2, 1, 3 } } }, { { 4, 128, 4, 64 } } },
        { OpType::Split, { { "axis", std::int64_t { -1 } }, { "sizes", Shape { 32, 32, 32 } } }, { { 2048, 96 } } },
        { OpType::BiasAdd, {}, { { 2048, 64 }, { 64 } } },
        { OpType::Mask, { { "causal", std::int64_t { 1 } } }, { { 8, 4, 64, 64 } } },
        { OpType::Scale, { { "scale", 0.125 } }, { { 2048, 64 } } },
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(toString(c.op));
        const auto node = engine::testing::makeNode(c.op, c.attrs);
        std::vector<NdArray> inputs;
        for (const auto& shape : c.inputs)
            inputs.push_back(arrays.random(shape));
        std::vector<std::vector<float>> results;
        for (const bool withTeam : { false, true }) {
            const GemmTeamScope scope(withTeam ? &team : nullptr);
            std::mt19937_64 rng(1);
            KernelContext ctx { arrays.m_alloc, rng, true };
            NodeValues v;
            v.in = inputs;
            cpuBackend().forward(node, v, ctx);
            engine::testing::RandomArrays weights;
            std::vector<NdArray> dy;
            std::vector<float> all;
            for (const auto& o : v.out) {
                dy.push_back(weights.random(o.shape()));
                all.insert(all.end(), o.f32(), o.f32() + o.numel());
            }
            const auto grads = cpuBackend().backward(node, v, dy, std::vector<bool>(inputs.size(), true), ctx);
            for (const auto& g : grads)
                all.insert(all.end(), g.f32(), g.f32() + g.numel());
            results.push_back(std::move(all));
        }
        EXPECT_EQ(results[0], results[1]);
    }
}

// The thread that owns a team runs on the team's first core while it has the team (the helpers
// hold the others), and gets its own affinity back afterwards.
TEST(GemmTeam, TheCallerRunsOnTheFirstCoreWhileItHasTheTeam)
{
    const auto before = currentThreadCores();
    ASSERT_FALSE(before.empty());
    const auto cores = twoCores();
    GemmTeam team(cores);
    {
        const GemmTeamScope scope(&team);
        EXPECT_EQ(currentThreadCores(), std::vector<int> { cores.front() });
        {
            const GemmTeamScope alone(nullptr); // inside a team's part: affinity unchanged
            EXPECT_EQ(currentThreadCores(), std::vector<int> { cores.front() });
        }
    }
    EXPECT_EQ(currentThreadCores(), before);
}
