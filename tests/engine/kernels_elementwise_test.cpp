// The elementwise, comparison, logic, cast, reduction, CumSum and Trilu kernels: forward values
// against hand-computed ONNX / PyTorch results, and every differentiable backward against central
// finite differences of its forward (L = sum(out * R) for a fixed random R, as kernels_test.cpp).
#include "backend.h"
#include "kernel_test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::makeNode;

namespace {

class ElementwiseKernel : public ::testing::Test
{
protected:
    NdArray f32(Shape shape, std::vector<float> values)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        EXPECT_EQ(static_cast<std::size_t>(a.numel()), values.size());
        std::copy(values.begin(), values.end(), a.f32());
        return a;
    }
    NdArray i64(Shape shape, std::vector<std::int64_t> values)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape), DType::I64);
        EXPECT_EQ(static_cast<std::size_t>(a.numel()), values.size());
        std::copy(values.begin(), values.end(), a.i64());
        return a;
    }
    // The single output of the op on `inputs`.
    NdArray run(OpType op, std::vector<NdArray> inputs, Attributes attrs = {})
    {
        NodeValues v;
        return runWith(makeNode(op, std::move(attrs)), std::move(inputs), v);
    }
    NdArray runWith(const Node& n, std::vector<NdArray> inputs, NodeValues& v)
    {
        KernelContext ctx { m_alloc, m_rng, true };
        v = NodeValues();
        v.in = std::move(inputs);
        cpuBackend().forward(n, v, ctx);
        EXPECT_EQ(v.out.size(), 1U);
        return v.out.at(0);
    }
    std::vector<NdArray> backward(
        const Node& n, const NodeValues& v, std::vector<NdArray> gradOut, const std::vector<bool>& needGrad)
    {
        KernelContext ctx { m_alloc, m_rng, true };
        return cpuBackend().backward(n, v, gradOut, needGrad, ctx);
    }
    static void expectF32(const NdArray& a, const Shape& shape, const std::vector<float>& values, float tol = 1e-6F)
    {
        ASSERT_EQ(a.dtype(), DType::F32);
        ASSERT_EQ(a.shape(), shape);
        ASSERT_EQ(static_cast<std::size_t>(a.numel()), values.size());
        for (std::size_t i = 0; i < values.size(); ++i)
            EXPECT_NEAR(a.f32()[i], values[i], tol) << "element " << i;
    }
    static void expectI64(const NdArray& a, const Shape& shape, const std::vector<std::int64_t>& values)
    {
        ASSERT_EQ(a.dtype(), DType::I64);
        ASSERT_EQ(a.shape(), shape);
        ASSERT_EQ(static_cast<std::size_t>(a.numel()), values.size());
        for (std::size_t i = 0; i < values.size(); ++i)
            EXPECT_EQ(a.i64()[i], values[i]) << "element " << i;
    }

    Allocator m_alloc;
    std::mt19937_64 m_rng { 1 };
};

constexpr std::int64_t kOne = 1;
constexpr std::int64_t kZero = 0;

} // namespace

TEST_F(ElementwiseKernel, Activations)
{
    expectF32(run(OpType::Sigmoid, { f32({ 5 }, { -2, 0, 3, -100, 100 }) }), { 5 },
        { 0.11920292F, 0.5F, 0.95257413F, 0.0F, 1.0F });
    const auto x = f32({ 5 }, { -3, -1, 0, 1, 3 });
    expectF32(run(OpType::HardSigmoid, { x }), { 5 }, { 0.0F, 0.3F, 0.5F, 0.7F, 1.0F }); // ONNX alpha 0.2, beta 0.5
    expectF32(run(OpType::HardSigmoid, { x }, { { "alpha", 0.5 }, { "beta", 0.25 } }), { 5 },
        { 0.0F, 0.0F, 0.25F, 0.75F, 1.0F });
    expectF32(run(OpType::HardSwish, { f32({ 7 }, { -4, -3, -1, 0, 1.5F, 3, 5 }) }), { 7 },
        { 0.0F, 0.0F, -1.0F / 3.0F, 0.0F, 1.125F, 3.0F, 5.0F });
    expectF32(run(OpType::LeakyRelu, { f32({ 3 }, { -2, 0, 3 }) }), { 3 }, { -0.02F, 0.0F, 3.0F });
    expectF32(run(OpType::LeakyRelu, { f32({ 3 }, { -2, 0, 3 }) }, { { "alpha", 0.2 } }), { 3 }, { -0.4F, 0.0F, 3.0F });
}

