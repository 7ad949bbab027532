// engine/row_math.h: the warp-blocked row reductions the CUDA kernels run, as host references,
// against the CPU backend's LayerNorm, RMSNorm, Softmax and CrossEntropy kernels (which sum in
// double) on rows shorter than a warp, of a warp, and many warps long; engine/column_math.h: the
// chunked column sums (bias, gamma and beta gradients) against plain sums and the CPU kernels.
#include "backend.h"
#include "column_math.h"
#include "group_norm_math.h"
#include "row_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace ps;
using namespace ps::engine;

namespace {

constexpr int kRows = 6;
const std::vector<int> kWidths { 1, 5, 32, 33, 100, 1031 };

NdArray randomArray(Allocator& alloc, Shape shape, std::mt19937& gen, float scale = 2.0F)
{
    auto a = NdArray::empty(alloc, std::move(shape));
    std::uniform_real_distribution<float> u(-scale, scale);
    for (std::int64_t i = 0; i < a.numel(); ++i)
        a.f32()[i] = u(gen);
    return a;
}

Node nodeOf(OpType op)
{
    Node n;
    n.name = std::string(toString(op)) + "_under_test";
    n.op = op;
    return n;
}

struct KernelRun
{
    Allocator alloc { "cpu" };
    std::mt19937_64 rng { 1 };
    KernelContext ctx { alloc, rng, true };
};

void expectClose(const float* got, const float* want, std::int64_t n, double tolerance, const std::string& what)
{
    double worst = 0;
    for (std::int64_t i = 0; i < n; ++i)
        worst = std::max(worst, std::abs(double(got[i]) - double(want[i])) / std::max(1.0, std::abs(double(want[i]))));
    EXPECT_LT(worst, tolerance) << what;
}

} // namespace

TEST(RowMath, ButterflyGivesEveryLaneTheTotalAndTheMaximum)
{
    float lanes[math::kRowLanes];
    double total = 0;
    for (int l = 0; l < math::kRowLanes; ++l) {
        lanes[l] = static_cast<float>(l * l) * 0.37F - 40.0F;
        total += lanes[l];
    }
    float copy[math::kRowLanes];
    std::copy(std::begin(lanes), std::end(lanes), std::begin(copy));
    EXPECT_NEAR(math::butterflyReference(lanes), total, 1e-6 * std::abs(total)); // float rounding
    for (float v : lanes)
        EXPECT_EQ(v, lanes[0]); // all lanes agree bit for bit
    EXPECT_EQ(math::butterflyReference(copy, true), 31.0F * 31.0F * 0.37F - 40.0F);
}

TEST(RowMath, NormRowsMatchTheCpuKernels)
{
    for (const bool rms : { false, true }) {
        for (const int c : kWidths) {
            KernelRun r;
            std::mt19937 gen(static_cast<unsigned>(c));
            const auto x = randomArray(r.alloc, { kRows, c }, gen);
            const auto gamma = randomArray(r.alloc, { c }, gen);
            const auto beta = randomArray(r.alloc, { c }, gen);
            auto node = nodeOf(rms ? OpType::RMSNorm : OpType::LayerNorm);
            NodeValues v;
            v.in = { x, gamma };
            if (!rms)
                v.in.push_back(beta);
            cpuBackend().forward(node, v, r.ctx);
            const auto dy = randomArray(r.alloc, { kRows, c }, gen);
            const auto grads = cpuBackend().backward(node, v, { dy }, { true, false, false }, r.ctx);
            const auto what = std::string(rms ? "RMSNorm" : "LayerNorm") + " width " + std::to_string(c);
            std::vector<float> y(static_cast<std::size_t>(c));
            std::vector<float> dx(static_cast<std::size_t>(c));
            for (int row = 0; row < kRows; ++row) {
                float mean = 0;
                float rstd = 0;
                const float* xr = x.f32() + row * c;
                math::normRowReference(
                    xr, gamma.f32(), rms ? nullptr : beta.f32(), c, 1e-5F, rms, y.data(), mean, rstd);
                expectClose(y.data(), v.out[0].f32() + row * c, c, 2e-5, what + " forward");
                EXPECT_NEAR(rstd, v.saved[1].f32()[row], 2e-5 * rstd) << what;
                math::normGradRowReference(xr, dy.f32() + row * c, gamma.f32(), c, mean, rstd, rms, dx.data());
                expectClose(dx.data(), grads[0].f32() + row * c, c, 2e-4, what + " backward");
            }
        }
    }
}

