// engine/row_math.h: the warp-blocked row reductions the CUDA kernels run, as host references,
// against the CPU backend's LayerNorm, RMSNorm, Softmax and CrossEntropy kernels (which sum in
// double) on rows shorter than a warp, of a warp, and many warps long.
#include "backend.h"
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
