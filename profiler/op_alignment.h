// Operator alignment: a PyTorch profiler trace whose ranges name no node (plain
// torch.profiler.profile(), no record_function or NVTX annotations), or cover little of it, mapped
// onto a graph by the order, kind and shapes of its operators.
//
// - The forward operators are each thread's outermost framework operators (Kineto's cpu_op
//   events, `aten::linear`, `aten::layer_norm`, ...), on threads that are not autograd's, outside
//   backward and optimizer ranges. A thread's are cut into passes where backward work, an
//   optimizer step or a ProfilerStep starts between two of them; runs under a quarter of the
//   longest pass (the gradient seed, a CPU backward's top-level operators) are left out. An
//   operator the table does not know hides the operators it calls.
// - Each pass is aligned with the graph's nodes in topological order by dynamic programming
//   (sequence alignment): an operator matches a node of a kind it computes (aten_ops.h), scoring
//   more when the dims of one of its inputs equal one of the node's input shapes; a matched GEMM
//   also takes the bias add right after it (one `aten::linear` is our MatMul + BiasAdd), GELU,
//   LayerNorm and RMSNorm their decompositions; views match view nodes (the copies their backward
//   launches go there) or are skipped at no cost, as are the graph's views and operators on
//   scalars only; other operators and nodes are skipped at a cost. Operators left after the last
//   match, at least three quarters as many as those from the first match to the last (set-up work
//   before the first, such as parameters initialised and copied, not counted), are aligned again
//   as a pass of their own (GPipe's forwards back to back, a forward benchmark's passes).
// - What the order missed: an operator out of order (a residual branch the importer sorted
//   earlier) takes the first free node of its kind with its input shapes (without shapes, GEMMs
//   and convolutions by kind alone); batch normalization after a matched convolution, which an
//   eval-mode export folded into it, goes to that convolution; dropout, where the graph has no
//   Dropout node (an eval-mode export of a model trained with it), to the computing operator
//   matched before it.
// - Every matched operator becomes a range over the nodes it computes, one occurrence per pass, so
//   the kernels it launched go to them, and its backward follows: by autograd sequence number
//   (trace_model.cpp), or, in traces without them (torch 1.13's legacy profiler), by aligning the
//   backward functions after each pass and before the next (`AddmmBackward0` names the addmm a
//   linear ran) with the pass's operators in reverse order. Pipelined schedules whose backward
//   does not follow its own forward (1F1B's steady state) are not aligned that way.
// - A pass with more than 64 million cells against the graph is left unaligned (counted).
// Depends on: core (Graph), trace_model.h.
#pragma once

#include "trace_model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ps::profiler {

// Appends a range per matched forward operator, and per backward function aligned by name, to
// `data.spans` (their `nodes` and `pass` set). Operators align with the nodes of `window` only.
AlignmentStats alignOperators(const Graph& graph, TraceData& data, NodeWindow window = {});

} // namespace ps::profiler
