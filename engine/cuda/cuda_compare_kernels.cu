// CUDA kernels of Max and Min (f32 or i64, broadcasting, NaN propagating; the gradient goes to the
// winner, a on ties), the comparisons Equal, Less, LessOrEqual, Greater, GreaterOrEqual and the
// logic And and Or (f32 and i64 operands in any mix, i64 0/1 out), Not and IsNaN, with the CPU's
// semantics: the per-element math is engine/order_math.h's, which the CPU kernels call.
#include "cuda/cuda_common.cuh"
#include "graph/shape_inference.h"
#include "order_math.h"

namespace ps::engine::cuda {
namespace {

    // The broadcast walk of two operands: the output's dims and each operand's strides over it.
    struct PairWalk
    {
        Shape shape;
        Dims out, a, b;
        long long n = 0;
    };

    PairWalk pairWalk(const Node& node, const NdArray& a, const NdArray& b)
    {
        for (const auto* x : { &a, &b }) {
            if (x->dtype() != DType::F32 && x->dtype() != DType::I64)
                throw Error(label(node) + ": the CUDA backend runs it on f32 or i64 values, an input is "
                    + std::string(toString(x->dtype())));
        }
        PairWalk w;
        try {
            w.shape = broadcastShapes(a.shape(), b.shape());
        } catch (const Error& e) {
            throw Error(label(node) + ": " + e.what());
        }
        w.out = dimsOf(w.shape);
        w.a = stridesOver(a.shape(), w.shape);
        w.b = stridesOver(b.shape(), w.shape);
        collapseDims(w.out, { &w.a, &w.b });
        w.n = numElements(w.shape);
        return w;
    }

    // ---- Comparisons and logic ----

    template <typename A, typename B>
    __global__ void predicateKernel(
        math::Predicate p, const A* a, const B* b, std::int64_t* out, Dims shape, Dims sa, Dims sb, long long n)
    {
        PS_FOR_EACH(i, n)
        out[i] = math::predicate(p, a[offsetOf(i, shape, sa)], b[offsetOf(i, shape, sb)]) ? 1 : 0;
    }

    template <typename A>
    void launchPredicate(math::Predicate p, const A* a, const NdArray& b, NdArray& out, const PairWalk& w)
    {
        if (b.dtype() == DType::F32)
            predicateKernel<<<blocksFor(w.n), kThreads>>>(p, a, f32(b), i64(out), w.out, w.a, w.b, w.n);
        else
            predicateKernel<<<blocksFor(w.n), kThreads>>>(p, a, i64(b), i64(out), w.out, w.a, w.b, w.n);
    }

    template <math::Predicate kPred> void predicateForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        const auto w = pairWalk(node, a, b);
        auto out = NdArray::empty(ctx.allocator, w.shape, DType::I64);
        if (w.n > 0 && a.dtype() == DType::F32)
            launchPredicate(kPred, f32(a), b, out, w);
        else if (w.n > 0)
            launchPredicate(kPred, i64(a), b, out, w);
        checkLaunch(label(node));
        v.out = { out };
    }

    // Not (true -> 0) and IsNaN, i64 0/1 out.
    template <typename T> __global__ void testKernel(bool isNan, const T* x, std::int64_t* out, long long n)
    {
        PS_FOR_EACH(i, n)
        out[i] = (isNan ? math::isNanValue(x[i]) : !math::truthyValue(x[i])) ? 1 : 0;
    }

