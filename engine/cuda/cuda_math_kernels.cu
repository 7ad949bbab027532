// CUDA kernels of the broadcasting Add/BiasAdd/Sub/Mul/Div, Scale and the activations
// (Relu, Tanh, GELU over kernel_math.h), Expand and ReduceMean (the broadcast-gradient reduction is
// cuda_reduce_kernels.cu's).
#include "cuda/cuda_common.cuh"
#include "graph/shape_inference.h"
#include "kernel_math.h"
#include "op_rules.h"

#include <algorithm>
#include <vector>

namespace ps::engine::cuda {
namespace {

    // out[i] = scale * src[its broadcast source]: Expand, and ReduceMean's backward.
    __global__ void broadcastKernel(const float* src, float* out, Dims shape, Dims strides, float scale, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            out[i] = scale * src[offsetOf(i, shape, strides)];
    }

    // ---- Broadcasting binary ops ----

    enum class Binary { Add, Sub, Mul, Div };

    __device__ inline float apply(Binary op, float x, float y)
    {
        return op == Binary::Add ? x + y : op == Binary::Sub ? x - y : op == Binary::Mul ? x * y : x / y;
    }

    __global__ void binaryKernel(
        Binary op, const float* a, const float* b, float* out, Dims shape, Dims sa, Dims sb, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            out[i] = apply(op, a[offsetOf(i, shape, sa)], b[offsetOf(i, shape, sb)]);
        }
    }

    // Both operands walked like the output (same shapes, contiguous): no index arithmetic.
    __global__ void binarySameKernel(Binary op, const float* a, const float* b, float* out, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            out[i] = apply(op, a[i], b[i]);
    }

    // (rows, cols) contiguous against a row vector of cols (a bias, a broadcast scale): blocks over
    // column tiles (x) and rows (y, striding), each thread's row-vector element read once.
    __global__ void binaryRowKernel(
        Binary op, const float* full, const float* row, float* out, std::int64_t rows, int cols, bool rowFirst)
    {
        const int col = static_cast<int>(blockIdx.x) * static_cast<int>(blockDim.x) + static_cast<int>(threadIdx.x);
        if (col >= cols)
            return;
        const float r = row[col];
        for (auto i = static_cast<std::int64_t>(blockIdx.y); i < rows; i += gridDim.y) {
            const auto at = i * cols + col;
            out[at] = rowFirst ? apply(op, r, full[at]) : apply(op, full[at], r);
        }
    }

    // The fast walks above where the collapsed strides allow one; false: the general kernel.
    bool binaryFast(Binary op, const float* a, const float* b, float* out, const Dims& walk, const Dims& sa,
        const Dims& sb, std::int64_t n)
    {
        if (walk.rank == 1 && sa.stride[0] == 1 && sb.stride[0] == 1) {
            binarySameKernel<<<blocksFor(n), kThreads>>>(op, a, b, out, n);
            return true;
        }
        if (walk.rank != 2 || walk.size[1] > (1LL << 30))
            return false;
        const auto cols = walk.size[1];
        const bool aFull = sa.stride[0] == cols && sa.stride[1] == 1;
        const bool bFull = sb.stride[0] == cols && sb.stride[1] == 1;
        const bool aRow = sa.stride[0] == 0 && sa.stride[1] == 1;
        const bool bRow = sb.stride[0] == 0 && sb.stride[1] == 1;
        if (!((aFull && bRow) || (aRow && bFull)))
            return false;
        const auto rows = walk.size[0];
        const dim3 grid(static_cast<unsigned>((cols + kThreads - 1) / kThreads),
            static_cast<unsigned>(std::min<std::int64_t>(rows, 65535)));
        binaryRowKernel<<<grid, kThreads>>>(op, aFull ? a : b, aFull ? b : a, out, rows, static_cast<int>(cols), aRow);
        return true;
    }

    NdArray binary(Binary op, const NdArray& a, const NdArray& b, const Node& node, KernelContext& ctx)
    {
        if (a.dtype() != DType::F32 || b.dtype() != DType::F32)
            throw Error("node '" + node.name + "' (" + std::string(toString(node.op))
                + "): the CUDA backend runs it on f32 values, its inputs are " + std::string(toString(a.dtype()))
                + " and " + std::string(toString(b.dtype())));
        const auto shape = broadcastShapeOf(a.shape(), b.shape(), node);
        auto out = NdArray::empty(ctx.allocator, shape);
        const auto n = out.numel();
        auto walk = dimsOf(shape);
        auto sa = stridesOver(a.shape(), shape);
        auto sb = stridesOver(b.shape(), shape);
        collapseDims(walk, { &sa, &sb });
        if (n > 0 && !binaryFast(op, f32(a), f32(b), f32(out), walk, sa, sb, n))
            binaryKernel<<<blocksFor(n), kThreads>>>(op, f32(a), f32(b), f32(out), walk, sa, sb, n);
        checkLaunch("node '" + node.name + "'");
        return out;
    }