TEST_F(ElementwiseKernel, UnaryMath)
{
    expectF32(run(OpType::Exp, { f32({ 3 }, { 0, 1, -1 }) }), { 3 }, { 1.0F, 2.7182818F, 0.36787944F });
    const auto logs = run(OpType::Log, { f32({ 2, 2 }, { 1, 2.7182818F, 0.5F, 0 }) });
    ASSERT_EQ(logs.shape(), (Shape { 2, 2 }));
    EXPECT_NEAR(logs.f32()[0], 0.0F, 1e-6F);
    EXPECT_NEAR(logs.f32()[1], 1.0F, 1e-6F);
    EXPECT_NEAR(logs.f32()[2], -0.69314718F, 1e-6F);
    EXPECT_EQ(logs.f32()[3], -std::numeric_limits<float>::infinity());
    expectF32(run(OpType::Neg, { f32({ 3 }, { -1.5F, 0, 2 }) }), { 3 }, { 1.5F, 0.0F, -2.0F });
    expectI64(run(OpType::Neg, { i64({ 3 }, { -4, 0, 7 }) }), { 3 }, { 4, 0, -7 });
    expectF32(run(OpType::Abs, { f32({ 3 }, { -1.5F, 0, 2 }) }), { 3 }, { 1.5F, 0.0F, 2.0F });
    expectI64(run(OpType::Abs, { i64({ 3 }, { -4, 0, 7 }) }), { 3 }, { 4, 0, 7 });
    EXPECT_THROW((void)run(OpType::Exp, { i64({ 1 }, { 1 }) }), Error); // no integer Exp
}

TEST_F(ElementwiseKernel, ClipWithBothOneOrNoBounds)
{
    const auto x = f32({ 5 }, { -3, -1, 0.5F, 2, 5 });
    expectF32(run(OpType::Clip, { x }, { { "min", -1.0 }, { "max", 2.0 } }), { 5 }, { -1, -1, 0.5F, 2, 2 });
    expectF32(run(OpType::Clip, { x }, { { "min", 0.0 } }), { 5 }, { 0, 0, 0.5F, 2, 5 });
    expectF32(run(OpType::Clip, { x }, { { "max", 0.0 } }), { 5 }, { -3, -1, 0, 0, 0 });
    expectF32(run(OpType::Clip, { x }), { 5 }, { -3, -1, 0.5F, 2, 5 });
    expectF32(run(OpType::Clip, { x }, { { "min", 2.0 }, { "max", 1.0 } }), { 5 }, { 1, 1, 1, 1, 1 }); // min > max
    expectI64(
        run(OpType::Clip, { i64({ 4 }, { -2, 0, 3, 9 }) }, { { "min", 0.0 }, { "max", 4.0 } }), { 4 }, { 0, 0, 3, 4 });
}

TEST_F(ElementwiseKernel, MaxMinBroadcastTiesAndNaN)
{
    const auto a = f32({ 2, 3 }, { 1, 5, 3, -1, 2, 9 });
    const auto b = f32({ 3 }, { 2, 5, 0 });
    expectF32(run(OpType::Max, { a, b }), { 2, 3 }, { 2, 5, 3, 2, 5, 9 });
    expectF32(run(OpType::Min, { a, b }), { 2, 3 }, { 1, 5, 0, -1, 2, 0 });
    expectI64(run(OpType::Max, { i64({ 2, 1 }, { 0, 10 }), i64({ 1, 3 }, { -1, 5, 20 }) }), { 2, 3 },
        { 0, 5, 20, 10, 10, 20 });
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto withNan = run(OpType::Max, { f32({ 2 }, { nan, 1 }), f32({ 2 }, { 1, nan }) });
    EXPECT_TRUE(std::isnan(withNan.f32()[0]));
    EXPECT_TRUE(std::isnan(withNan.f32()[1]));
    EXPECT_THROW((void)run(OpType::Min, { f32({ 2, 3 }, std::vector<float>(6)), f32({ 2 }, { 0, 0 }) }), Error);
    EXPECT_THROW((void)run(OpType::Max, { a, i64({ 3 }, { 1, 2, 3 }) }), Error);
}

