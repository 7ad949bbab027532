// CUDA kernels of the layout ops: Transpose, Split, Slice, Select, Concat, Trilu and Pad (Reshape is
// a view: the CPU backend's kernel, which touches no data).
// Copies move elements of every engine type (f32, i64, u8) at their own size.
#include "conv_geometry.h"
#include "cuda/cuda_common.cuh"
#include "op_rules.h"

#include <cstring>

namespace ps::engine::cuda {
namespace {

    std::size_t axisOf(const Node& node, const char* key, std::int64_t fallback, std::size_t rank)
    {
        const auto a = node.intAttr(key, fallback);
        return static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(rank) : a);
    }

    // ---- Transpose ----

    template <typename T>
    __global__ void permuteKernel(const T* in, T* out, Dims outDims, Dims inStrides, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            long long rest = i;
            long long offset = 0;
            for (int d = outDims.rank - 1; d >= 0; --d) {
                offset += (rest % outDims.size[d]) * inStrides.stride[d];
                rest /= outDims.size[d];
            }
            out[i] = in[offset];
        }
    }

    NdArray transpose(const NdArray& x, const std::vector<std::int64_t>& perm, KernelContext& ctx, const Node& node)
    {
        useDevice(ctx.allocator);
        const auto& in = x.shape();
        if (perm.size() != in.size() || in.size() > static_cast<std::size_t>(kMaxRank))
            throw Error("node '" + node.name + "': permutation of " + std::to_string(perm.size()) + " axes for "
                + formatShape(in));
        Shape outShape;
        for (auto p : perm)
            outShape.push_back(in[static_cast<std::size_t>(p)]);
        auto out = NdArray::empty(ctx.allocator, outShape, x.dtype());
        Dims outDims;
        Dims inStrides;
        outDims.rank = inStrides.rank = static_cast<int>(in.size());
        std::vector<long long> strides(in.size(), 1);
        for (int d = static_cast<int>(in.size()) - 2; d >= 0; --d)
            strides[static_cast<std::size_t>(d)] =
                strides[static_cast<std::size_t>(d) + 1] * in[static_cast<std::size_t>(d) + 1];
        for (std::size_t d = 0; d < perm.size(); ++d) {
            outDims.size[d] = outShape[d];
            inStrides.stride[d] = strides[static_cast<std::size_t>(perm[d])];
        }
        const auto n = out.numel();
        if (n > 0) {
            if (x.dtype() == DType::I64)
                permuteKernel<<<blocksFor(n), kThreads>>>(i64(x), i64(out), outDims, inStrides, n);
            else if (x.dtype() == DType::U8)
                permuteKernel<<<blocksFor(n), kThreads>>>(u8(x), u8(out), outDims, inStrides, n);
            else
                permuteKernel<<<blocksFor(n), kThreads>>>(f32(x), f32(out), outDims, inStrides, n);
        }
        checkLaunch("node '" + node.name + "'");
        return out;
    }

    void transposeForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        v.out = { transpose(v.in[0], node.intsAttr("perm"), ctx, node) };
    }

    void transposeBackward(const Node& node, const NodeValues&, BackwardArgs& g, KernelContext& ctx)
    {
        const auto perm = node.intsAttr("perm");
        std::vector<std::int64_t> inverse(perm.size());
        for (std::size_t i = 0; i < perm.size(); ++i)
            inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
        g.gradIn[0] = transpose(g.gradOut[0], inverse, ctx, node);
    }

    // ---- Copies along one axis: src[:, srcStart + k, :] -> dst[:, dstStart + k, :] ----

    template <typename T>
    __global__ void copyAxisKernel(const T* src, T* dst, std::int64_t outer, std::int64_t count, std::int64_t inner,
        std::int64_t srcLen, std::int64_t srcStart, std::int64_t dstLen, std::int64_t dstStart)
    {
        const auto n = outer * count * inner;
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
            const auto x = i % inner;
            const auto k = (i / inner) % count;
            const auto o = i / (inner * count);
            dst[(o * dstLen + dstStart + k) * inner + x] = src[(o * srcLen + srcStart + k) * inner + x];
        }
    }

    void copyAxis(const NdArray& src, std::int64_t srcStart, NdArray& dst, std::int64_t dstStart, std::int64_t count,
        std::size_t axis, const Node& node)
    {
        const auto& s = src.shape();
        std::int64_t outer = 1;
        std::int64_t inner = 1;
        for (std::size_t d = 0; d < axis; ++d)
            outer *= s[d];
        for (std::size_t d = axis + 1; d < s.size(); ++d)
            inner *= s[d];
        const auto n = outer * count * inner;
        if (n > 0) {
            const auto srcLen = s[axis];
            const auto dstLen = dst.shape()[axis];
            if (src.dtype() == DType::I64)
                copyAxisKernel<<<blocksFor(n), kThreads>>>(
                    i64(src), i64(dst), outer, count, inner, srcLen, srcStart, dstLen, dstStart);
            else if (src.dtype() == DType::U8)
                copyAxisKernel<<<blocksFor(n), kThreads>>>(
                    u8(src), u8(dst), outer, count, inner, srcLen, srcStart, dstLen, dstStart);
            else
                copyAxisKernel<<<blocksFor(n), kThreads>>>(
                    f32(src), f32(dst), outer, count, inner, srcLen, srcStart, dstLen, dstStart);
        }
        checkLaunch("node '" + node.name + "'");
    }

    NdArray gradOrZeros(const NdArray& grad, const Shape& shape, Allocator& allocator)
    {
        return grad.defined() ? grad : NdArray::zeros(allocator, shape);
    }

    void splitForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", -1, x.shape().size());
        std::int64_t start = 0;
        v.out.clear();
        for (auto size : node.intsAttr("sizes")) {
            auto shape = x.shape();
            shape[axis] = size;
            auto part = NdArray::empty(ctx.allocator, shape, x.dtype());
            copyAxis(x, start, part, 0, size, axis, node);
            v.out.push_back(part);
            start += size;
        }
    }

    void splitBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", -1, x.shape().size());
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        std::int64_t start = 0;
        for (std::size_t i = 0; i < v.out.size(); ++i) {
            const auto part = gradOrZeros(g.gradOut[i], v.out[i].shape(), ctx.allocator);
            copyAxis(part, 0, dx, start, part.shape()[axis], axis, node);
            start += part.shape()[axis];
        }
        g.gradIn[0] = dx;
    }

    void sliceForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        const auto start = node.intAttr("start", 0);
        const auto end = std::min(node.intAttr("end", x.shape()[axis]), x.shape()[axis]);
        auto shape = x.shape();
        shape[axis] = end - start;
        auto out = NdArray::empty(ctx.allocator, shape, x.dtype());
        copyAxis(x, start, out, 0, end - start, axis, node);
        v.out = { out };
    }

    void sliceBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        const auto& part = g.gradOut[0];
        copyAxis(part, 0, dx, node.intAttr("start", 0), part.shape()[axis], axis, node);
        g.gradIn[0] = dx;
    }

    // Select: one index along an axis, the axis dropped (Slice of length one, then a view).
    void selectForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        auto kept = x.shape();
        kept[axis] = 1;
        auto out = NdArray::empty(ctx.allocator, kept, x.dtype());
        copyAxis(x, node.intAttr("index", 0), out, 0, 1, axis, node);
        auto shape = x.shape();
        shape.erase(shape.begin() + static_cast<std::ptrdiff_t>(axis));
        v.out = { out.view(shape) };
    }

    void selectBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& x = v.in[0];
        const auto axis = axisOf(node, "axis", 0, x.shape().size());
        auto kept = x.shape();
        kept[axis] = 1;
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        copyAxis(g.gradOut[0].view(kept), 0, dx, node.intAttr("index", 0), 1, axis, node);
        g.gradIn[0] = dx;
    }

    void concatForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto axis = axisOf(node, "axis", 0, v.in[0].shape().size());
        auto shape = v.in[0].shape();
        shape[axis] = 0;
        for (const auto& in : v.in)
            shape[axis] += in.shape()[axis];
        auto out = NdArray::empty(ctx.allocator, shape, v.in[0].dtype());
        std::int64_t at = 0;
        for (const auto& in : v.in) {
            copyAxis(in, 0, out, at, in.shape()[axis], axis, node);
            at += in.shape()[axis];
        }
        v.out = { out };
    }

    void concatBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto axis = axisOf(node, "axis", 0, v.in[0].shape().size());
        std::int64_t at = 0;
        for (std::size_t i = 0; i < v.in.size(); ++i) {
            const auto len = v.in[i].shape()[axis];
            if (g.needGrad[i]) {
                auto part = NdArray::empty(ctx.allocator, v.in[i].shape());
                copyAxis(g.gradOut[0], at, part, 0, len, axis, node);
                g.gradIn[i] = part;
            }
            at += len;
        }
    }

    // ---- Trilu (kernel_math.h's triangle rule, as the CPU's) ----

    template <typename T>
    __global__ void triluKernel(const T* x, T* y, long long rows, long long cols, bool upper, long long k, long long n)
    {
        for (auto e = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
             e += static_cast<long long>(gridDim.x) * blockDim.x)
            y[e] = math::triluKeeps((e / cols) % rows, e % cols, upper, k) ? x[e] : T {};
    }

    NdArray trilu(const Node& node, const NdArray& x, KernelContext& ctx)
    {
        const auto& shape = x.shape();
        if (shape.size() < 2)
            throw Error(
                "node '" + node.name + "' (Trilu): needs a matrix or a batch of them, got " + formatShape(shape));
        if (x.dtype() != DType::F32 && x.dtype() != DType::I64)
            throw Error("node '" + node.name + "' (Trilu): the CUDA backend runs it on f32 and i64 values");
        auto out = NdArray::empty(ctx.allocator, shape, x.dtype());
        const bool upper = node.intAttr("upper", 1) != 0;
        const auto k = node.intAttr("k", 0);
        const auto rows = shape[shape.size() - 2];
        const auto cols = shape.back();
        const auto n = out.numel();
        if (n > 0 && x.dtype() == DType::F32)
            triluKernel<<<blocksFor(n), kThreads>>>(f32(x), f32(out), rows, cols, upper, k, n);
        else if (n > 0)
            triluKernel<<<blocksFor(n), kThreads>>>(i64(x), i64(out), rows, cols, upper, k, n);
        checkLaunch("node '" + node.name + "'");
        return out;
    }

    void triluForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        v.out = { trilu(node, v.in[0], ctx) };
    }

    void triluBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (g.needGrad[0] && v.in[0].dtype() == DType::F32) // keeps nothing: dy with the same triangle
            g.gradIn[0] = trilu(node, g.gradOut[0], ctx);
    }

    // ---- Pad (engine/conv_math.h's padSource per axis, as the CPU's) ----

    struct PadDims
    {
        int rank = 0;
        long long out[kMaxRank] {};
        long long in[kMaxRank] {};
        long long begin[kMaxRank] {};
        math::PadMode mode = math::PadMode::Constant;
    };

    // The input offset output element o reads, or -1 for the constant.
    __device__ long long padOffset(long long o, const PadDims& d)
    {
        long long offset = 0;
        long long stride = 1;
        for (int a = d.rank - 1; a >= 0; --a) {
            const long long s = math::padSource(d.mode, o % d.out[a] - d.begin[a], d.in[a]);
            if (s < 0)
                return -1;
            offset += s * stride;
            stride *= d.in[a];
            o /= d.out[a];
        }
        return offset;
    }

    __global__ void padKernel(const float* x, float* y, PadDims d, float fill, long long n)
    {
        for (auto o = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
             o += static_cast<long long>(gridDim.x) * blockDim.x) {
            const long long at = padOffset(o, d);
            y[o] = at < 0 ? fill : x[at];
        }
    }

    // Reflect, edge and wrap read an input element from several outputs: their gradients add up.
    __global__ void padGradKernel(const float* dy, float* dx, PadDims d, long long n)
    {
        for (auto o = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; o < n;
             o += static_cast<long long>(gridDim.x) * blockDim.x) {
            const long long at = padOffset(o, d);
            if (at >= 0)
                atomicAdd(dx + at, dy[o]);
        }
    }

    PadDims padDims(const Node& node, const NdArray& x)
    {
        if (x.dtype() != DType::F32)
            throw Error("node '" + node.name + "' (Pad): the CUDA backend runs it on f32 values");
        if (x.shape().size() > static_cast<std::size_t>(kMaxRank))
            throw Error("node '" + node.name + "' (Pad): rank " + std::to_string(x.shape().size()) + " is above "
                + std::to_string(kMaxRank));
        const auto g = padGeometry(node, x.shape());
        PadDims d;
        d.rank = static_cast<int>(x.shape().size());
        d.mode = g.mode;
        for (int a = 0; a < d.rank; ++a) {
            d.out[a] = g.out[static_cast<std::size_t>(a)];
            d.in[a] = x.shape()[static_cast<std::size_t>(a)];
            d.begin[a] = g.begin[static_cast<std::size_t>(a)];
        }
        return d;
    }

    Shape padShape(const PadDims& d)
    {
        return Shape(d.out, d.out + d.rank);
    }

    void padForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto d = padDims(node, v.in[0]);
        auto out = NdArray::empty(ctx.allocator, padShape(d));
        const auto n = out.numel();
        if (n > 0)
            padKernel<<<blocksFor(n), kThreads>>>(
                f32(v.in[0]), f32(out), d, static_cast<float>(node.floatAttr("value", 0.0)), n);
        checkLaunch("node '" + node.name + "'");
        v.out = { out };
    }

    void padBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        if (!g.needGrad[0])
            return;
        const auto d = padDims(node, v.in[0]);
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        const auto n = numElements(padShape(d));
        if (n > 0)
            padGradKernel<<<blocksFor(n), kThreads>>>(f32(g.gradOut[0]), f32(dx), d, n);
        checkLaunch("node '" + node.name + "'");
        g.gradIn[0] = dx;
    }

} // namespace