    void addForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        v.out = { binary(Binary::Add, v.in[0], v.in[1], node, ctx) };
    }

    void addBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        for (std::size_t i = 0; i < 2; ++i) {
            if (g.needGrad[i])
                g.gradIn[i] = reduceTo(g.gradOut[0], v.in[i].shape(), ctx.allocator);
        }
    }

    void mulForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        v.out = { binary(Binary::Mul, v.in[0], v.in[1], node, ctx) };
    }

    void mulBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        for (std::size_t i = 0; i < 2; ++i) {
            if (g.needGrad[i])
                g.gradIn[i] =
                    reduceTo(binary(Binary::Mul, g.gradOut[0], v.in[1 - i], node, ctx), v.in[i].shape(), ctx.allocator);
        }
    }

    void subForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        v.out = { binary(Binary::Sub, v.in[0], v.in[1], node, ctx) };
    }

    void divForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        v.out = { binary(Binary::Div, v.in[0], v.in[1], node, ctx) };
    }

    NdArray negated(const NdArray& x, KernelContext& ctx, const Node& node);

    void subBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (g.needGrad[0])
            g.gradIn[0] = reduceTo(g.gradOut[0], v.in[0].shape(), ctx.allocator);
        if (g.needGrad[1])
            g.gradIn[1] = negated(reduceTo(g.gradOut[0], v.in[1].shape(), ctx.allocator), ctx, node);
    }

    // Div keeps both inputs: da = dy / b, db = -(dy / b) * a / b, each summed back to its shape.
    void divBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto dyOverB = binary(Binary::Div, g.gradOut[0], v.in[1], node, ctx);
        if (g.needGrad[0])
            g.gradIn[0] = reduceTo(dyOverB, v.in[0].shape(), ctx.allocator);
        if (g.needGrad[1]) {
            const auto t = binary(Binary::Div, binary(Binary::Mul, dyOverB, v.in[0], node, ctx), v.in[1], node, ctx);
            g.gradIn[1] = negated(reduceTo(t, v.in[1].shape(), ctx.allocator), ctx, node);
        }
    }

    // ---- Expand and ReduceMean (engine/op_rules.h's shapes, as the CPU's) ----

    void expandForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (v.in[0].dtype() != DType::F32)
            throw Error("node '" + node.name + "' (Expand): the CUDA backend runs it on f32 values");
        v.out = { broadcastTo(v.in[0], expandedShape(node, v.in[0].shape()), 1.0F, ctx.allocator) };
    }

    void expandBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (g.needGrad[0])
            g.gradIn[0] = reduceTo(g.gradOut[0], v.in[0].shape(), ctx.allocator);
    }

    float meanScale(const Shape& kept, const NdArray& x)
    {
        return x.numel() > 0 ? static_cast<float>(numElements(kept)) / static_cast<float>(x.numel()) : 0.0F;
    }

    void reduceMeanForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        if (x.dtype() != DType::F32)
            throw Error("node '" + node.name + "' (ReduceMean): the CUDA backend runs it on f32 values");
        const auto shapes = reduceMeanShapes(node, x.shape());
        const auto sum = reduceTo(x, shapes.kept, ctx.allocator);
        v.out = { broadcastTo(sum, shapes.kept, meanScale(shapes.kept, x), ctx.allocator).view(shapes.out) };
    }

    void reduceMeanBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto kept = reduceMeanShapes(node, x.shape()).kept;
        if (g.needGrad[0])
            g.gradIn[0] = broadcastTo(g.gradOut[0].view(kept), x.shape(), meanScale(kept, x), ctx.allocator);
    }

    // ---- Activations and Scale ----

    enum class Unary { Scale, Relu, ReluGrad, Tanh, TanhGrad, GeluTanh, GeluTanhGrad, GeluErf, GeluErfGrad };

    // out = f(x), or for the *Grad ops dy * f'(x) (Relu and Tanh take their output as x).
    __global__ void unaryKernel(Unary op, const float* x, const float* dy, float* out, float param, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            const float a = x[i];
            switch (op) {
            case Unary::Scale:
                out[i] = a * param;
                break;
            case Unary::Relu:
                out[i] = a > 0.0F ? a : 0.0F;
                break;
            case Unary::ReluGrad:
                out[i] = a > 0.0F ? dy[i] : 0.0F;
                break;
            case Unary::Tanh:
                out[i] = tanhf(a);
                break;
            case Unary::TanhGrad:
                out[i] = dy[i] * (1.0F - a * a);
                break;
            case Unary::GeluTanh:
                out[i] = math::geluTanh(a);
                break;
            case Unary::GeluTanhGrad:
                out[i] = dy[i] * math::geluTanhGrad(a);
                break;
            case Unary::GeluErf:
                out[i] = math::geluErf(a);
                break;
            case Unary::GeluErfGrad:
                out[i] = dy[i] * math::geluErfGrad(a);
                break;
            }
        }
    }

    NdArray unary(Unary op, const NdArray& x, const NdArray* dy, float param, KernelContext& ctx, const Node& node)
    {
        useDevice(ctx.allocator);
        auto out = NdArray::empty(ctx.allocator, x.shape());
        const auto n = x.numel();
        if (n > 0)
            unaryKernel<<<blocksFor(n), kThreads>>>(op, f32(x), dy ? f32(*dy) : nullptr, f32(out), param, n);
        checkLaunch("node '" + node.name + "'");
        return out;
    }

    NdArray negated(const NdArray& x, KernelContext& ctx, const Node& node)
    {
        return unary(Unary::Scale, x, nullptr, -1.0F, ctx, node);
    }

    bool tanhGelu(const Node& node)
    {
        const auto it = node.attrs.find("approximate");
        return it != node.attrs.end() && std::holds_alternative<std::string>(it->second)
            && std::get<std::string>(it->second) == "tanh";
    }

    void scaleForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(Unary::Scale, v.in[0], nullptr, static_cast<float>(node.floatAttr("scale", 1.0)), ctx, node) };
    }
    void scaleBackward(const Node& node, const NodeValues&, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] =
            unary(Unary::Scale, g.gradOut[0], nullptr, static_cast<float>(node.floatAttr("scale", 1.0)), ctx, node);
    }
    void reluForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(Unary::Relu, v.in[0], nullptr, 0, ctx, node) };
    }
    void reluBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unary(Unary::ReluGrad, v.out[0], &g.gradOut[0], 0, ctx, node);
    }
    void tanhForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(Unary::Tanh, v.in[0], nullptr, 0, ctx, node) };
    }
    void tanhBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unary(Unary::TanhGrad, v.out[0], &g.gradOut[0], 0, ctx, node);
    }
    void geluForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(tanhGelu(node) ? Unary::GeluTanh : Unary::GeluErf, v.in[0], nullptr, 0, ctx, node) };
    }
    void geluBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] =
            unary(tanhGelu(node) ? Unary::GeluTanhGrad : Unary::GeluErfGrad, v.in[0], &g.gradOut[0], 0, ctx, node);
    }

} // namespace

