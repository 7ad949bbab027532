// GroupNorm (Wu and He 2018, section 3.1: each sample's channels cut into G groups, each group
// normalized over its channels and every position, then a learned scale and shift per channel;
// InstanceNorm is G = C): the op's shape and saved-state rules, and the graph pass that puts one
// GroupNorm node in place of the chain an ONNX import writes for it (and one LayerNorm or RMSNorm
// node in place of theirs: fuseNormalizations below).
//
// The chain: torch exports GroupNorm as Reshape(x, (N, G, -1)) -> InstanceNormalization (ones and
// zeros) -> Reshape back -> Mul(scale) -> Add(bias); GroupNormalization (opsets 18, 21) and
// InstanceNormalization are written out by onnx/composite_lowering.h; both reach the IR as
//   Reshape... -> a (N, G, L);  c = a - ReduceMean(a, last);  y = c / Sqrt(ReduceMean(c * c, last) + eps)
//   -> Reshape... [-> Mul(per-channel scale) [-> Add(per-channel shift)]] [-> Reshape...]
// where x is (N, C, S...), G divides C and L = (C / G) * prod(S). One GroupNorm node runs it: its
// backward keeps x and two floats per (sample, group), where the chain kept the centered values,
// their squares' statistics and the normalized tensor of every micro-batch in flight.
// Depends on: graph/graph.h, graph/op_registry.h.
#pragma once

#include "graph/graph.h"
#include "graph/op_registry.h"

#include <cstddef>
#include <vector>

namespace ps {

// x (N, C, ...) -> x's shape; attr groups divides C; gamma and beta hold C values, shaped (C) or
// (C, 1, ..., 1).
[[nodiscard]] std::vector<Shape> groupNormShape(const Node& node, const ShapeInputs& inputs);
// The mean and inverse deviation of every (sample, group), fp32.
void groupNormState(const Graph& graph, const Node& node, OpCost& cost);

// `graph` with every chain above replaced by one GroupNorm node (its name the chain's Div's scope +
// ".group_norm", its layer the Div's). A chain fuses where its inner tensors are f32, each read by
// the chain's next node alone and none a graph output; the scale and shift join the node where they
// are parameters or constants (or a Reshape of one read by the chain alone) of C values applied
// per channel (a per-group scale stays a Mul after the node). Where the chain ends in another shape
// than x's, a Reshape follows the node. `fused`, when given, receives the number of chains replaced.
[[nodiscard]] Graph fuseGroupNorm(const Graph& graph, std::size_t* fused = nullptr);

// The chains an import writes for the other normalizations, each replaced by the IR's node:
//   LayerNorm (torch's export below opset 17): c = x - ReduceMean(x, last);
//     c / Sqrt(ReduceMean(c * c or Pow(c, 2), last) + eps) -> Mul(gamma (C)) [-> Add or BiasAdd(beta (C))]
//   RMSNorm (LLaMA's and Qwen's, RMSNormalization-23 written out): x * Reciprocal(Sqrt(ReduceMean(x * x
//     or Pow(x, 2), last) + eps)) -> Mul(weight (C)), either operand order
// with the same conditions on the inner tensors; a LayerNorm without a scale stays as it is. Group
// norms as fuseGroupNorm.
struct NormalizationsFused
{
    std::size_t groupNorms = 0;
    std::size_t layerNorms = 0;
    std::size_t rmsNorms = 0;
};
[[nodiscard]] Graph fuseNormalizations(const Graph& graph, NormalizationsFused* fused = nullptr);

} // namespace ps