TEST_F(ElementwiseKernel, MaxMinGradientGoesToAOnTies)
{
    for (const auto op : { OpType::Max, OpType::Min }) {
        const auto n = makeNode(op);
        NodeValues v;
        (void)runWith(n, { f32({ 3 }, { 1, 4, 2 }), f32({ 3 }, { 1, 3, 5 }) }, v);
        const auto g = backward(n, v, { f32({ 3 }, { 10, 20, 30 }) }, { true, true });
        if (op == OpType::Max) {
            expectF32(g[0], { 3 }, { 10, 20, 0 });
            expectF32(g[1], { 3 }, { 0, 0, 30 });
        } else {
            expectF32(g[0], { 3 }, { 10, 0, 30 });
            expectF32(g[1], { 3 }, { 0, 20, 0 });
        }
    }
}

TEST_F(ElementwiseKernel, WhereBroadcastsConditionAndValues)
{
    // cond (2, 1) i64, a (2, 3), b scalar: rows of a where cond, else b.
    expectF32(run(OpType::Where, { i64({ 2, 1 }, { 1, 0 }), f32({ 2, 3 }, { 1, 2, 3, 4, 5, 6 }), f32({}, { -1 }) }),
        { 2, 3 }, { 1, 2, 3, -1, -1, -1 });
    // cond (2, 3) f32 (nonzero is true), a (1), b (3).
    expectF32(
        run(OpType::Where, { f32({ 2, 3 }, { 0, 0.5F, -2, 1, 0, 0 }), f32({ 1 }, { 7 }), f32({ 3 }, { 1, 2, 3 }) }),
        { 2, 3 }, { 1, 7, 7, 7, 2, 3 });
    expectI64(run(OpType::Where, { i64({ 3 }, { 0, 1, 0 }), i64({ 3 }, { 4, 5, 6 }), i64({ 1 }, { -9 }) }), { 3 },
        { -9, 5, -9 });
    EXPECT_THROW((void)run(OpType::Where, { i64({ 2 }, { 1, 0 }), f32({ 3 }, { 1, 2, 3 }), f32({ 1 }, { 0 }) }), Error);
}

TEST_F(ElementwiseKernel, ComparisonsOnF32I64AndMixed)
{
    struct Expect
    {
        OpType op;
        std::vector<std::int64_t> out;
    };
    const std::vector<Expect> cases = { { OpType::Equal, { 0, 0, 0, 1 } }, { OpType::Less, { 1, 1, 0, 0 } },
        { OpType::LessOrEqual, { 1, 1, 0, 1 } }, { OpType::Greater, { 0, 0, 1, 0 } },
        { OpType::GreaterOrEqual, { 0, 0, 1, 1 } } };
    for (const auto& c : cases) { // (2, 2) against (2): [[1, 2], [3, 4]] vs [2, 4]
        SCOPED_TRACE(std::string(toString(c.op)));
        expectI64(run(c.op, { f32({ 2, 2 }, { 1, 2, 3, 4 }), f32({ 2 }, { 2, 4 }) }), { 2, 2 }, c.out);
        expectI64(run(c.op, { i64({ 2, 2 }, { 1, 2, 3, 4 }), i64({ 2 }, { 2, 4 }) }), { 2, 2 }, c.out);
        expectI64(run(c.op, { i64({ 2, 2 }, { 1, 2, 3, 4 }), f32({ 2 }, { 2, 4 }) }), { 2, 2 }, c.out);
    }
    expectI64(run(OpType::Less, { i64({ 3 }, { 1, 2, 3 }), f32({ 1 }, { 1.5F }) }), { 3 }, { 1, 0, 0 });
    // i64 compares exactly: 2^53 + 1 and 2^53 are one apart but the same double.
    const std::int64_t big = std::int64_t { 1 } << 53;
    expectI64(run(OpType::Equal, { i64({ 1 }, { big + 1 }), i64({ 1 }, { big }) }), { 1 }, { 0 });
    expectI64(run(OpType::Greater, { i64({ 1 }, { big + 1 }), i64({ 1 }, { big }) }), { 1 }, { 1 });
}

