// Activations, unary math, Max/Min, comparisons and logic, Where and Cast, with ONNX / PyTorch
// semantics (ReduceSum/ReduceMax, CumSum and Trilu: kernels_reduce.cpp). Float values are f32 and integer or bool
// values i64 (bool as 0/1); comparisons and logic produce i64 0/1. Each backward says which values it reads ("keeps"):
// the runtime may release the others after forward, leaving only their shapes.
#include "cpu/kernel_impl.h"
#include "cpu/typed_arrays.h"
#include "graph/shape_inference.h"
#include "kernel_math.h"
#include "op_rules.h"
#include "order_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

namespace ps::engine::detail {
namespace {

    using namespace typed;

    // ---- Unary float ops: dx = dy * d(k), k the one value the backward keeps ----

    template <typename Op> void floatUnary(const Node& node, NodeValues& v, KernelContext& ctx, Op op)
    {
        requireF32(node, v.in[0], 0);
        v.out = { mapArray<float, float>(v.in[0], ctx, op) };
    }

    template <typename D> void unaryBackward(BackwardArgs& g, KernelContext& ctx, const NdArray& kept, D d)
    {
        if (!g.needGrad[0])
            return;
        const auto dy = gradOrZeros(g.gradOut[0], kept.shape(), ctx.allocator);
        auto dx = NdArray::empty(ctx.allocator, kept.shape());
        const float* gy = dy.f32();
        const float* k = kept.f32();
        float* o = dx.f32();
        for (std::int64_t i = 0; i < dx.numel(); ++i)
            o[i] = gy[i] * d(k[i]);
        g.gradIn[0] = dx;
    }

    void sigmoidForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        floatUnary(node, v, ctx, math::sigmoid);
    }

    void sigmoidBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps the output
    {
        unaryBackward(g, ctx, v.out[0], [](float y) { return y * (1.0F - y); });
    }

    struct HardSigmoidParams
    {
        float alpha, beta;
    };

    HardSigmoidParams hardSigmoidParams(const Node& node)
    {
        return { static_cast<float>(node.floatAttr("alpha", 0.2)), static_cast<float>(node.floatAttr("beta", 0.5)) };
    }