TEST(RowMath, SoftmaxRowsMatchTheCpuKernels)
{
    for (const int c : kWidths) {
        KernelRun r;
        std::mt19937 gen(static_cast<unsigned>(c) + 7);
        const auto x = randomArray(r.alloc, { kRows, c }, gen, 8.0F);
        auto node = nodeOf(OpType::Softmax);
        NodeValues v;
        v.in = { x };
        cpuBackend().forward(node, v, r.ctx);
        const auto dy = randomArray(r.alloc, { kRows, c }, gen);
        const auto grads = cpuBackend().backward(node, v, { dy }, { true }, r.ctx);
        std::vector<float> y(static_cast<std::size_t>(c));
        std::vector<float> dx(static_cast<std::size_t>(c));
        for (int row = 0; row < kRows; ++row) {
            math::softmaxRowReference(x.f32() + row * c, c, y.data());
            expectClose(y.data(), v.out[0].f32() + row * c, c, 1e-6, "softmax width " + std::to_string(c));
            math::softmaxGradRowReference(v.out[0].f32() + row * c, dy.f32() + row * c, c, dx.data());
            expectClose(dx.data(), grads[0].f32() + row * c, c, 1e-6, "softmax backward width " + std::to_string(c));
        }
    }
}

TEST(RowMath, CrossEntropyMatchesTheCpuKernelWithIgnoredRows)
{
    for (const int rows : { 1, 7, 70 }) {
        const int c = 50;
        KernelRun r;
        std::mt19937 gen(static_cast<unsigned>(rows));
        const auto logits = randomArray(r.alloc, { rows, c }, gen, 6.0F);
        auto labels = NdArray::empty(r.alloc, { rows }, DType::I64);
        for (int i = 0; i < rows; ++i)
            labels.i64()[i] = i % 5 == 3 ? -100 : (i * 13) % c; // PyTorch's ignore_index on some rows
        auto node = nodeOf(OpType::CrossEntropy);
        NodeValues v;
        v.in = { logits, labels };
        cpuBackend().forward(node, v, r.ctx);
        std::vector<float> probs(static_cast<std::size_t>(c));
        std::vector<float> terms(static_cast<std::size_t>(rows), 0.0F);
        std::vector<long long> ids(labels.i64(), labels.i64() + rows);
        for (int i = 0; i < rows; ++i) {
            math::softmaxRowReference(logits.f32() + i * c, c, probs.data());
            expectClose(probs.data(), v.saved[0].f32() + i * c, c, 1e-6, "probabilities");
            if (ids[static_cast<std::size_t>(i)] >= 0)
                terms[static_cast<std::size_t>(i)] = math::crossEntropyTerm(probs[static_cast<std::size_t>(ids[i])]);
        }
        float counted = 0;
        const float loss = math::crossEntropyMeanReference(terms.data(), ids.data(), rows, counted);
        EXPECT_EQ(counted, v.saved[1].f32()[0]) << rows << " rows";
        EXPECT_NEAR(loss, v.out[0].f32()[0], 2e-6 * std::abs(loss)) << rows << " rows";
        const float scale = 1.0F / counted;
        EXPECT_EQ(math::crossEntropyGradElement(0.25F, true, scale), -0.75F * scale);
    }
}

TEST(ColumnMath, ChunksCoverEveryRowOnceAndFillTheGpu)
{
    for (const std::int64_t rows : { 0, 1, 15, 16, 17, 1000, 8192, 70001, 6291456 }) {
        for (const std::int64_t cols : { 1, 3, 768, 50257, 1 << 20 }) {
            const auto k = math::columnChunks(rows, cols);
            const auto what = std::to_string(rows) + " x " + std::to_string(cols);
            if (rows == 0) {
                EXPECT_EQ(k.chunks, 0) << what;
                continue;
            }
            EXPECT_GE(k.chunks * k.rowsPerChunk, rows) << what;
            EXPECT_LT((k.chunks - 1) * k.rowsPerChunk, rows) << what; // no empty chunk
            EXPECT_LE(k.chunks, 1024) << what;
            EXPECT_TRUE(k.rowsPerChunk >= 16 || k.chunks == 1) << what;
        }
    }
    // GPT-2's bias gradient (batch 8 x seq 1024 rows, 768 columns): over 2^17 threads in pass 1.
    const auto gpt2 = math::columnChunks(8192, 768);
    EXPECT_GE(gpt2.chunks * 768, 1 << 17);
}

