// Chains of nodes the engine runs as one kernel where the backend has one for them: an attention
// score's Scale -> Mask -> Softmax (either of the first two may be absent; two nodes at least), as
// Megatron-LM's fused scale-mask-softmax runs them. One pass reads the scores and writes the
// probabilities, where three passes read and wrote the scores three times (on an H100, GPT-2
// small's three kernels took 30 of a 215 ms step). Values are the same: the CPU's fused kernel
// gives the separate kernels' bits, the CUDA one the same rows to float rounding (the chain's
// input gradient joins its other readers' at the Softmax's place in backward, not the Scale's: a
// sum in another order where such a reader sits inside the chain's span). Memory is the
// same too: the separate kernels hold an input and an output at each step and the chain's inner
// tensors are read by nothing else, so the memory model's peaks stay right.
// A profile measured through a fused chain times it on its Softmax node (forward and backward);
// its Scale and Mask nodes measure nothing, so a run that keeps the chain apart (a stage cut
// inside it, recomputed probabilities, PS_FUSION=0) is predicted short by their kernels.
//
// A Linear's GEMM and its bias add (MatMul -> BiasAdd, or an Add of a vector over the product's
// last dim) run as one GEMM whose epilogue adds the bias (Backend::gemmBias: cuBLASLt's bias
// epilogue on CUDA; on the CPU the bias is added in place over the GEMM's output). Forward only:
// each node's backward runs as before, from the GEMM's inputs and the add's output, which the fused
// call gives them (an add's backward reads only its inputs' shapes). On the CPU, and on CUDA where
// cuBLASLt runs it (w one matrix), the product before the bias is never stored: one array of the
// output's size where the separate kernels held two for a moment. Its time is measured on the
// MatMul node; the add's forward measures nothing.
// Where the add's output is read by a Gelu alone, the add's next node (an MLP's first Linear), the Gelu joins the chain
// (Backend::forwardGemmBiasGelu): on CUDA one cuBLASLt GEMM whose GELU_AUX_BIAS epilogue writes the
// sum, which the Gelu's backward reads, and the GELU of it (tanh form; the exact form and other
// operands run the GEMM + bias, then the Gelu kernel); elsewhere the Gelu kernel after the fused
// GEMM + bias, the same bits as apart. The two arrays are the ones the separate kernels keep, so
// the memory model's peaks hold; the Gelu's forward time is measured on the MatMul node too, and
// where cuBLASLt writes both arrays the MatMul node owns both in the allocator's attribution
// (elsewhere the GELU's output is the Gelu node's).
// Depends on: core (Graph), backend.h.
#pragma once

#include "backend.h"
#include "graph/graph.h"

#include <cstddef>
#include <span>
#include <vector>

namespace ps::engine {

struct SoftmaxChain
{
    std::size_t head = 0; // first node, whose first input is the chain's input
    std::ptrdiff_t scale = -1; // node indices; -1 where absent
    std::ptrdiff_t mask = -1;
    std::size_t softmax = 0; // last node, whose output is the chain's output
};

struct GemmBiasChain
{
    std::size_t matmul = 0; // MatMul (x, w), whose output only the add reads
    std::size_t add = 0; // BiasAdd or Add, whose output is the chain's
    std::size_t productInput = 0; // the add's input that is the product; the other is the bias
    std::ptrdiff_t gelu = -1; // the Gelu node that alone reads the add's output; -1 where none
};

// Whether the engine fuses chains (the environment's PS_FUSION unset or not "0").
[[nodiscard]] bool fusionEnabled();

class FusionPlan
{
public:
    FusionPlan() = default;
    // The chains among nodes [begin, end) of `graph` that `backend` has a fused kernel for (none
    // when it has not, or when fusion is off). A chain is fused only where each inner tensor has
    // the chain's next node as its one reader and is no graph output, the values are f32, the
    // chain reads no parameter, the Mask's padding input exists before the chain's first node,
    // and no tensor of the chain is in `recomputed` (a recompute re-runs one node from its inputs,
    // which a fused chain never makes; swapped probabilities are fine: they are the same array).
    FusionPlan(const Graph& graph, std::size_t begin, std::size_t end, const Backend& backend,
        std::span<const TensorId> recomputed = {}, bool enabled = true);

    // The chain node `index` belongs to, or nullptr.
    [[nodiscard]] const SoftmaxChain* chainOf(std::size_t index) const;
    [[nodiscard]] const std::vector<SoftmaxChain>& chains() const
    {
        return m_chains;
    }
    // The GEMM + bias chain node `index` belongs to (its MatMul, its add or its Gelu), or nullptr. Chains are
    // planned where the backend has Backend::gemmBias, on f32 tensors, where the product is read by
    // the add alone, and neither it nor the add's output is a graph output or recomputed, and the
    // bias exists before the MatMul runs. The stage executor drops those whose product a backward
    // keeps (dropGemmChain) and runs none with parameter chunks.
    [[nodiscard]] const GemmBiasChain* gemmChainOf(std::size_t index) const;
    [[nodiscard]] const std::vector<GemmBiasChain>& gemmChains() const
    {
        return m_gemmChains;
    }
    // Runs the chain whose MatMul is node `matmul` apart from now on (a caller that keeps the product).
    void dropGemmChain(std::size_t matmul);
    // The Mask's padding input (invalid: none).
    [[nodiscard]] static TensorId paddingOf(const Graph& graph, const SoftmaxChain& chain);
    // The fused kernel's arguments, given the padding input's value (undefined: none).
    [[nodiscard]] static MaskedSoftmaxArgs argsOf(const Graph& graph, const SoftmaxChain& chain, NdArray padding);
    // A GEMM + bias chain's forward on `backend`: the add's output and, where the chain has a Gelu,
    // the Gelu's (undefined otherwise). Both executors run their chains through it.
    [[nodiscard]] static Backend::GemmBiasGeluValues runGemmChain(const Backend& backend, const Graph& graph,
        const GemmBiasChain& chain, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx);

private:
    std::size_t m_begin = 0;
    std::vector<int> m_chainOf; // by index - begin: the chain's position + 1; 0 for none
    std::vector<SoftmaxChain> m_chains;
    std::vector<int> m_gemmChainOf; // by index - begin: the GEMM chain's position + 1; 0 for none
    std::vector<GemmBiasChain> m_gemmChains;

    void planGemmChains(const Graph& graph, std::size_t end, std::span<const TensorId> recomputed);
    void markGemmChain(std::size_t position); // m_gemmChainOf of the chain's nodes
};

} // namespace ps::engine