TEST_F(ElementwiseKernel, NotAndOr)
{
    expectI64(run(OpType::Not, { i64({ 4 }, { 0, 1, 1, 0 }) }), { 4 }, { 1, 0, 0, 1 });
    expectI64(run(OpType::Not, { f32({ 2 }, { 0, 2.5F }) }), { 2 }, { 1, 0 });
    const float nan = std::numeric_limits<float>::quiet_NaN();
    expectI64(
        run(OpType::IsNaN, { f32({ 3 }, { 1.0F, nan, -std::numeric_limits<float>::infinity() }) }), { 3 }, { 0, 1, 0 });
    const auto a = i64({ 2, 2 }, { 1, 1, 0, 0 });
    const auto b = i64({ 2 }, { 1, 0 });
    expectI64(run(OpType::And, { a, b }), { 2, 2 }, { 1, 0, 0, 0 });
    expectI64(run(OpType::Or, { a, b }), { 2, 2 }, { 1, 1, 1, 0 });
    expectI64(run(OpType::And, { i64({ 2 }, { 2, 3 }), f32({ 2 }, { 0.5F, 0 }) }), { 2 }, { 1, 0 });
}

TEST_F(ElementwiseKernel, CastTruncatesTowardZero)
{
    const auto x = f32({ 6 }, { -2.7F, -0.5F, 0, 1.9F, 3, 300 });
    expectI64(run(OpType::Cast, { x }, { { "to", std::string("i64") } }), { 6 }, { -2, 0, 0, 1, 3, 300 });
    expectI64(run(OpType::Cast, { x }, { { "to", std::string("i32") } }), { 6 }, { -2, 0, 0, 1, 3, 300 });
    expectI64(run(OpType::Cast, { x }, { { "to", std::string("u8") } }), { 6 }, { 254, 0, 0, 1, 3, 44 }); // wraps
    expectI64(run(OpType::Cast, { x }, { { "to", std::string("bool") } }), { 6 }, { 1, 1, 0, 1, 1, 1 });
    expectF32(run(OpType::Cast, { i64({ 2 }, { -3, 7 }) }, { { "to", std::string("f32") } }), { 2 }, { -3, 7 });
    expectF32(run(OpType::Cast, { x }, { { "to", std::string("f16") } }), { 6 }, { -2.7F, -0.5F, 0, 1.9F, 3, 300 });
    expectI64(run(OpType::Cast, { i64({ 3 }, { 0, -2, 5 }) }, { { "to", std::string("bool") } }), { 3 }, { 0, 1, 1 });
    EXPECT_THROW((void)run(OpType::Cast, { x }, { { "to", std::string("f128") } }), Error);
    EXPECT_THROW((void)run(OpType::Cast, { x }), Error);
}

TEST_F(ElementwiseKernel, CastGradientOnlyBetweenFloats)
{
    for (const char* to : { "f32", "f16", "i64", "bool" }) {
        SCOPED_TRACE(to);
        const auto n = makeNode(OpType::Cast, { { "to", std::string(to) } });
        NodeValues v;
        (void)runWith(n, { f32({ 2 }, { 1.5F, -2 }) }, v);
        const auto g = backward(n, v, { v.out[0].dtype() == DType::F32 ? f32({ 2 }, { 3, 4 }) : NdArray() }, { true });
        if (std::string(to)[0] == 'f')
            expectF32(g[0], { 2 }, { 3, 4 });
        else
            EXPECT_FALSE(g[0].defined());
    }
}

TEST_F(ElementwiseKernel, ComparisonAndLogicBackwardLeaveNoGradient)
{
    for (const auto op : { OpType::Equal, OpType::Less, OpType::GreaterOrEqual, OpType::And, OpType::Or }) {
        const auto n = makeNode(op);
        NodeValues v;
        (void)runWith(n, { f32({ 2 }, { 1, 2 }), f32({ 2 }, { 2, 2 }) }, v);
        const auto g = backward(n, v, { NdArray() }, { true, true });
        EXPECT_FALSE(g[0].defined()) << toString(op);
        EXPECT_FALSE(g[1].defined()) << toString(op);
    }
}