TEST(ColumnMath, ChunkedSumsMatchPlainSums)
{
    std::mt19937 gen(11);
    std::uniform_real_distribution<float> u(-1.0F, 1.0F);
    for (const std::int64_t rows : { 1, 16, 17, 999, 40000 }) {
        for (const std::int64_t cols : { 1, 7, 768 }) {
            std::vector<float> m(static_cast<std::size_t>(rows * cols));
            for (auto& x : m)
                x = u(gen);
            const auto value = [&](std::int64_t r, std::int64_t c) {
                return m[static_cast<std::size_t>(r * cols + c)];
            };
            for (std::int64_t c = 0; c < cols; c += std::max<std::int64_t>(1, cols / 5)) {
                double sum = 0;
                double magnitude = 0;
                for (std::int64_t r = 0; r < rows; ++r) {
                    sum += value(r, c);
                    magnitude += std::abs(value(r, c));
                }
                EXPECT_NEAR(math::chunkedColumnSum(value, rows, cols, c), sum, 1e-6 * magnitude + 1e-7)
                    << rows << " x " << cols << ", column " << c;
            }
        }
    }
}

TEST(ColumnMath, BiasAndNormParameterGradientsMatchTheCpuKernels)
{
    KernelRun r;
    std::mt19937 gen(3);
    const std::int64_t rows = 300;
    const std::int64_t c = 40;
    const auto x = randomArray(r.alloc, { rows, c }, gen);
    const auto gamma = randomArray(r.alloc, { c }, gen);
    const auto beta = randomArray(r.alloc, { c }, gen);
    const auto dy = randomArray(r.alloc, { rows, c }, gen);
    auto bias = nodeOf(OpType::BiasAdd);
    NodeValues b;
    b.in = { x, beta };
    cpuBackend().forward(bias, b, r.ctx);
    const auto biasGrads = cpuBackend().backward(bias, b, { dy }, { false, true }, r.ctx);
    auto norm = nodeOf(OpType::LayerNorm);
    NodeValues v;
    v.in = { x, gamma, beta };
    cpuBackend().forward(norm, v, r.ctx);
    const auto normGrads = cpuBackend().backward(norm, v, { dy }, { false, true, true }, r.ctx);
    std::vector<float> dbeta(static_cast<std::size_t>(c));
    std::vector<float> dgamma(static_cast<std::size_t>(c));
    const float* mean = v.saved[0].f32();
    const float* rstd = v.saved[1].f32();
    for (std::int64_t j = 0; j < c; ++j) {
        // The CUDA kernels' functors: dy for a bias and beta, dy (x - mean) rstd for gamma.
        dbeta[static_cast<std::size_t>(j)] = math::chunkedColumnSum(
            [&](std::int64_t row, std::int64_t col) { return dy.f32()[row * c + col]; }, rows, c, j);
        dgamma[static_cast<std::size_t>(j)] = math::chunkedColumnSum(
            [&](std::int64_t row, std::int64_t col) {
                return dy.f32()[row * c + col] * (x.f32()[row * c + col] - mean[row]) * rstd[row];
            },
            rows, c, j);
    }
    expectClose(dbeta.data(), biasGrads[1].f32(), c, 1e-5, "bias gradient");
    expectClose(dbeta.data(), normGrads[2].f32(), c, 1e-5, "beta gradient");
    expectClose(dgamma.data(), normGrads[1].f32(), c, 2e-5, "gamma gradient");
}