Dims dimsOf(const Shape& shape)
{
    if (shape.size() > static_cast<std::size_t>(kMaxRank))
        throw Error("cuda backend: rank " + std::to_string(shape.size()) + " is above " + std::to_string(kMaxRank));
    Dims d;
    d.rank = static_cast<int>(shape.size());
    long long stride = 1;
    for (int i = d.rank - 1; i >= 0; --i) {
        d.size[i] = shape[static_cast<std::size_t>(i)];
        d.stride[i] = stride;
        stride *= d.size[i];
    }
    return d;
}

Dims stridesOver(const Shape& operand, const Shape& out)
{
    auto d = dimsOf(out);
    const auto own = dimsOf(operand);
    const auto shift = d.rank - own.rank;
    for (int i = 0; i < d.rank; ++i)
        d.stride[i] = i < shift || own.size[i - shift] == 1 ? 0 : own.stride[i - shift];
    return d;
}

NdArray broadcastTo(const NdArray& src, const Shape& to, float scale, Allocator& allocator)
{
    Shape checked;
    try {
        checked = broadcastShapes(src.shape(), to);
    } catch (const Error& e) {
        throw Error("cuda broadcast: " + std::string(e.what()));
    }
    if (checked != to)
        throw Error("cuda broadcast: " + formatShape(src.shape()) + " does not broadcast to " + formatShape(to));
    auto out = NdArray::empty(allocator, to);
    const auto n = out.numel();
    auto walk = dimsOf(to);
    auto strides = stridesOver(src.shape(), to);
    collapseDims(walk, { &strides });
    if (n > 0)
        broadcastKernel<<<blocksFor(n), kThreads>>>(f32(src), f32(out), walk, strides, scale, n);
    checkLaunch("cuda broadcast to " + formatShape(to));
    return out;
}

Shape broadcastShapeOf(const Shape& a, const Shape& b, const Node& node)
{
    try {
        return broadcastShapes(a, b);
    } catch (const Error& e) {
        throw Error("node '" + node.name + "': " + e.what());
    }
}

NdArray addArrays(const NdArray& a, const NdArray& b, const Node& node, KernelContext& ctx)
{
    return binary(Binary::Add, a, b, node, ctx);
}

void registerCudaMathKernels(KernelTable& table)
{
    table.add(OpType::Add, { addForward, addBackward });
    table.add(OpType::BiasAdd, { addForward, addBackward });
    table.add(OpType::Sub, { subForward, subBackward });
    table.add(OpType::Mul, { mulForward, mulBackward });
    table.add(OpType::Div, { divForward, divBackward });
    table.add(OpType::Scale, { scaleForward, scaleBackward });
    table.add(OpType::Relu, { reluForward, reluBackward });
    table.add(OpType::Tanh, { tanhForward, tanhBackward });
    table.add(OpType::Gelu, { geluForward, geluBackward });
    table.add(OpType::Expand, { expandForward, expandBackward });
    table.add(OpType::ReduceMean, { reduceMeanForward, reduceMeanBackward });
}

} // namespace ps::engine::cuda
