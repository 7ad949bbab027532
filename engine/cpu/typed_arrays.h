// Element-type helpers of the CPU kernels that take f32 or i64 arrays (kernels_elementwise.cpp,
// kernels_reduce.cpp): typed access, dispatch by element type, NaN and truth tests, and the maps
// over one array or two broadcast ones that produce a new array.
// Depends on: cpu/kernel_impl.h, graph/shape_inference.h.
#pragma once

#include "cpu/kernel_impl.h"
#include "graph/shape_inference.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

namespace ps::engine::detail::typed {

// Raw elements of an f32 or i64 array (kernels that only move data serve both).
inline const std::byte* rawBytes(const NdArray& a)
{
    return a.dtype() == DType::F32 ? reinterpret_cast<const std::byte*>(a.f32())
                                   : reinterpret_cast<const std::byte*>(a.i64());
}
inline std::byte* rawBytes(NdArray& a)
{
    return a.dtype() == DType::F32 ? reinterpret_cast<std::byte*>(a.f32()) : reinterpret_cast<std::byte*>(a.i64());
}

// ---- Element types: float (f32 arrays) or std::int64_t (i64 arrays) ----

template <typename T> constexpr DType dtypeOf()
{
    return std::is_same_v<T, float> ? DType::F32 : DType::I64;
}

template <typename T> T* data(NdArray& a)
{
    if constexpr (std::is_same_v<T, float>)
        return a.f32();
    else
        return a.i64();
}

template <typename T> const T* data(const NdArray& a)
{
    if constexpr (std::is_same_v<T, float>)
        return a.f32();
    else
        return a.i64();
}

// Calls fn with a value of the array's element type (float or std::int64_t) as a type tag.
template <typename Fn> decltype(auto) byDType(const NdArray& a, Fn&& fn)
{
    if (a.dtype() == DType::I64)
        return fn(std::int64_t {});
    return fn(float {});
}

template <typename T> bool isNan(T value)
{
    if constexpr (std::is_same_v<T, float>)
        return std::isnan(value);
    else
        return false;
}

template <typename T> bool truthy(T value) // a bool or a condition: nonzero is true
{
    return value != T {};
}

inline std::string label(const Node& node)
{
    return "node '" + node.name + "' (" + std::string(toString(node.op)) + ")";
}

inline void requireF32(const Node& node, const NdArray& a, std::size_t input)
{
    if (a.dtype() != DType::F32)
        throw Error(label(node) + ": input " + std::to_string(input) + " is " + std::string(toString(a.dtype()))
            + ", expected f32");
}

inline void requireSameDType(const Node& node, const NdArray& a, const NdArray& b)
{
    if (a.dtype() != b.dtype())
        throw Error(label(node) + ": operands of " + std::string(toString(a.dtype())) + " and "
            + std::string(toString(b.dtype())) + " must have one dtype");
}

// NumPy broadcasting of two shapes (ps::broadcastShapes); the error names the node.
inline Shape broadcastShape(const Node& node, const Shape& a, const Shape& b)
{
    try {
        return broadcastShapes(a, b);
    } catch (const Error& e) {
        throw Error(label(node) + ": " + e.what());
    }
}

// out[i] = op(x[i]) with the element types In and Out.
template <typename Out, typename In, typename Op> NdArray mapArray(const NdArray& x, KernelContext& ctx, Op op)
{
    auto out = NdArray::empty(ctx.allocator, x.shape(), dtypeOf<Out>());
    Out* o = data<Out>(out);
    const In* in = data<In>(x);
    const auto n = x.numel();
    for (std::int64_t i = 0; i < n; ++i)
        o[i] = op(in[i]);
    return out;
}

// out[i] = op(a[ia], b[ib]) over the broadcast shape.
template <typename Out, typename A, typename B, typename Op>
NdArray broadcastMap(const Node& node, const NdArray& a, const NdArray& b, KernelContext& ctx, Op op)
{
    const auto shape = broadcastShape(node, a.shape(), b.shape());
    auto out = NdArray::empty(ctx.allocator, shape, dtypeOf<Out>());
    Out* o = data<Out>(out);
    const A* x = data<A>(a);
    const B* y = data<B>(b);
    if (a.shape() == shape && b.shape() == shape) {
        for (std::int64_t i = 0; i < out.numel(); ++i)
            o[i] = op(x[i], y[i]);
    } else {
        forEachBroadcast(shape, a.shape(), b.shape(),
            [&](std::int64_t i, std::int64_t ia, std::int64_t ib) { o[i] = op(x[ia], y[ib]); });
    }
    return out;
}

// Comparisons, logic and casts to integers: nothing to differentiate, gradIn stays undefined.
inline void noGradient(const Node&, const NodeValues&, BackwardArgs&, KernelContext&) { }

} // namespace ps::engine::detail::typed
