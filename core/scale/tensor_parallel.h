// Tensor parallelism on the op graph (issue P17, deliverable 2): Megatron-LM's sharding (Shoeybi et
// al. 2019, §3) as a property of a plan. The graph keeps its nodes; each node gets a shard rule:
//   column: a MatMul with a weight whose input is whole: its weight's output columns split over the
//           t GPUs, its output split (an all-reduce of its input's gradient in the backward);
//   row:    a MatMul with a weight whose input is split: its weight's input rows split, its output
//           all-reduced in the forward;
//   vocabulary: the word Embedding (the largest table): its rows split, its output all-reduced in
//           the forward (position and type embeddings stay whole);
//   split:  any other node reading a split tensor (attention heads, GELU, the vocabulary-parallel
//           cross-entropy): 1/t of its work and tensors on each GPU;
//   replicated: the rest (LayerNorms, residual adds, dropout on whole tensors), and a MatMul that
//           would split what a normalization then reads (BERT's MLM head transform).
// So a transformer block is column (QKV, MLP up), split (attention core, GELU), row (output
// projection, MLP down): two all-reduces forward, two backward. A profile of one GPU of the group
// divides the sharded nodes' time, bytes and parameters by t and adds the all-reduces over the link
// inside the node.
// Depends on: graph/, cost/profile.h, cluster/device_catalog.h (LinkSpec).
#pragma once

#include "cluster/device_catalog.h"
#include "cost/profile.h"
#include "graph/graph.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class Shard : std::uint8_t { Replicated, Column, Row, Vocabulary, Split };
[[nodiscard]] std::string_view toString(Shard shard);

struct TensorParallelPlan
{
    int size = 1; // t
    std::vector<Shard> nodes; // by node id
    [[nodiscard]] int count(Shard shard) const;
    // "tensor parallel 4: 49 column, 48 row, 1 vocabulary, 412 split, 98 replicated"
    [[nodiscard]] std::string text() const;
};

// Megatron's rule over `graph` in node order (vocabularies padded to a multiple of t, as Megatron-LM
// pads them). Throws ps::Error naming the node where t does not divide a split dimension (a weight's
// rows or columns other than a vocabulary), where nothing
// can be split (no MatMul or Embedding with a weight), or where a split tensor reaches a graph
// output (the model does not end in a row-parallel MatMul or a cross-entropy).
[[nodiscard]] TensorParallelPlan shardTensorParallel(const Graph& graph, int tensorParallel);

// The op graph as one GPU of the tensor group holds it: the same nodes and tensors, each split tensor
// (the outputs of column-parallel and split nodes, the weights of column-, row- and
// vocabulary-parallel ones) a t-th of its elements (its last dimension divided, rounded up; a
// vocabulary padded), so the planner's memory of a stage counts one GPU's bytes. No parameter
// values travel (planning only).
[[nodiscard]] Graph tensorParallelGraph(const Graph& graph, const TensorParallelPlan& plan);

// The profile of one GPU of the tensor group: sharded nodes' time, saved and working bytes, split
// outputs and sharded parameters divided by t (an approximation: a GEMM a t-th the size may run
// below the whole one's efficiency); a row-parallel MatMul's and an Embedding's forward plus the
// ring all-reduce of their output, a column-parallel MatMul's backward plus that of its input's
// gradient, over `link`.
[[nodiscard]] Profile tensorParallelProfile(
    const Graph& graph, const Profile& profile, const TensorParallelPlan& plan, const LinkSpec& link);

} // namespace ps