    void hardSigmoidForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto p = hardSigmoidParams(node);
        floatUnary(node, v, ctx, [p](float x) { return math::hardSigmoid(x, p.alpha, p.beta); });
    }

    void hardSigmoidBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps x
    {
        const auto p = hardSigmoidParams(node);
        unaryBackward(g, ctx, v.in[0], [p](float x) { return math::hardSigmoidGrad(x, p.alpha, p.beta); });
    }

    void hardSwishForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        floatUnary(node, v, ctx, math::hardSwish);
    }

    void hardSwishBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps x
    {
        unaryBackward(g, ctx, v.in[0], math::hardSwishGrad);
    }

    void leakyReluForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto alpha = static_cast<float>(node.floatAttr("alpha", 0.01));
        floatUnary(node, v, ctx, [alpha](float x) { return math::leakyRelu(x, alpha); });
    }

    void leakyReluBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps x
    {
        const auto alpha = static_cast<float>(node.floatAttr("alpha", 0.01));
        unaryBackward(g, ctx, v.in[0], [alpha](float x) { return math::leakyReluGrad(x, alpha); });
    }

    void expForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        floatUnary(node, v, ctx, [](float x) { return std::exp(x); });
    }

    void expBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps the output
    {
        unaryBackward(g, ctx, v.out[0], [](float y) { return y; });
    }

    void logForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        floatUnary(node, v, ctx, [](float x) { return std::log(x); });
    }

    void logBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps x
    {
        unaryBackward(g, ctx, v.in[0], [](float x) { return 1.0F / x; });
    }

    // ---- Clip (f32 or i64): an absent bound is open; min > max gives max everywhere, as ONNX ----

    struct ClipBounds
    {
        double lo, hi;
    };

    ClipBounds clipBounds(const Node& node)
    {
        constexpr double kInf = std::numeric_limits<double>::infinity();
        return { node.floatAttr("min", -kInf), node.floatAttr("max", kInf) };
    }

    // The integer bound of x >= lo (ceil) or x <= hi (floor), saturated to the i64 range.
    std::int64_t integerBound(double bound, bool lower)
    {
        constexpr double kLimit = 9.2e18;
        if (bound <= -kLimit)
            return std::numeric_limits<std::int64_t>::min();
        if (bound >= kLimit)
            return std::numeric_limits<std::int64_t>::max();
        return static_cast<std::int64_t>(lower ? std::ceil(bound) : std::floor(bound));
    }

    void clipForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto b = clipBounds(node);
        const auto& x = v.in[0];
        if (x.dtype() == DType::I64) {
            const auto lo = integerBound(b.lo, true);
            const auto hi = integerBound(b.hi, false);
            v.out = { mapArray<std::int64_t, std::int64_t>(
                x, ctx, [lo, hi](std::int64_t a) { return std::min(std::max(a, lo), hi); }) };
            return;
        }
        const auto lo = static_cast<float>(b.lo);
        const auto hi = static_cast<float>(b.hi);
        v.out = { mapArray<float, float>(x, ctx, [lo, hi](float a) { return math::clip(a, lo, hi); }) };
    }

    void clipBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps x
    {
        const auto b = clipBounds(node);
        const auto lo = static_cast<float>(b.lo);
        const auto hi = static_cast<float>(b.hi);
        unaryBackward(g, ctx, v.in[0], [lo, hi](float x) { return math::clipGrad(x, lo, hi); });
    }

    // ---- Neg and Abs (f32 or i64) ----

    void negForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { byDType(v.in[0], [&](auto tag) {
            using T = decltype(tag);
            return mapArray<T, T>(v.in[0], ctx, [](T a) { return -a; });
        }) };
    }

    void negBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps nothing
    {
        if (g.needGrad[0])
            g.gradIn[0] = mapArray<float, float>(
                gradOrZeros(g.gradOut[0], v.in[0].shape(), ctx.allocator), ctx, [](float dy) { return -dy; });
    }

    void absForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { byDType(v.in[0], [&](auto tag) {
            using T = decltype(tag);
            return mapArray<T, T>(v.in[0], ctx, [](T a) { return a < T {} ? -a : a; });
        }) };
    }

    void absBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps x
    {
        unaryBackward(g, ctx, v.in[0], [](float x) { return x > 0.0F ? 1.0F : x < 0.0F ? -1.0F : 0.0F; });
    }

    // ---- Max and Min (f32 or i64, broadcasting; NaN propagates as in torch.maximum) ----

    template <bool kMax> void extremumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        requireSameDType(node, a, b);
        v.out = { byDType(a, [&](auto tag) {
            using T = decltype(tag);
            return broadcastMap<T, T, T>(node, a, b, ctx, [](T x, T y) { return math::takesA(x, y, kMax) ? x : y; });
        }) };
    }

    // dy to input `first` where toA(j, k) holds and to input `first + 1` elsewhere, each summed back to
    // its shape; j and k are the offsets into operands of shapes sj and sk broadcast to `shape`.
    template <typename ToA>
    void routeGradient(const NodeValues& v, BackwardArgs& g, KernelContext& ctx, std::size_t first, const Shape& shape,
        const Shape& sj, const Shape& sk, ToA toA)
    {
        const auto dy = gradOrZeros(g.gradOut[0], shape, ctx.allocator);
        const float* gy = dy.f32();
        for (std::size_t side = 0; side < 2; ++side) {
            if (!g.needGrad[first + side])
                continue;
            auto full = NdArray::empty(ctx.allocator, shape);
            float* o = full.f32();
            forEachBroadcast(shape, sj, sk, [&](std::int64_t i, std::int64_t j, std::int64_t k) {
                o[i] = toA(j, k) == (side == 0) ? gy[i] : 0.0F;
            });
            g.gradIn[first + side] = reduceToShape(full, v.in[first + side].shape(), ctx.allocator);
        }
    }

    template <bool kMax>
    void extremumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps both operands (f32: integer operands need no gradient).
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        const auto shape = broadcastShape(node, a.shape(), b.shape());
        const float* x = a.f32();
        const float* y = b.f32();
        routeGradient(v, g, ctx, 0, shape, a.shape(), b.shape(),
            [&](std::int64_t ia, std::int64_t ib) { return math::takesA(x[ia], y[ib], kMax); });
    }

    // ---- Where (condition i64 or f32, nonzero true; a and b both f32 or both i64) ----

    void whereForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& cond = v.in[0];
        const auto& a = v.in[1];
        const auto& b = v.in[2];
        requireSameDType(node, a, b);
        const auto shape = broadcastShape(node, broadcastShape(node, cond.shape(), a.shape()), b.shape());
        v.out = { byDType(a, [&](auto tag) {
            using T = decltype(tag);
            auto out = NdArray::empty(ctx.allocator, shape, dtypeOf<T>());
            T* o = data<T>(out);
            const T* x = data<T>(a);
            const T* y = data<T>(b);
            // Two passes, as forEachBroadcast walks two operands: b everywhere, then a where cond.
            forEachBroadcast(
                shape, b.shape(), b.shape(), [&](std::int64_t i, std::int64_t ib, std::int64_t) { o[i] = y[ib]; });
            byDType(cond, [&](auto condTag) {
                const auto* c = data<decltype(condTag)>(cond);
                forEachBroadcast(shape, cond.shape(), a.shape(), [&](std::int64_t i, std::int64_t ic, std::int64_t ia) {
                    if (truthy(c[ic]))
                        o[i] = x[ia];
                });
            });
            return out;
        }) };
    }

    void whereBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps the condition; a and b only size their gradients.
        const auto& cond = v.in[0];
        const auto shape = broadcastShape(node, broadcastShape(node, cond.shape(), v.in[1].shape()), v.in[2].shape());
        byDType(cond, [&](auto condTag) {
            const auto* c = data<decltype(condTag)>(cond);
            routeGradient(v, g, ctx, 1, shape, cond.shape(), cond.shape(),
                [c](std::int64_t ic, std::int64_t) { return truthy(c[ic]); });
        });
    }

    // ---- Comparisons and logic: f32 or i64 operands (mixed compare as double), i64 0/1 out ----

    // i64 0/1 of pred(a[ia], b[ib]) over the broadcast shape, for f32 and i64 operands in any mix.
    template <typename Pred>
    NdArray broadcastPredicate(const Node& node, const NdArray& a, const NdArray& b, KernelContext& ctx, Pred pred)
    {
        return byDType(a, [&](auto tagA) {
            return byDType(b, [&](auto tagB) {
                using A = decltype(tagA);
                using B = decltype(tagB);
                return broadcastMap<std::int64_t, A, B>(
                    node, a, b, ctx, [&pred](A x, B y) -> std::int64_t { return pred(x, y) ? 1 : 0; });
            });
        });
    }

    // The comparisons and logic (order_math.h's predicates, which the CUDA kernels run).
    template <math::Predicate kPred> void predicateForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { broadcastPredicate(
            node, v.in[0], v.in[1], ctx, [](auto x, auto y) { return math::predicate(kPred, x, y); }) };
    }

    void notForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { byDType(v.in[0], [&](auto tag) {
            using T = decltype(tag);
            return mapArray<std::int64_t, T>(
                v.in[0], ctx, [](T a) -> std::int64_t { return math::truthyValue(a) ? 0 : 1; });
        }) };
    }

    void isNanForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { byDType(v.in[0], [&](auto tag) {
            using T = decltype(tag);
            return mapArray<std::int64_t, T>(
                v.in[0], ctx, [](T a) -> std::int64_t { return math::isNanValue(a) ? 1 : 0; });
        }) };
    }

    // ---- Cast: to a float type gives f32 (f16/bf16/f64 values stay f32 here), to an integer type i64
    // (truncation toward zero, wrapped to the target's width), to bool i64 0/1 ----

    template <typename T> std::int64_t toInteger(T a, math::IntegerType to)
    {
        if constexpr (std::is_same_v<T, float>)
            return math::floatToInteger(a, to);
        else
            return math::narrowInteger(a, to);
    }

    void castForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto to = castTarget(node).integer;
        const auto& x = v.in[0];
        v.out = { byDType(x, [&](auto tag) {
            using T = decltype(tag);
            if (!to)
                return mapArray<float, T>(x, ctx, [](T a) { return static_cast<float>(a); });
            return mapArray<std::int64_t, T>(x, ctx, [to = *to](T a) { return toInteger(a, to); });
        }) };
    }

    void castBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) // keeps nothing
    {
        // Float to float passes the gradient; a cast to or from integers has none.
        if (g.needGrad[0] && !castTarget(node).integer && v.in[0].dtype() == DType::F32)
            g.gradIn[0] = gradOrZeros(g.gradOut[0], v.in[0].shape(), ctx.allocator);
    }

} // namespace

