// CUDA kernels of the pointwise ops of imported models (CNNs and MLPs): Sigmoid, HardSigmoid,
// HardSwish, LeakyRelu, Clip, Exp, Log, Neg, Abs, Sqrt, Erf and Pow, forward and backward, on f32
// arrays. The per-element math is engine/kernel_math.h's, which the CPU kernels call; each backward
// reads the value op_cost says the node keeps (its input, its output, or nothing for Neg).
#include "cuda/cuda_common.cuh"
#include "kernel_math.h"

#include <limits>

namespace ps::engine::cuda {
namespace {

    enum class Op {
        Sigmoid,
        HardSigmoid,
        HardSwish,
        LeakyRelu,
        Clip,
        Exp,
        Log,
        Neg,
        Abs,
        Sqrt,
        Erf,
        Pow,
        Reciprocal,
        Sin,
        Cos,
    };

    struct Params
    {
        float a = 0.0F;
        float b = 0.0F;
    };

    __device__ float forwardOf(Op op, float x, const Params& p)
    {
        switch (op) {
        case Op::Sigmoid:
            return math::sigmoid(x);
        case Op::HardSigmoid:
            return math::hardSigmoid(x, p.a, p.b);
        case Op::HardSwish:
            return math::hardSwish(x);
        case Op::LeakyRelu:
            return math::leakyRelu(x, p.a);
        case Op::Clip:
            return math::clip(x, p.a, p.b);
        case Op::Exp:
            return expf(x);
        case Op::Log:
            return logf(x);
        case Op::Neg:
            return -x;
        case Op::Abs:
            return fabsf(x);
        case Op::Sqrt:
            return sqrtf(x);
        case Op::Erf:
            return erff(x);
        case Op::Pow:
            return math::power(x, p.a);
        case Op::Reciprocal:
            return 1.0F / x;
        case Op::Sin:
            return sinf(x);
        case Op::Cos:
            return cosf(x);
        }
        return x;
    }

    // f'(k) for the value k the backward keeps (the output for Sigmoid, Exp and Sqrt).
    __device__ float derivativeOf(Op op, float k, const Params& p)
    {
        switch (op) {
        case Op::Sigmoid:
            return k * (1.0F - k);
        case Op::HardSigmoid:
            return math::hardSigmoidGrad(k, p.a, p.b);
        case Op::HardSwish:
            return math::hardSwishGrad(k);
        case Op::LeakyRelu:
            return math::leakyReluGrad(k, p.a);
        case Op::Clip:
            return math::clipGrad(k, p.a, p.b);
        case Op::Exp:
            return k;
        case Op::Log:
            return 1.0F / k;
        case Op::Neg:
            return -1.0F;
        case Op::Abs:
            return k > 0.0F ? 1.0F : (k < 0.0F ? -1.0F : 0.0F);
        case Op::Sqrt:
            return 0.5F / k;
        case Op::Erf:
            return math::erfGrad(k);
        case Op::Pow:
            return math::powerGrad(k, p.a);
        case Op::Reciprocal:
            return -k * k;
        case Op::Sin:
            return math::sinGrad(k);
        case Op::Cos:
            return math::cosGrad(k);
        }
        return 1.0F;
    }

    // out = f(x), or with dy: out = dy * f'(k), x holding k.
    __global__ void pointwiseKernel(Op op, const float* x, const float* dy, float* out, Params p, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            out[i] = dy == nullptr ? forwardOf(op, x[i], p) : dy[i] * derivativeOf(op, x != nullptr ? x[i] : 0.0F, p);
    }

    NdArray launch(Op op, const NdArray* x, const NdArray* dy, const Params& p, KernelContext& ctx, const Node& node)
    {
        useDevice(ctx.allocator);
        const auto& like = dy != nullptr ? *dy : *x;
        auto out = NdArray::empty(ctx.allocator, like.shape());
        const auto n = like.numel();
        if (n > 0)
            pointwiseKernel<<<blocksFor(n), kThreads>>>(
                op, x != nullptr ? f32(*x) : nullptr, dy != nullptr ? f32(*dy) : nullptr, f32(out), p, n);
        checkLaunch("node '" + node.name + "'");
        return out;
    }

    // What the backward reads: the node's output, its input, or nothing.
    enum class Keeps { Input, Output, Nothing };

    struct Pointwise
    {
        Op op;
        Keeps keeps;
        Params (*params)(const Node&);
    };

    Params none(const Node&)
    {
        return {};
    }
    Params hardSigmoidParams(const Node& node)
    {
        return { static_cast<float>(node.floatAttr("alpha", 0.2)), static_cast<float>(node.floatAttr("beta", 0.5)) };
    }
    Params leakyReluParams(const Node& node)
    {
        return { static_cast<float>(node.floatAttr("alpha", 0.01)), 0.0F };
    }
    Params clipParams(const Node& node)
    {
        constexpr double kInf = std::numeric_limits<double>::infinity();
        return { static_cast<float>(node.floatAttr("min", -kInf)), static_cast<float>(node.floatAttr("max", kInf)) };
    }
    Params powParams(const Node& node)
    {
        return { static_cast<float>(node.floatAttr("exponent", 1.0)), 0.0F };
    }

    template <Op kOp, Keeps kKeeps, Params (*kParams)(const Node&)> OpKernel pointwise()
    {
        const auto forward = [](const Node& node, NodeValues& v, KernelContext& ctx) {
            requireF32(node, v.in[0]);
            v.out = { launch(kOp, &v.in[0], nullptr, kParams(node), ctx, node) };
        };
        const auto backward = [](const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx) {
            if (!g.needGrad[0])
                return;
            const NdArray* kept = kKeeps == Keeps::Input ? &v.in[0] : kKeeps == Keeps::Output ? &v.out[0] : nullptr;
            g.gradIn[0] = launch(kOp, kept, &g.gradOut[0], kParams(node), ctx, node);
        };
        return { forward, backward };
    }

} // namespace

void registerCudaPointwiseKernels(KernelTable& table)
{
    table.add(OpType::Sigmoid, pointwise<Op::Sigmoid, Keeps::Output, none>());
    table.add(OpType::HardSigmoid, pointwise<Op::HardSigmoid, Keeps::Input, hardSigmoidParams>());
    table.add(OpType::HardSwish, pointwise<Op::HardSwish, Keeps::Input, none>());
    table.add(OpType::LeakyRelu, pointwise<Op::LeakyRelu, Keeps::Input, leakyReluParams>());
    table.add(OpType::Clip, pointwise<Op::Clip, Keeps::Input, clipParams>());
    table.add(OpType::Exp, pointwise<Op::Exp, Keeps::Output, none>());
    table.add(OpType::Log, pointwise<Op::Log, Keeps::Input, none>());
    table.add(OpType::Neg, pointwise<Op::Neg, Keeps::Nothing, none>());
    table.add(OpType::Abs, pointwise<Op::Abs, Keeps::Input, none>());
    table.add(OpType::Sqrt, pointwise<Op::Sqrt, Keeps::Output, none>());
    table.add(OpType::Reciprocal, pointwise<Op::Reciprocal, Keeps::Output, none>());
    table.add(OpType::Erf, pointwise<Op::Erf, Keeps::Input, none>());
    table.add(OpType::Sin, pointwise<Op::Sin, Keeps::Input, none>());
    table.add(OpType::Cos, pointwise<Op::Cos, Keeps::Input, none>());
    table.add(OpType::Pow, pointwise<Op::Pow, Keeps::Input, powParams>());
}

} // namespace ps::engine::cuda