TEST_F(ElementwiseKernel, ReduceSumAxesKeepdimsAndNegativeAxes)
{
    std::vector<float> values(24);
    for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>(i);
    const auto x = f32({ 2, 3, 4 }, values); // 0 .. 23
    expectF32(
        run(OpType::ReduceSum, { x }, { { "axes", Shape { 1 } } }), { 2, 1, 4 }, { 12, 15, 18, 21, 48, 51, 54, 57 });
    expectF32(run(OpType::ReduceSum, { x }, { { "axes", Shape { -1 } }, { "keepdims", kZero } }), { 2, 3 },
        { 6, 22, 38, 54, 70, 86 });
    expectF32(
        run(OpType::ReduceSum, { x }, { { "axes", Shape { 0, -1 } }, { "keepdims", kZero } }), { 3 }, { 60, 92, 124 });
    expectF32(run(OpType::ReduceSum, { x }), { 1, 1, 1 }, { 276 });
    expectF32(run(OpType::ReduceSum, { x }, { { "keepdims", kZero } }), {}, { 276 });
    expectF32(run(OpType::ReduceSum, { x }, { { "noop_with_empty_axes", kOne } }), { 2, 3, 4 }, values);
    expectI64(run(OpType::ReduceSum, { i64({ 2, 3 }, { 1, 1, 0, 1, 0, 0 }) }, { { "axes", Shape { 1 } } }), { 2, 1 },
        { 2, 1 });
    EXPECT_THROW((void)run(OpType::ReduceSum, { x }, { { "axes", Shape { 3 } } }), Error);
    EXPECT_THROW((void)run(OpType::ReduceSum, { x }, { { "axes", Shape { 1, -2 } } }), Error); // repeated
}

TEST_F(ElementwiseKernel, ReduceMaxValuesAndFirstMaximumGradient)
{
    const auto x = f32({ 2, 3 }, { 1, 5, 5, 7, -2, 7 });
    expectF32(run(OpType::ReduceMax, { x }, { { "axes", Shape { 1 } }, { "keepdims", kZero } }), { 2 }, { 5, 7 });
    expectF32(run(OpType::ReduceMax, { x }, { { "axes", Shape { -2 } } }), { 1, 3 }, { 7, 5, 7 });
    expectF32(run(OpType::ReduceMax, { x }, { { "keepdims", kZero } }), {}, { 7 });
    expectI64(
        run(OpType::ReduceMax, { i64({ 2, 2 }, { -5, -3, 4, 2 }) }, { { "axes", Shape { 1 } } }), { 2, 1 }, { -3, 4 });
    // Ties: the gradient goes to the first maximum of each row, then of the whole array.
    const auto rows = makeNode(OpType::ReduceMax, { { "axes", Shape { 1 } }, { "keepdims", kZero } });
    NodeValues v;
    (void)runWith(rows, { x }, v);
    expectF32(backward(rows, v, { f32({ 2 }, { 2, 3 }) }, { true })[0], { 2, 3 }, { 0, 2, 0, 3, 0, 0 });
    const auto all = makeNode(OpType::ReduceMax);
    (void)runWith(all, { x }, v);
    expectF32(backward(all, v, { f32({ 1, 1 }, { 4 }) }, { true })[0], { 2, 3 }, { 0, 0, 0, 4, 0, 0 });
    EXPECT_THROW((void)run(OpType::ReduceMax, { f32({ 2, 0 }, {}) }, { { "axes", Shape { 1 } } }), Error);
}

TEST_F(ElementwiseKernel, CumSumExclusiveReverseAndAxes)
{
    const auto x = f32({ 2, 3 }, { 1, 2, 3, 4, 5, 6 });
    const auto axis = [](std::int64_t a, std::int64_t exclusive, std::int64_t reverse) {
        return Attributes { { "axis", a }, { "exclusive", exclusive }, { "reverse", reverse } };
    };
    expectF32(run(OpType::CumSum, { x }, axis(1, 0, 0)), { 2, 3 }, { 1, 3, 6, 4, 9, 15 });
    expectF32(run(OpType::CumSum, { x }, axis(-1, 1, 0)), { 2, 3 }, { 0, 1, 3, 0, 4, 9 });
    expectF32(run(OpType::CumSum, { x }, axis(1, 0, 1)), { 2, 3 }, { 6, 5, 3, 15, 11, 6 });
    expectF32(run(OpType::CumSum, { x }, axis(1, 1, 1)), { 2, 3 }, { 5, 3, 0, 11, 6, 0 });
    expectF32(run(OpType::CumSum, { x }, axis(0, 0, 0)), { 2, 3 }, { 1, 2, 3, 5, 7, 9 });
    expectF32(run(OpType::CumSum, { x }, axis(-2, 1, 1)), { 2, 3 }, { 4, 5, 6, 0, 0, 0 });
    // Position ids from an attention mask: mask.cumsum(-1).
    expectI64(run(OpType::CumSum, { i64({ 1, 4 }, { 1, 1, 0, 1 }) }, axis(-1, 0, 0)), { 1, 4 }, { 1, 2, 2, 3 });
    EXPECT_THROW((void)run(OpType::CumSum, { x }, axis(2, 0, 0)), Error);
}

