// What ReduceMean, ReduceSum, ReduceMax, CumSum, TopK, Expand, Cast, GatherElements, GatherND and ScatterND nodes ask
// for, read from their attributes: shapes, the cast's target and the gathers' index math (gather_math.h), shared by the
// CPU and the CUDA kernels (errors name the node); and the axis merging the
// CUDA kernels apply to strided views. Depends on: core graph types, kernel_math.h (the integer
// types).
#pragma once

#include "gather_math.h"
#include "graph/graph.h"
#include "kernel_math.h"

#include <optional>

namespace ps::engine {

struct ReduceShapes
{
    Shape kept; // the input's shape with 1 on each reduced axis (axes empty: all)
    Shape out; // kept, less the reduced axes when keepdims is 0
};

// ReduceMean's shapes over an input of shape `in` (attrs axes, negative from the end; keepdims 1).
[[nodiscard]] ReduceShapes reduceMeanShapes(const Node& node, const Shape& in);

// ReduceSum's and ReduceMax's shapes, checked: axes out of range or repeated are errors naming the
// node, and no axes with noop_with_empty_axes 1 reduces nothing (ONNX), else everything.
[[nodiscard]] ReduceShapes reduceShapes(const Node& node, const Shape& in);

// A shape as (outer, length, inner) around one axis: the node's `axis` attribute (`fallback` when
// absent), negative from the end; out of range is an error naming the node.
struct AxisSplit
{
    std::int64_t outer = 1, length = 1, inner = 1;
    std::size_t axis = 0;
};
[[nodiscard]] AxisSplit axisSplitOf(const Node& node, const Shape& shape, std::int64_t fallback);

// Expand's output: `in` and the node's `shape` attribute broadcast together (NumPy rules, a 1
// taking the other side's size).
[[nodiscard]] Shape expandedShape(const Node& node, const Shape& in);

// Cast's target (attribute `to`): a float type gives f32 (f16/bf16/f64 values stay f32 in the
// engine), an integer type i64 wrapped to the target's width (`integer` says which), bool i64 0/1.
struct CastTarget
{
    DType dtype = DType::F32;
    std::optional<math::IntegerType> integer; // nullopt: a float type
};
[[nodiscard]] CastTarget castTarget(const Node& node);

// GatherElements over data and indices of these shapes (same rank, at most kMaxGatherRank; indices
// no larger than the data off the axis). The indices' values are checked where they are read.
[[nodiscard]] math::ElementGather elementGatherOf(const Node& node, const Shape& data, const Shape& indices);

// GatherND (attr batch_dims): the output shape, the slice size and the index math.
struct NdGatherPlan
{
    math::NdGather gather;
    Shape out;
    std::int64_t inner = 1; // elements per slice
    std::int64_t rows = 0; // index tuples
};
[[nodiscard]] NdGatherPlan ndGatherOf(const Node& node, const Shape& data, const Shape& indices);

// ScatterND (reduction none): data, indices (rows..., k) and updates (rows..., data.shape[k:]).
// Index tuple `row`'s slot (its data offset / inner) is gather_math.h's ndGatherSlice(gather, row,
// tuple); shapes and the reduction are checked here, naming the node.
struct ScatterNdPlan
{
    math::NdGather gather;
    std::int64_t inner = 1; // elements per slot
    std::int64_t rows = 0; // index tuples
};
[[nodiscard]] ScatterNdPlan scatterNdOf(
    const Node& node, const Shape& data, const Shape& indices, const Shape& updates);

// A strided walk over `size` (row-major) by several operands at once, each with its element
// strides (0 along an axis it is broadcast over).
struct StridedView
{
    std::vector<std::int64_t> size;
    std::vector<std::vector<std::int64_t>> strides; // one per operand, size.size() each
};
// The same walk with fewer axes: axes of size 1 dropped, and axis i merged into axis i + 1 where
// every operand has stride[i] == stride[i + 1] * size[i + 1] (the two walk memory as one axis;
// two broadcast axes merge too). Flat index k reaches the same offset in every operand before and
// after. A bias over a (batch, seq, hidden) activation becomes (batch x seq, hidden): the CUDA
// kernels divide by two sizes per element instead of three.
[[nodiscard]] StridedView collapseAxes(StridedView view);

} // namespace ps::engine
