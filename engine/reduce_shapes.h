// The shapes of ReduceMean and Expand from a node's attributes, shared by the CPU and the CUDA
// kernels. Depends on: core graph types.
#pragma once

#include "graph/graph.h"

namespace ps::engine {

struct ReduceShapes
{
    Shape kept; // the input's shape with 1 on each reduced axis (axes empty: all)
    Shape out; // kept, less the reduced axes when keepdims is 0
};

// ReduceMean's shapes over an input of shape `in` (attrs axes, negative from the end; keepdims 1).
[[nodiscard]] ReduceShapes reduceMeanShapes(const Node& node, const Shape& in);

// Expand's output: `in` and the node's `shape` attribute broadcast together (NumPy rules, a 1
// taking the other side's size).
[[nodiscard]] Shape expandedShape(const Node& node, const Shape& in);

} // namespace ps::engine
