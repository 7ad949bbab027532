// Internal to the CPU backend: the per-family registration of its kernels (one forward and one
// backward function per op, in kernels_math/nn/layout/conv.cpp) and the broadcasting and shape
// helpers they share.
#pragma once

#include "backend.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace ps::engine::detail {

// For every element of `out`: the flat offsets into operands of shapes `a` and `b` broadcast to it.
void forEachBroadcast(const Shape& out, const Shape& a, const Shape& b,
    const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn);
// Sums a gradient of the broadcast shape back to `target` (the operand's shape).
[[nodiscard]] NdArray reduceToShape(const NdArray& grad, const Shape& target, Allocator& allocator);
[[nodiscard]] std::vector<std::int64_t> stridesOf(const Shape& shape);

// Views a shape as (outer, shape[axis], inner).
struct AxisView
{
    std::int64_t outer = 1, length = 1, inner = 1;
};
[[nodiscard]] AxisView axisView(const Shape& shape, std::size_t axis);
// "<Op> '<node>': ", the start of a kernel's error message.
[[nodiscard]] std::string nodeLabel(const Node& node);
// Throws naming the node when `a` (`what`: "the input", ...) is not of `dtype`.
void requireDType(const Node& node, const NdArray& a, DType dtype, const char* what);
// A zero array where a gradient is undefined (an unused output).
[[nodiscard]] NdArray gradOrZeros(const NdArray& grad, const Shape& shape, Allocator& allocator);

// MatMul, the broadcasting binary ops, activations, ReduceMean.
void registerMathKernels(KernelTable& table);
// Embedding, normalizations, Softmax, Mask, Dropout, CrossEntropy.
void registerNnKernels(KernelTable& table);
// Reshape, Transpose, Split, Slice, Concat, Select, Expand.
void registerLayoutKernels(KernelTable& table);
// Conv, ConvTranspose, BatchNorm, MaxPool, AvgPool, GlobalAvgPool.
void registerConvKernels(KernelTable& table);
// Pad and Resize (kernels_resample.cpp).
void registerResampleKernels(KernelTable& table);
// Activations, unary math, Max/Min, comparisons and logic, Where, Cast.
void registerElementwiseKernels(KernelTable& table);
// ReduceSum/ReduceMax, CumSum, Trilu.
void registerReduceKernels(KernelTable& table);
// Gather, ScatterND, TopK, Einsum.
void registerIndexKernels(KernelTable& table);
// GatherElements, GatherND.
void registerGatherKernels(KernelTable& table);

} // namespace ps::engine::detail