void registerElementwiseKernels(KernelTable& table)
{
    table.add(OpType::Sigmoid, { sigmoidForward, sigmoidBackward });
    table.add(OpType::HardSigmoid, { hardSigmoidForward, hardSigmoidBackward });
    table.add(OpType::HardSwish, { hardSwishForward, hardSwishBackward });
    table.add(OpType::LeakyRelu, { leakyReluForward, leakyReluBackward });
    table.add(OpType::Clip, { clipForward, clipBackward });
    table.add(OpType::Exp, { expForward, expBackward });
    table.add(OpType::Log, { logForward, logBackward });
    table.add(OpType::Neg, { negForward, negBackward });
    table.add(OpType::Abs, { absForward, absBackward });
    table.add(OpType::Max, { extremumForward<true>, extremumBackward<true> });
    table.add(OpType::Min, { extremumForward<false>, extremumBackward<false> });
    table.add(OpType::Where, { whereForward, whereBackward });
    using math::Predicate;
    table.add(OpType::Equal, { predicateForward<Predicate::Equal>, noGradient });
    table.add(OpType::Less, { predicateForward<Predicate::Less>, noGradient });
    table.add(OpType::LessOrEqual, { predicateForward<Predicate::LessOrEqual>, noGradient });
    table.add(OpType::Greater, { predicateForward<Predicate::Greater>, noGradient });
    table.add(OpType::GreaterOrEqual, { predicateForward<Predicate::GreaterOrEqual>, noGradient });
    table.add(OpType::Not, { notForward, noGradient });
    table.add(OpType::IsNaN, { isNanForward, noGradient });
    table.add(OpType::And, { predicateForward<Predicate::And>, noGradient });
    table.add(OpType::Or, { predicateForward<Predicate::Or>, noGradient });
    table.add(OpType::Cast, { castForward, castBackward });
}

} // namespace ps::engine::detail