    template <bool kIsNan> void testForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        if (x.dtype() != DType::F32 && x.dtype() != DType::I64)
            throw Error(label(node) + ": the CUDA backend runs it on f32 or i64 values");
        auto out = NdArray::empty(ctx.allocator, x.shape(), DType::I64);
        const auto n = x.numel();
        if (n > 0 && x.dtype() == DType::F32)
            testKernel<<<blocksFor(n), kThreads>>>(kIsNan, f32(x), i64(out), n);
        else if (n > 0)
            testKernel<<<blocksFor(n), kThreads>>>(kIsNan, i64(x), i64(out), n);
        checkLaunch(label(node));
        v.out = { out };
    }

    void noGradient(const Node&, const NodeValues&, BackwardArgs&, KernelContext&) { }

    // ---- Max and Min ----

    template <typename T>
    __global__ void extremumKernel(
        bool isMax, const T* a, const T* b, T* out, Dims shape, Dims sa, Dims sb, long long n)
    {
        PS_FOR_EACH(i, n)
        {
            const T x = a[offsetOf(i, shape, sa)];
            const T y = b[offsetOf(i, shape, sb)];
            out[i] = math::takesA(x, y, isMax) ? x : y;
        }
    }

    // dy where input `side` (0: a) is the result, 0 elsewhere, over the broadcast shape.
    __global__ void winnerKernel(bool isMax, const float* a, const float* b, const float* dy, float* out, Dims shape,
        Dims sa, Dims sb, bool side, long long n)
    {
        PS_FOR_EACH(i, n)
        out[i] = math::takesA(a[offsetOf(i, shape, sa)], b[offsetOf(i, shape, sb)], isMax) == !side ? dy[i] : 0.0F;
    }

    template <bool kMax> void extremumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        if (a.dtype() != b.dtype())
            throw Error(label(node) + ": both inputs must have one element type");
        const auto w = pairWalk(node, a, b);
        auto out = NdArray::empty(ctx.allocator, w.shape, a.dtype());
        if (w.n > 0 && a.dtype() == DType::F32)
            extremumKernel<<<blocksFor(w.n), kThreads>>>(kMax, f32(a), f32(b), f32(out), w.out, w.a, w.b, w.n);
        else if (w.n > 0)
            extremumKernel<<<blocksFor(w.n), kThreads>>>(kMax, i64(a), i64(b), i64(out), w.out, w.a, w.b, w.n);
        checkLaunch(label(node));
        v.out = { out };
    }

    template <bool kMax>
    void extremumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator); // keeps both operands (f32: integer operands need no gradient)
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        const auto w = pairWalk(node, a, b);
        for (std::size_t side = 0; side < 2; ++side) {
            if (!g.needGrad[side])
                continue;
            requireF32(node, v.in[side]);
            auto routed = NdArray::zeros(ctx.allocator, w.shape);
            if (w.n > 0 && g.gradOut[0].defined())
                winnerKernel<<<blocksFor(w.n), kThreads>>>(
                    kMax, f32(a), f32(b), f32(g.gradOut[0]), f32(routed), w.out, w.a, w.b, side == 1, w.n);
            checkLaunch(label(node));
            g.gradIn[side] = reduceTo(routed, v.in[side].shape(), ctx.allocator);
        }
    }

} // namespace

void registerCudaCompareKernels(KernelTable& table)
{
    using math::Predicate;
    table.add(OpType::Max, { extremumForward<true>, extremumBackward<true> });
    table.add(OpType::Min, { extremumForward<false>, extremumBackward<false> });
    table.add(OpType::Equal, { predicateForward<Predicate::Equal>, noGradient });
    table.add(OpType::Less, { predicateForward<Predicate::Less>, noGradient });
    table.add(OpType::LessOrEqual, { predicateForward<Predicate::LessOrEqual>, noGradient });
    table.add(OpType::Greater, { predicateForward<Predicate::Greater>, noGradient });
    table.add(OpType::GreaterOrEqual, { predicateForward<Predicate::GreaterOrEqual>, noGradient });
    table.add(OpType::And, { predicateForward<Predicate::And>, noGradient });
    table.add(OpType::Or, { predicateForward<Predicate::Or>, noGradient });
    table.add(OpType::Not, { testForward<false>, noGradient });
    table.add(OpType::IsNaN, { testForward<true>, noGradient });
}

} // namespace ps::engine::cuda