TEST_F(ElementwiseKernel, TriluUpperAndLowerWithOffsetsOnABatch)
{
    std::vector<float> values(24);
    for (std::size_t i = 0; i < values.size(); ++i)
        values[i] = static_cast<float>(i + 1);
    const auto x = f32({ 2, 3, 4 }, values);
    struct Expect
    {
        std::int64_t upper, k;
        const char* mask; // rows of the 3x4 triangle kept, as torch.triu / torch.tril give it
    };
    const std::vector<Expect> cases = { { 1, 0,
                                            "1111"
                                            "0111"
                                            "0011" },
        { 1, 1,
            "0111"
            "0011"
            "0001" },
        { 1, -1,
            "1111"
            "1111"
            "0111" },
        { 0, 0,
            "1000"
            "1100"
            "1110" },
        { 0, -1,
            "0000"
            "1000"
            "1100" },
        { 0, 2,
            "1110"
            "1111"
            "1111" } };
    for (const auto& c : cases) {
        SCOPED_TRACE("upper " + std::to_string(c.upper) + " k " + std::to_string(c.k));
        std::vector<float> expect(24);
        for (std::size_t i = 0; i < 24; ++i)
            expect[i] = c.mask[i % 12] == '1' ? values[i] : 0.0F;
        expectF32(run(OpType::Trilu, { x }, { { "upper", c.upper }, { "k", c.k } }), { 2, 3, 4 }, expect);
    }
    expectI64(run(OpType::Trilu, { i64({ 2, 2 }, { 1, 1, 1, 1 }) }, { { "k", kOne } }), { 2, 2 }, { 0, 1, 0, 0 });
    EXPECT_THROW((void)run(OpType::Trilu, { f32({ 3 }, { 1, 2, 3 }) }), Error);
}

// ---- Backward against central finite differences ----

namespace {

class ElementwiseKernelGrad : public ps::engine::testing::KernelTest
{
protected:
    // Random multiples of `step` in [lo, hi] plus `offset`: values kept away from kinks and ties.
    NdArray grid(Shape shape, float lo, float hi, float step, float offset)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        std::uniform_int_distribution<int> u(
            static_cast<int>(std::round(lo / step)), static_cast<int>(std::round(hi / step)));
        for (std::int64_t i = 0; i < a.numel(); ++i)
            a.f32()[i] = static_cast<float>(u(m_data)) * step + offset;
        return a;
    }
    // Distinct values 0.1 apart in a random order (no ties for ReduceMax).
    NdArray distinct(Shape shape)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape));
        for (std::int64_t i = 0; i < a.numel(); ++i)
            a.f32()[i] = 0.1F * static_cast<float>(i) - 1.0F;
        std::shuffle(a.f32(), a.f32() + a.numel(), m_data);
        return a;
    }
    NdArray bools(Shape shape)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape), DType::I64);
        std::bernoulli_distribution u(0.5);
        for (std::int64_t i = 0; i < a.numel(); ++i)
            a.i64()[i] = u(m_data) ? 1 : 0;
        return a;
    }
};

} // namespace

TEST_F(ElementwiseKernelGrad, Activations)
{
    check({ makeNode(OpType::Sigmoid), { random({ 3, 4 }, -4.0F, 4.0F) }, { true } });
    // Grid points 0.125 from every kink (HardSigmoid's +-2.5, HardSwish's +-3, custom -0.5 and 1.5).
    check({ makeNode(OpType::HardSigmoid), { grid({ 4, 5 }, -4.0F, 4.0F, 0.25F, 0.125F) }, { true } });
    check({ makeNode(OpType::HardSigmoid, { { "alpha", 0.5 }, { "beta", 0.25 } }),
        { grid({ 4, 5 }, -2.0F, 2.0F, 0.25F, 0.125F) }, { true } });
    check({ makeNode(OpType::HardSwish), { grid({ 4, 5 }, -5.0F, 5.0F, 0.25F, 0.125F) }, { true } });
    check(
        { makeNode(OpType::LeakyRelu, { { "alpha", 0.1 } }), { grid({ 3, 4 }, -1.0F, 1.0F, 0.1F, 0.05F) }, { true } });
}

