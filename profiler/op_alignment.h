// Operator alignment: a PyTorch profiler trace whose ranges name no node (plain
// torch.profiler.profile(), no record_function or NVTX annotations) mapped onto a graph by the
// order, kind and shapes of its operators.
//
// - The forward operators are the outermost framework operators (Kineto's cpu_op events,
//   `aten::linear`, `aten::layer_norm`, ...) on threads that are not autograd's, outside backward
//   and optimizer ranges. They are cut into passes where a backward or an optimizer step
//   intervenes (one micro-batch each).
// - Each pass is aligned with the graph's nodes in topological order by dynamic programming
//   (sequence alignment): an operator matches a node of a kind it computes (a table from aten
//   operators to op kinds, aten_ops.h), scoring more when its first input's dims equal
//   the node's first input's shape; a matched GEMM also takes the bias add right after it (one
//   `aten::linear` is our MatMul + BiasAdd); views match view nodes (the copies their backward
//   launches go there) or are skipped at no cost, as are the graph's views; other operators and
//   nodes are skipped at a cost.
// - Every matched operator becomes a range over the nodes it computes, so the kernels it launched
//   go to them, and its backward (autograd functions carrying its sequence number) follows.
// Depends on: core (Graph), trace_model.h.
#pragma once

#include "trace_model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ps::profiler {

// Appends a range per matched forward operator to `data.spans` (its `nodes` set). Throws
// ps::Error when a pass and the graph are too large to align (more than 64 million cells).
AlignmentStats alignOperators(const Graph& graph, TraceData& data);

} // namespace ps::profiler
