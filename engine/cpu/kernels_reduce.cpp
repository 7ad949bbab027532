// ReduceSum and ReduceMax, CumSum and Trilu on f32 or i64 arrays, with ONNX / PyTorch semantics
// (split from kernels_elementwise.cpp; the element-type helpers are cpu/typed_arrays.h's).
#include "cpu/kernel_impl.h"
#include "cpu/typed_arrays.h"
#include "op_rules.h"
#include "order_math.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace ps::engine::detail {
namespace {

    using namespace typed;

    // ---- ReduceSum and ReduceMax: op_rules.h's reduceShapes (axes, keepdims, noop_with_empty_axes) ----

    void reduceSumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto r = reduceShapes(node, x.shape());
        v.out = { byDType(x, [&](auto tag) {
            using T = decltype(tag);
            auto out = NdArray::zeros(ctx.allocator, r.kept, dtypeOf<T>());
            T* o = data<T>(out);
            const T* in = data<T>(x);
            forEachBroadcast(
                x.shape(), r.kept, r.kept, [&](std::int64_t i, std::int64_t ik, std::int64_t) { o[ik] += in[i]; });
            return out.view(r.out);
        }) };
    }

    void reduceSumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps nothing: dx broadcasts dy back over the reduced axes.
        if (!g.needGrad[0])
            return;
        const auto& shape = v.in[0].shape();
        const auto r = reduceShapes(node, shape);
        const auto dy = gradOrZeros(g.gradOut[0], r.out, ctx.allocator).view(r.kept);
        auto dx = NdArray::empty(ctx.allocator, shape);
        const float* gy = dy.f32();
        float* o = dx.f32();
        forEachBroadcast(shape, r.kept, r.kept, [&](std::int64_t i, std::int64_t ik, std::int64_t) { o[i] = gy[ik]; });
        g.gradIn[0] = dx;
    }

    void reduceMaxForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto r = reduceShapes(node, x.shape());
        if (x.numel() == 0 && numElements(r.kept) > 0)
            throw Error(label(node) + ": cannot take the maximum over an empty axis of " + formatShape(x.shape()));
        // Saves the flat input index of each maximum, the first one in row-major order (NaN wins).
        auto arg = NdArray::empty(ctx.allocator, r.kept, DType::I64);
        std::fill(arg.i64(), arg.i64() + arg.numel(), -1);
        std::int64_t* at = arg.i64();
        v.out = { byDType(x, [&](auto tag) {
            using T = decltype(tag);
            auto out = NdArray::empty(ctx.allocator, r.kept, dtypeOf<T>());
            T* o = data<T>(out);
            const T* in = data<T>(x);
            forEachBroadcast(x.shape(), r.kept, r.kept, [&](std::int64_t i, std::int64_t ik, std::int64_t) {
                if (at[ik] < 0 || math::replacesMaximum(in[i], o[ik])) {
                    o[ik] = in[i];
                    at[ik] = i;
                }
            });
            return out.view(r.out);
        }) };
        v.saved = { arg };
    }

    void reduceMaxBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps the saved indices: dy goes to the first maximum of each reduced group.
        if (!g.needGrad[0])
            return;
        const auto& arg = v.saved[0];
        const auto dy = gradOrZeros(g.gradOut[0], arg.shape(), ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        const std::int64_t* at = arg.i64();
        for (std::int64_t j = 0; j < arg.numel(); ++j)
            dx.f32()[at[j]] += dy.f32()[j];
        g.gradIn[0] = dx;
    }

    // ---- Shared by CumSum and Trilu: the output has the input's shape and element type ----

    // An array of x's shape and dtype, filled by fn(x's data, the output's data) for either element type.
    template <typename Fn> NdArray sameShapeMap(const NdArray& x, KernelContext& ctx, Fn fn)
    {
        return byDType(x, [&](auto tag) {
            using T = decltype(tag);
            auto out = NdArray::empty(ctx.allocator, x.shape(), dtypeOf<T>());
            fn(data<T>(x), data<T>(out));
            return out;
        });
    }

    // The backward of a linear map from the one input to a same-shaped output: dx = fn(dy), with
    // fn(dy, dx, input shape) writing every element of dx. Keeps nothing but the input's shape.
    template <typename Fn> void sameShapeLinearBackward(const NodeValues& v, BackwardArgs& g, KernelContext& ctx, Fn fn)
    {
        if (!g.needGrad[0])
            return;
        const auto& shape = v.in[0].shape();
        const auto dy = gradOrZeros(g.gradOut[0], shape, ctx.allocator);
        auto dx = NdArray::empty(ctx.allocator, shape);
        fn(dy.f32(), dx.f32(), shape);
        g.gradIn[0] = dx;
    }

    // ---- CumSum along attr axis (default 0); exclusive (0) and reverse (0) ----

    template <typename T> void cumsum(const T* x, T* y, const AxisSplit& d, bool exclusive, bool reverse)
    {
        for (std::int64_t o = 0; o < d.outer; ++o) {
            for (std::int64_t in = 0; in < d.inner; ++in)
                math::cumsumLine(x + o * d.length * d.inner + in, y + o * d.length * d.inner + in, d.length, d.inner,
                    exclusive, reverse);
        }
    }

    void cumSumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto d = axisSplitOf(node, x.shape(), 0);
        const bool exclusive = node.intAttr("exclusive", 0) != 0;
        const bool reverse = node.intAttr("reverse", 0) != 0;
        v.out = { sameShapeMap(x, ctx, [&](const auto* in, auto* out) { cumsum(in, out, d, exclusive, reverse); }) };
    }

    void cumSumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps nothing: dx is the running sum of dy in the other direction, equally exclusive.
        sameShapeLinearBackward(v, g, ctx, [&](const float* dy, float* dx, const Shape& shape) {
            cumsum(dy, dx, axisSplitOf(node, shape, 0), node.intAttr("exclusive", 0) != 0,
                node.intAttr("reverse", 0) == 0);
        });
    }

    // ---- Trilu over the last two dims: upper (ONNX default 1) keeps j - i >= k, lower j - i <= k ----

    template <typename T> void trilu(const Node& node, const T* x, T* y, const Shape& shape)
    {
        if (shape.size() < 2)
            throw Error(label(node) + ": needs a matrix or a batch of them, got " + formatShape(shape));
        const bool upper = node.intAttr("upper", 1) != 0;
        const auto k = node.intAttr("k", 0);
        const auto rows = shape[shape.size() - 2];
        const auto cols = shape.back();
        const auto matrices = rows * cols == 0 ? 0 : numElements(shape) / (rows * cols);
        for (std::int64_t m = 0; m < matrices; ++m) {
            for (std::int64_t i = 0; i < rows; ++i) {
                for (std::int64_t j = 0; j < cols; ++j) {
                    const auto at = (m * rows + i) * cols + j;
                    y[at] = math::triluKeeps(i, j, upper, k) ? x[at] : T {};
                }
            }
        }
    }

    void triluForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        v.out = { sameShapeMap(x, ctx, [&](const auto* in, auto* out) { trilu(node, in, out, x.shape()); }) };
    }

    void triluBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        // Keeps nothing: dx is dy with the same triangle kept.
        sameShapeLinearBackward(
            v, g, ctx, [&](const float* dy, float* dx, const Shape& shape) { trilu(node, dy, dx, shape); });
    }

} // namespace

void registerReduceKernels(KernelTable& table)
{
    table.add(OpType::ReduceSum, { reduceSumForward, reduceSumBackward });
    table.add(OpType::ReduceMax, { reduceMaxForward, reduceMaxBackward });
    table.add(OpType::CumSum, { cumSumForward, cumSumBackward });
    table.add(OpType::Trilu, { triluForward, triluBackward });
}

} // namespace ps::engine::detail
