// What the CPU kernel tests share (kernels_test.cpp, kernels_elementwise_test.cpp,
// kernels_index_test.cpp): a node under test, seeded random inputs, a forward with a fixed dropout
// stream, and every backward against central finite differences of its forward:
// L = sum(out * R) for a fixed random R over the f32 outputs, so dL/dout = R.
#pragma once

#include "backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace ps::engine::testing {

// A node of `op` named "<Op>_under_test".
inline Node makeNode(OpType op, Attributes attrs = {})
{
    Node n;
    n.name = std::string(toString(op)) + "_under_test";
    n.op = op;
    n.attrs = std::move(attrs);
    return n;
}

// `n` seeded values uniform in [-1, 1) (GEMM operands).
inline std::vector<float> randomMatrix(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> v(n);
    for (auto& x : v)
        x = u(rng);
    return v;
}

// One gradient check: the node, its inputs and which of them to differentiate.
struct GradCase
{
    Node node;
    std::vector<NdArray> inputs;
    std::vector<bool> differentiable;
};

// Seeded random host arrays (the kernel tests' inputs and output weights).
struct RandomArrays
{
    // Uniform values in [lo, hi) from the seeded stream.
    NdArray random(Shape shape, float lo = -1.0F, float hi = 1.0F)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        std::uniform_real_distribution<float> u(lo, hi);
        for (std::int64_t i = 0; i < a.numel(); ++i)
            a.f32()[i] = u(m_data);
        return a;
    }

    // Integers uniform in [0, bound).
    NdArray ints(Shape shape, std::int64_t bound)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape), DType::I64);
        std::uniform_int_distribution<std::int64_t> u(0, bound - 1);
        for (std::int64_t i = 0; i < a.numel(); ++i)
            a.i64()[i] = u(m_data);
        return a;
    }

    // The given values, row-major.
    NdArray floats(Shape shape, const std::vector<float>& values)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        EXPECT_EQ(a.numel(), static_cast<std::int64_t>(values.size()));
        std::copy(values.begin(), values.end(), a.f32());
        return a;
    }
    NdArray indices(Shape shape, const std::vector<std::int64_t>& values)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape), DType::I64);
        EXPECT_EQ(a.numel(), static_cast<std::int64_t>(values.size()));
        std::copy(values.begin(), values.end(), a.i64());
        return a;
    }

    Allocator m_alloc;
    std::mt19937_64 m_data { 42 };
};

class KernelTest : public ::testing::Test, public RandomArrays
{
protected:
    // Forward with the dropout stream re-seeded, so every evaluation draws the same mask.
    std::vector<NdArray> forward(const Node& n, const std::vector<NdArray>& in, NodeValues& v)
    {
        std::mt19937_64 rng(7);
        KernelContext ctx { m_alloc, rng, true };
        v = NodeValues();
        v.in = in;
        cpuBackend().forward(n, v, ctx);
        return v.out;
    }

    // L = sum over the f32 outputs (those with a defined weight) of out * weight.
    double objective(const Node& n, const std::vector<NdArray>& in, const std::vector<NdArray>& weights)
    {
        NodeValues v;
        const auto out = forward(n, in, v);
        double sum = 0;
        for (std::size_t k = 0; k < out.size(); ++k) {
            for (std::int64_t i = 0; weights[k].defined() && i < out[k].numel(); ++i)
                sum += static_cast<double>(out[k].f32()[i]) * weights[k].f32()[i];
        }
        return sum;
    }

    // Backward of `n` on `inputs` (copied, not changed) against central finite differences, each
    // input's worst error relative to its largest gradient below `tolerance`. Failures start with
    // `prefix`; with `noGradForFixed`, an input not differentiated must get no gradient.
    void checkGradients(const Node& n, const std::vector<NdArray>& inputs, const std::vector<bool>& differentiable,
        double tolerance, const std::string& prefix, bool noGradForFixed)
    {
        NodeValues v;
        std::vector<NdArray> in;
        for (const auto& a : inputs)
            in.push_back(a.clone());
        const auto out = forward(n, in, v);
        std::vector<NdArray> weights;
        for (const auto& o : out)
            weights.push_back(o.dtype() == DType::F32 ? random(o.shape()) : NdArray());
        std::mt19937_64 rng(7);
        KernelContext ctx { m_alloc, rng, true };
        const auto grads = cpuBackend().backward(n, v, weights, differentiable, ctx);
        for (std::size_t k = 0; k < in.size(); ++k) {
            if (!differentiable[k]) {
                if (noGradForFixed) {
                    EXPECT_FALSE(grads[k].defined()) << prefix << "input " << k;
                }
                continue;
            }
            ASSERT_TRUE(grads[k].defined()) << prefix << "input " << k;
            ASSERT_EQ(grads[k].shape(), in[k].shape()) << prefix << "input " << k;
            double worst = 0;
            double scale = 1e-3;
            for (std::int64_t i = 0; i < in[k].numel(); ++i) {
                const float keep = in[k].f32()[i];
                const float h = 1e-2F * std::max(1.0F, std::abs(keep));
                in[k].f32()[i] = keep + h;
                const double up = objective(n, in, weights);
                in[k].f32()[i] = keep - h;
                const double down = objective(n, in, weights);
                in[k].f32()[i] = keep;
                const double numeric = (up - down) / (2.0 * static_cast<double>(h));
                worst = std::max(worst, std::abs(numeric - grads[k].f32()[i]));
                scale = std::max(scale, std::abs(numeric));
            }
            EXPECT_LT(worst / scale, tolerance)
                << prefix << "input " << k << ": max error " << worst << " against gradients up to " << scale;
        }
    }

    // `fn` throws a ps::Error whose message contains `needle`.
    template <typename Fn> void expectError(Fn fn, const std::string& needle)
    {
        try {
            fn();
            ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    }

    // The check of a case, its failures naming the node.
    void check(const GradCase& c, double tolerance = 2e-2)
    {
        checkGradients(c.node, c.inputs, c.differentiable, tolerance, c.node.name + " ", false);
    }
};

} // namespace ps::engine::testing
