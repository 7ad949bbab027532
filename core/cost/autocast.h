// Which tensors torch.autocast keeps in half precision when a graph trains in bf16/fp16 mixed
// precision, and the cast kernels it launches, after PyTorch's "Automatic Mixed Precision" op
// reference (torch.amp, "CUDA Ops that can autocast to float16", "... to float32", "... that
// promote to the widest input type"):
//   - lower precision: MatMul, Einsum of two operands, Conv (matmul, linear, addmm, bmm, conv): every float input
//     is cast to half (a parameter once per forward: autocast caches the cast of a leaf that
//     requires a gradient), the output is half. A BiasAdd or Add of a parameter straight after
//     such a node with a parameter operand is that layer's bias (nn.Linear, addmm, Hugging Face's
//     Conv1D add it inside the GEMM): half.
//   - float32: Softmax, LayerNorm, RMSNorm, GroupNorm (group_norm), CrossEntropy, Exp, Log, Pow, Reciprocal, ReduceSum,
//     CumSum, a scalar divided by a tensor (__rtruediv__): half inputs are cast to fp32, the output
//     is fp32.
//   - the promote list (Concat as cat, ScatterND as index_put) and ordinary type promotion (Add,
//     Sub, Mul, Div, Max, Min, Where): the widest of their float inputs with dimensions, converted
//     as they are read (no cast kernel); parameters are fp32 master weights, so a half activation
//     plus a parameter is fp32.
//   - the rest (activations, dropout, masks, reshapes, pooling, normalisation by batch, gathers):
//     the type of their first float input; Embedding and Gather read fp32 tables; a Cast writes fp32.
// Under fp32 and tf32 nothing is half and nothing is cast.
// Memory: a tensor is stored at its type; a GEMM saves for backward the half copies it cast; masks
// and normalisation statistics keep their own types (bool, fp32). Working gradients and scratch
// stay at half the fp32 bytes (cost/training_setup.h activationScale): an approximation, since
// autocast keeps the gradients of its fp32 tensors (the residual stream, softmax) in fp32.
// Depends on: graph.
#pragma once

#include "graph/graph.h"
#include "graph/op_cost.h"

#include <vector>

namespace ps {

enum class AutocastRule { Lower, Float32, Promote, Follow };

// Which of the rules above `node` follows.
[[nodiscard]] AutocastRule autocastRule(const Graph& graph, const Node& node);

struct AutocastPlan
{
    bool mixed = false; // bf16/fp16 autocast; false: every tensor as the graph types it
    std::vector<bool> half; // per tensor: an fp32 graph tensor stored in half precision
    // Per node, at the graph's micro-batch: bytes read and written by the casts of its inputs.
    std::vector<double> castActivationBytes; // forward, of activations (scale with the micro-batch)
    std::vector<double> castParameterBytes; // forward, of parameters (once per forward)
    std::vector<int> castKernels; // cast kernels in forward
    // Backward casts each cast input's gradient back: the same kernels and bytes again.

    // Bytes per element of `t` relative to its graph dtype: 0.5 for a half tensor, else 1.
    [[nodiscard]] double scale(TensorId t) const
    {
        return half.empty() || !half[t.index()] ? 1.0 : 0.5;
    }
    // What `node` saves of `t` for backward is the half copy it cast for a half-precision GEMM (a
    // storage of its own, half the fp32 bytes), not `t`'s storage.
    [[nodiscard]] bool savesOwnHalfCopy(const Graph& graph, const Node& node, TensorId t) const;
    // Bytes `node` saves for backward relative to the fp32 graph's `cost.savedBytes`: each saved
    // tensor at its type (or its half copy), the internal state (masks, fp32 statistics) as it is.
    [[nodiscard]] double savedBytes(const Graph& graph, const Node& node, const OpCost& cost) const;
};

// The plan for `graph` under mixed precision (`mixed`); without it nothing is half and nothing is
// cast.
[[nodiscard]] AutocastPlan planAutocast(const Graph& graph, bool mixed);

} // namespace ps