// engine/group_norm_math.h: GroupNorm by its definition (Wu and He 2018, eq. 1-3: mean and
// variance of each sample's group of channels over every position, then gamma and beta per
// channel), computed here in double, against the CPU kernels; the warp-blocked row references
// and the chunked dgamma/dbeta column sums the CUDA kernels run, against the CPU kernels. Rows
// shorter than a warp, many warps long, InstanceNorm (one channel a group), LayerNorm-like (one group).
TEST(RowMath, GroupNormMatchesItsDefinitionAndTheCudaBlocking)
{
    const std::vector<std::pair<Shape, std::int64_t>> cases { { { 2, 6, 5, 7 }, 3 }, { { 3, 8, 40 }, 8 },
        { { 2, 4, 1 }, 2 }, { { 1, 4, 33, 33 }, 1 }, { { 3, 6 }, 2 } };
    for (const auto& [shape, groups] : cases) {
        KernelRun r;
        std::mt19937 gen(static_cast<unsigned>(numElements(shape)));
        const auto x = randomArray(r.alloc, shape, gen);
        const auto gamma = randomArray(r.alloc, { shape[1] }, gen);
        const auto beta = randomArray(r.alloc, { shape[1] }, gen);
        auto node = nodeOf(OpType::GroupNorm);
        node.attrs = { { "groups", groups }, { "epsilon", 1e-5 } };
        NodeValues v;
        v.in = { x, gamma, beta };
        cpuBackend().forward(node, v, r.ctx);
        const auto dy = randomArray(r.alloc, shape, gen);
        const auto grads = cpuBackend().backward(node, v, { dy }, { true, true, true }, r.ctx);
        const auto what = "GroupNorm " + formatShape(shape) + " in " + std::to_string(groups) + " groups";

        math::GroupNormLayout l { shape[0], shape[1], groups, numElements(shape) / (shape[0] * shape[1]) };
        const auto n = l.rowLength();
        std::vector<float> want(static_cast<std::size_t>(x.numel()));
        for (std::int64_t row = 0; row < l.rows(); ++row) { // the definition, in double
            const float* xr = x.f32() + row * n;
            double sum = 0;
            double squares = 0;
            for (std::int64_t j = 0; j < n; ++j)
                sum += xr[j];
            const double mean = sum / double(n);
            for (std::int64_t j = 0; j < n; ++j)
                squares += (xr[j] - mean) * (xr[j] - mean);
            const double rstd = 1.0 / std::sqrt(squares / double(n) + 1e-5);
            for (std::int64_t j = 0; j < n; ++j) {
                const auto c = (row % groups) * (shape[1] / groups) + j / l.spatial;
                want[static_cast<std::size_t>(row * n + j)] =
                    static_cast<float>((xr[j] - mean) * rstd * gamma.f32()[c] + beta.f32()[c]);
            }
        }
        expectClose(v.out[0].f32(), want.data(), x.numel(), 1e-5, what + " forward (definition)");

        std::vector<float> y(static_cast<std::size_t>(n));
        std::vector<float> dx(static_cast<std::size_t>(n));
        for (std::int64_t row = 0; row < l.rows(); ++row) { // the CUDA blocking
            float mean = 0;
            float rstd = 0;
            const float* xr = x.f32() + row * n;
            math::groupNormRowReference(xr, gamma.f32(), beta.f32(), l, row, 1e-5F, y.data(), mean, rstd);
            expectClose(y.data(), v.out[0].f32() + row * n, n, 2e-5, what + " forward");
            EXPECT_NEAR(rstd, v.saved[1].f32()[row], 2e-5 * rstd) << what;
            math::groupNormGradRowReference(xr, dy.f32() + row * n, gamma.f32(), l, row, mean, rstd, dx.data());
            expectClose(dx.data(), grads[0].f32() + row * n, n, 2e-4, what + " backward");
        }
        for (const bool shift : { false, true }) {
            const math::GroupNormAffineGrad term { x.f32(), dy.f32(), v.saved[0].f32(), v.saved[1].f32(), l, shift };
            std::vector<float> sums(static_cast<std::size_t>(shape[1]));
            for (std::int64_t c = 0; c < shape[1]; ++c)
                sums[static_cast<std::size_t>(c)] = math::chunkedColumnSum(term, shape[0] * l.spatial, shape[1], c);
            expectClose(sums.data(), grads[shift ? 2 : 1].f32(), shape[1], 2e-4, what + (shift ? " dbeta" : " dgamma"));
        }
    }
}
