// The Attention op (core graph/attention_fusion.h) over a backend's own kernels: its MatMul for
// the scores and the context, and its fused Scale -> Mask -> Softmax (engine/fusion.h), so the
// values and gradients are those of the chain the op replaced, on the CPU to the bit (with dropout,
// the same given the same keep mask). Nothing else of the scores' size outlives the call: the forward keeps q, k and v
// (the node's inputs) and the backward recomputes the probabilities from them (FlashAttention's recomputation, Dao et
// al. 2022, section 3.1), then holds them, their gradient and the scores' gradient in that order, as attentionCost
// states. A dropout (attribute dropout) runs the backend's Dropout kernel on the probabilities; its keep mask is the
// node's saved state (the only one of the scores' size), applied again to the recomputed probabilities and to their
// gradient in the backward (Dropout's backward: the mask times 1/(1-p)). Each backend registers these under
// OpType::Attention with its own table. Depends on: backend.h.
#pragma once

#include "backend.h"

namespace ps::engine {

void attentionForward(const KernelTable& kernels, const Node& node, NodeValues& values, KernelContext& ctx);
void attentionBackward(
    const KernelTable& kernels, const Node& node, const NodeValues& values, BackwardArgs& args, KernelContext& ctx);

} // namespace ps::engine