TEST_F(ElementwiseKernelGrad, UnaryMathAndClip)
{
    check({ makeNode(OpType::Exp), { random({ 3, 4 }, -2.0F, 2.0F) }, { true } });
    check({ makeNode(OpType::Log), { random({ 3, 4 }, 0.5F, 3.0F) }, { true } });
    check({ makeNode(OpType::Neg), { random({ 3, 4 }) }, { true } });
    check({ makeNode(OpType::Abs), { grid({ 3, 4 }, -1.0F, 1.0F, 0.1F, 0.05F) }, { true } });
    const auto x = grid({ 4, 5 }, -1.0F, 1.0F, 0.1F, 0.05F); // 0.05 from the bounds below
    check({ makeNode(OpType::Clip, { { "min", -0.5 }, { "max", 0.5 } }), { x }, { true } });
    check({ makeNode(OpType::Clip, { { "min", 0.0 } }), { x }, { true } });
    check({ makeNode(OpType::Clip, { { "max", 0.3 } }), { x }, { true } });
}

TEST_F(ElementwiseKernelGrad, MaxMinWhereCast)
{
    // a on 0.05 + 0.1 k, b on 0.1 k: never within a step of each other.
    check({ makeNode(OpType::Max),
        { grid({ 2, 3, 4 }, -1.0F, 1.0F, 0.1F, 0.05F), grid({ 3, 1 }, -1.0F, 1.0F, 0.1F, 0.0F) }, { true, true } });
    check({ makeNode(OpType::Min),
        { grid({ 4 }, -1.0F, 1.0F, 0.1F, 0.0F), grid({ 2, 3, 4 }, -1.0F, 1.0F, 0.1F, 0.05F) }, { true, true } });
    check({ makeNode(OpType::Where), { bools({ 2, 1, 4 }), random({ 2, 3, 4 }), random({ 3, 1 }) },
        { false, true, true } });
    check({ makeNode(OpType::Where), { bools({ 3, 4 }), random({ 4 }), random({ 2, 3, 4 }) }, { false, true, true } });
    check({ makeNode(OpType::Cast, { { "to", std::string("f32") } }), { random({ 3, 4 }) }, { true } });
}

TEST_F(ElementwiseKernelGrad, ReductionsCumSumTrilu)
{
    check({ makeNode(OpType::ReduceSum, { { "axes", Shape { 1 } } }), { random({ 2, 3, 4 }) }, { true } });
    check({ makeNode(OpType::ReduceSum, { { "axes", Shape { 0, -1 } }, { "keepdims", kZero } }),
        { random({ 2, 3, 4 }) }, { true } });
    check({ makeNode(OpType::ReduceSum), { random({ 2, 3, 4 }) }, { true } });
    check({ makeNode(OpType::ReduceMax, { { "axes", Shape { -1 } }, { "keepdims", kZero } }), { distinct({ 2, 3, 4 }) },
        { true } });
    check({ makeNode(OpType::ReduceMax, { { "axes", Shape { 0, 2 } } }), { distinct({ 2, 3, 4 }) }, { true } });
    check({ makeNode(OpType::ReduceMax), { distinct({ 2, 3, 4 }) }, { true } });
    for (std::int64_t exclusive = 0; exclusive < 2; ++exclusive) {
        for (std::int64_t reverse = 0; reverse < 2; ++reverse)
            check({ makeNode(OpType::CumSum,
                        { { "axis", std::int64_t { 1 } }, { "exclusive", exclusive }, { "reverse", reverse } }),
                { random({ 2, 4, 3 }) }, { true } });
    }
    check({ makeNode(OpType::CumSum, { { "axis", std::int64_t { -1 } } }), { random({ 2, 3, 4 }) }, { true } });
    check({ makeNode(OpType::Trilu, { { "upper", kOne }, { "k", kOne } }), { random({ 2, 3, 4 }) }, { true } });
    check({ makeNode(OpType::Trilu, { { "upper", kZero }, { "k", std::int64_t { -1 } } }), { random({ 2, 4, 3 }) },
        { true } });
}

