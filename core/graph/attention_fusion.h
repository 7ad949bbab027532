// Fused attention: the Attention op's shape and cost rules, and the graph pass that puts one
// Attention node in place of each scaled dot-product chain, MatMul(q, k^T) -> [Scale] -> [Mask]
// -> Softmax -> [Dropout] -> MatMul(., v), as PyTorch's scaled_dot_product_attention runs it.
//
// What changes is memory, as in FlashAttention (Dao et al. 2022, section 3.1: the softmax is
// recomputed in the backward from q, k and v instead of being kept): the node keeps its inputs
// and nothing of size Tq x Tk, where the chain keeps the attention probabilities of every layer
// and micro-batch in flight until their backward. The engine runs the node with the backend's own
// GEMM and masked-softmax kernels (engine/attention_kernel.h), so its values and gradients are
// the chain's; its scores and probabilities live only while the node's forward or backward runs,
// which the cost rule states as workspace: two score-sized arrays in the forward, up to three
// (the probabilities, their gradient, and the scores' gradient) in the backward. The price is
// the recomputation: one more scores GEMM and softmax in every backward. A dropout on the
// probabilities joins the node (attribute dropout, its p): the node then keeps the one-byte keep
// mask of every score, as the chain's Dropout does, where the chain kept the probabilities and
// the dropped probabilities (8 bytes a score) besides; PyTorch's fused kernels keep the random
// generator's state instead.
// Depends on: graph/graph.h, graph/op_registry.h.
#pragma once

#include "graph/graph.h"
#include "graph/op_registry.h"

#include <cstddef>
#include <vector>

namespace ps {

// The output shape: q's with its last dim v's; q, k and v share their leading dims, k and v their
// key count, q and k their head size; a padding input is (leading dim 0, Tk).
[[nodiscard]] std::vector<Shape> attentionShape(const Node& node, const ShapeInputs& inputs);
// FLOPs (two GEMMs and a softmax forward; the scores GEMM and softmax again, and four GEMMs, in
// the backward), saved inputs, and the forward and backward workspace stated above.
void attentionCost(const OpCostContext& ctx, const Node& node, OpCost& cost);

// `graph` with every attention chain replaced by one Attention node (its name the context
// MatMul's scope + ".attention", its layer the MatMul's). A chain fuses where its inner tensors
// are f32, each read by the chain's next node alone and none a graph output; k may come through a
// Transpose of its last two dims read by the scores alone (then the Transpose goes too), and a
// Dropout may sit between the Softmax and the context MatMul. Chains with anything else between
// the nodes (a position bias Add) stay as they are. `fused`, when given, receives the number of chains replaced.
[[nodiscard]] Graph fuseAttention(const Graph& graph, std::size_t* fused = nullptr);

} // namespace ps