void registerCudaLayoutKernels(KernelTable& table)
{
    // Reshape makes a view of the same storage, no data touched: the CPU backend's kernel serves.
    table.add(OpType::Reshape, *cpuBackend().kernels().find(OpType::Reshape));
    table.add(OpType::Transpose, { transposeForward, transposeBackward });
    table.add(OpType::Split, { splitForward, splitBackward });
    table.add(OpType::Slice, { sliceForward, sliceBackward });
    table.add(OpType::Concat, { concatForward, concatBackward });
    table.add(OpType::Select, { selectForward, selectBackward });
    table.add(OpType::Trilu, { triluForward, triluBackward });
    table.add(OpType::Pad, { padForward, padBackward });
}

// Dims helper shared by the broadcasting kernels (cuda_math_kernels.cu).
void collapseDims(Dims& shape, std::initializer_list<Dims*> operands)
{
    StridedView view;
    view.size.assign(shape.size, shape.size + shape.rank);
    for (const auto* o : operands)
        view.strides.emplace_back(o->stride, o->stride + shape.rank);
    const auto merged = collapseAxes(std::move(view));
    shape.rank = static_cast<int>(merged.size.size());
    long long stride = 1;
    for (int i = shape.rank - 1; i >= 0; --i) {
        shape.size[i] = merged.size[static_cast<std::size_t>(i)];
        shape.stride[i] = stride;
        stride *= shape.size[i];
    }
    std::size_t k = 0;
    for (auto* o : operands) {
        o->rank = shape.rank;
        for (int i = 0; i < shape.rank; ++i) {
            o->size[i] = shape.size[i];
            o->stride[i] = merged.strides[k][static_cast<std::size_t>(i)];
        }
        ++k;
    }
}

} // namespace ps::engine::cuda