TEST_F(ElementwiseKernelGrad, UndefinedOutputGradientMeansZero)
{
    for (const auto op : { OpType::Sigmoid, OpType::Neg, OpType::CumSum, OpType::ReduceSum }) {
        const auto n = makeNode(op);
        NodeValues v;
        (void)forward(n, { random({ 2, 3 }) }, v);
        std::mt19937_64 rng(7);
        KernelContext ctx { m_alloc, rng, true };
        const auto g = cpuBackend().backward(n, v, { NdArray() }, { true }, ctx);
        ASSERT_TRUE(g[0].defined()) << toString(op);
        ASSERT_EQ(g[0].shape(), (Shape { 2, 3 })) << toString(op);
        for (std::int64_t i = 0; i < 6; ++i)
            EXPECT_EQ(g[0].f32()[i], 0.0F) << toString(op);
    }
}

// A few ops against Debian's PyTorch on the same inputs (skipped where python3 has no torch).
TEST_F(ElementwiseKernel, MatchesPyTorch)
{
    const char* script = R"(/usr/bin/python3 -c '
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("SKIP")
    raise SystemExit(0)
x = torch.linspace(-4, 4, 17)
m = torch.arange(1., 25.).reshape(2, 3, 4)
rows = [torch.sigmoid(x), F.hardsigmoid(x), F.hardswish(x), F.leaky_relu(x, 0.1), x.clamp(min=-1.5), x.clamp(-1, 2),
        torch.triu(m, 1), torch.tril(m, -1), torch.triu(m, -2), torch.tril(m, 2), m.cumsum(1),
        m.flip(1).cumsum(1).flip(1), m.amax(dim=(0, 2)), m.sum(dim=-1)]
for r in rows:
    print(" ".join(repr(float(v)) for v in r.flatten()))
' 2>&1)";
    FILE* pipe = ::popen(script, "r");
    ASSERT_NE(pipe, nullptr);
    std::vector<std::vector<float>> torch;
    std::string printed;
    char line[4096];
    while (std::fgets(line, sizeof line, pipe)) {
        printed += line;
        std::istringstream in(line);
        torch.emplace_back(std::istream_iterator<float>(in), std::istream_iterator<float>());
    }
    ASSERT_EQ(::pclose(pipe), 0) << printed;
    if (printed.rfind("SKIP", 0) == 0)
        GTEST_SKIP() << "no PyTorch for /usr/bin/python3";
    ASSERT_EQ(torch.size(), 14U) << printed;

    std::vector<float> xs(17);
    for (std::size_t i = 0; i < xs.size(); ++i)
        xs[i] = -4.0F + 0.5F * static_cast<float>(i);
    std::vector<float> ms(24);
    for (std::size_t i = 0; i < ms.size(); ++i)
        ms[i] = static_cast<float>(i + 1);
    const auto x = f32({ 17 }, xs);
    const auto m = f32({ 2, 3, 4 }, ms);
    const auto tri = [](std::int64_t upper, std::int64_t k) { return Attributes { { "upper", upper }, { "k", k } }; };
    const std::vector<NdArray> ours = { run(OpType::Sigmoid, { x }),
        run(OpType::HardSigmoid, { x }, { { "alpha", 1.0 / 6.0 } }), run(OpType::HardSwish, { x }),
        run(OpType::LeakyRelu, { x }, { { "alpha", 0.1 } }), run(OpType::Clip, { x }, { { "min", -1.5 } }),
        run(OpType::Clip, { x }, { { "min", -1.0 }, { "max", 2.0 } }), run(OpType::Trilu, { m }, tri(1, 1)),
        run(OpType::Trilu, { m }, tri(0, -1)), run(OpType::Trilu, { m }, tri(1, -2)),
        run(OpType::Trilu, { m }, tri(0, 2)), run(OpType::CumSum, { m }, { { "axis", kOne } }),
        run(OpType::CumSum, { m }, { { "axis", kOne }, { "reverse", kOne } }),
        run(OpType::ReduceMax, { m }, { { "axes", Shape { 0, 2 } }, { "keepdims", kZero } }),
        run(OpType::ReduceSum, { m }, { { "axes", Shape { -1 } }, { "keepdims", kZero } }) };
    for (std::size_t r = 0; r < ours.size(); ++r) {
        ASSERT_EQ(static_cast<std::size_t>(ours[r].numel()), torch[r].size()) << "row " << r;
        for (std::size_t i = 0; i < torch[r].size(); ++i)
            EXPECT_NEAR(ours[r].f32()[i], torch[r][i], 1e-6F) << "row " << r << " element " << i;
    }
}
