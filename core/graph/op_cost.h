// Per-op analytical formulas: FLOPs, bytes moved, output bytes, bytes saved for backward and
// parameters owned, computed from the shapes in the graph.
//
// These are the ground truth the analytical profile (cost model) and the memory model build on.
// Saved-for-backward follows what PyTorch autograd keeps (llm.c's per-layer table agrees): a
// matmul keeps both operands, layernorm its input plus mean/rstd, softmax its output, GELU its
// input, dropout a one-byte mask, residual adds and layout changes nothing.
// Depends on: graph/graph.h only.
#pragma once

#include "graph/graph.h"

#include <cstdint>
#include <string_view>
#include <vector>

namespace ps {

struct OpCost
{
    double forwardFlops = 0;
    double backwardFlops = 0; // input gradients + weight gradients
    double weightGradFlops = 0; // the part of backwardFlops computing parameter gradients (ZB's W)
    std::int64_t bytesRead = 0; // forward pass, inputs incl. parameters
    std::int64_t bytesWritten = 0; // forward pass; 0 for views
    std::int64_t outputBytes = 0; // activation bytes produced; 0 for views
    std::vector<TensorId> savedTensors; // activations this node keeps for backward
    // The subset the weight gradient reads (a split backward keeps it until W): a matmul's
    // activation operand (only W reads it), a norm's input (B and W read it).
    std::vector<TensorId> savedForWeightGrad;
    std::int64_t savedExtraBytes = 0; // internal state kept for backward (masks, mean/rstd, probs)
    std::int64_t savedBytes = 0; // bytes of savedTensors + savedExtraBytes
    std::int64_t workspaceBytes = 0; // transient scratch during the op
    // Transient scratch of the backward beyond the input gradients it makes, growing with the
    // micro-batch (fused attention's recomputed probabilities and their gradients).
    std::int64_t backwardWorkspaceBytes = 0;
    // Scratch that does not grow with the micro-batch: a convolution's im2col column matrix of one
    // image, which the engine's CPU kernels fill image by image: in the forward one, in the
    // backward the input's columns for the weight gradient and the columns' gradient for the
    // input's. Counted for profiles of the CPU device only (cpuEngineScratch): on GPUs cuDNN's
    // workspace (or the engine's chunked columns) is not modelled. The largest of a node's passes,
    // then the input-gradient pass alone (zero-bubble's B) and the weight-gradient pass (its W).
    std::int64_t fixedWorkspaceBytes = 0;
    std::int64_t fixedInputGradWorkspaceBytes = 0;
    std::int64_t fixedWeightGradWorkspaceBytes = 0;
    std::int64_t parameterCount = 0; // elements of the parameters this node owns
    std::int64_t parameterBytes = 0;
};

// Whether a profile's device runs the engine's CPU kernels, whose convolutions hold
// OpCost::fixedWorkspaceBytes of columns (the CPU device, "cpu").
[[nodiscard]] inline bool cpuEngineScratch(std::string_view deviceKind)
{
    return deviceKind == "cpu";
}

// Which tensors need a gradient: parameters and every activation computed from one.
[[nodiscard]] std::vector<bool> tensorsRequiringGrad(const Graph& graph);

// Cost of every node, indexed by node id.
[[nodiscard]] std::vector<OpCost> computeOpCosts(const Graph& graph);

// The tensor whose storage `id` aliases (follows Reshape/Split/Slice views to their source).
[[nodiscard]] TensorId storageRoot(const Graph& graph, TensorId id);

// Activation bytes alive for backward for the whole graph: each storage counted once even when
// several nodes save it, plus every node's internal state. One micro-batch.
[[nodiscard]] std::int64_t savedActivationBytes(const Graph& graph, const std::vector<OpCost>& costs);

// Peak bytes a backward of nodes [begin, end) holds, for one micro-batch, beyond the saved
// activations it started with: the activation gradients alive (the gradients received for the
// range's outputs, each node's input gradients, and its parameter gradients until they are
// accumulated, while its output gradients are still held; the out-of-place sum where a value has
// several readers; Reshape's gradient is a view), less the saved activations already released
// (a saved storage goes once the backward of the first node in the range that saves it is done,
// as the engine releases them). The workspace of the memory model; never negative.
[[nodiscard]] std::int64_t backwardWorkingBytes(const Graph& graph, std::size_t begin, std::size_t end);

// What backwardWorkingBytes reads of the whole graph, computed once for the many ranges a planner
// evaluates: which tensors need a gradient and the last node reading each.
struct GradientFlow
{
    std::vector<bool> requiresGrad; // by tensor
    std::vector<std::size_t> lastReader; // by tensor: node index + 1, 0 when nothing reads it
    std::vector<std::uint32_t> readers; // by tensor: how many node inputs read it
    std::vector<std::vector<TensorId>> savedRoots; // by node: storages of op_cost's saved tensors
    std::vector<std::vector<TensorId>> weightGradRoots; // by node: storages of savedForWeightGrad
    std::vector<std::int64_t> savedExtraBytes; // by node: op_cost's internal saved state
    std::vector<char> trains; // by node: reads a parameter that needs a gradient
    std::vector<std::int64_t> bytes; // by tensor: numBytes of its shape and type
    std::vector<char> parameter; // by tensor: a parameter
    // By node: bit i set where input i's gradient can be the output's own storage (Add, BiasAdd and
    // Sub's first operand of the output's shape; Reshape's view).
    std::vector<std::uint32_t> passesGradient;
    std::vector<std::int64_t> backwardScratch; // by node: OpCost::backwardWorkspaceBytes
    std::vector<std::int64_t> fixedScratch; // by node: OpCost::fixedWorkspaceBytes
    std::vector<std::int64_t> fixedInputGradScratch; // by node: OpCost::fixedInputGradWorkspaceBytes
    // By node: what a split backward's W holds at once: the new gradients of its trainable
    // parameters (before they are accumulated) and, with cpuEngineScratch, its columns.
    std::vector<std::int64_t> weightPassBytes;
    std::vector<std::int64_t> weightPassScratch;
};

// A whole backward, or zero-bubble's input-gradient pass B (its W runs later): B computes no
// parameter gradients and keeps what W reads (their inputs, norm state and output gradients).
enum class BackwardPass : std::uint8_t { Full, InputOnly };
[[nodiscard]] GradientFlow gradientFlow(const Graph& graph);

// Bytes of output gradients a split backward holds from B to W for nodes [begin, end), one
// micro-batch: W of a node with trainable parameters reads its output's gradient. Gradients that
// share a storage are counted once: an Add/BiasAdd/Sub passes its output gradient on to a
// same-shaped input read only there, and Reshape's is a view.
[[nodiscard]] std::int64_t weightGradHeldBytes(
    const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end);
[[nodiscard]] std::int64_t backwardWorkingBytes(const Graph& graph, const GradientFlow& flow, std::size_t begin,
    std::size_t end, BackwardPass pass = BackwardPass::Full);

// A backward's working set where some nodes also hold bytes that do not grow with the
// micro-batch: a CPU convolution's columns (OpCost::fixedWorkspaceBytes) and, in the first
// backward after an optimizer step, the parameters' gradients allocated so far. `bytes` is its
// peak without those at the graph's micro-batch; each point is a node's working bytes (negative
// where the saved activations already released outweigh the gradients held) with its fixed bytes:
// a node with columns, its columns and the gradients so far (`withScratch`, counted on the CPU
// device only), and the gradients so far (`withoutScratch`, counted everywhere). Points another
// one outdoes at every micro-batch size are dropped.
struct WorkingProfile
{
    struct Point
    {
        std::int64_t working = 0;
        std::int64_t fixed = 0;
    };
    std::int64_t bytes = 0;
    std::vector<Point> withScratch;
    std::vector<Point> withoutScratch;

    // The peak at `scale` times the graph's micro-batch, with the columns where `scratch` (the
    // engine's CPU kernels; cpuEngineScratch). Never negative.
    [[nodiscard]] double peak(double scale, bool scratch) const;
};
// backwardWorkingBytes as a profile (its `bytes`); with `growingGradients`, the first backward's,
// whose parameter gradients are allocated node by node (a full backward only).
[[nodiscard]] WorkingProfile backwardWorkingProfile(const Graph& graph, const GradientFlow& flow, std::size_t begin,
    std::size_t end, BackwardPass pass = BackwardPass::Full, bool growingGradients = false);

// The most a split backward's W pass over [begin, end) holds beyond what the B before it kept:
// one node's new parameter gradients, with its columns where `scratch`. Batch-independent.
[[nodiscard]] std::int64_t weightPassWorkingBytes(
    const GradientFlow& flow, std::size_t begin, std::size_t end, bool scratch);

// The same as W runs: its nodes last first, each node's new parameter gradients (`fixed`, with its
// columns in `withScratch`) beside what W still keeps of the B before it, less what the nodes run
// before it freed (a weight-gradient input or a held output gradient goes once its last reader in
// W is done; a norm's internal state with its node): `working` is minus those freed bytes, at the
// graph's micro-batch. Its `bytes` is 0; peak(scale, scratch) is W's most above what B kept.
[[nodiscard]] WorkingProfile weightPassProfile(
    const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end);

// For each node of [begin, end) (index i for node begin + i): bytes of the range's kept state
// (its saved storages produced in the range, each once, and the nodes' internal state) that do
// not exist yet while that node's forward runs, one micro-batch at the graph's batch. A node's
// forward scratch comes on top of the activations kept so far, the whole micro-batch's less these.
[[nodiscard]] std::vector<std::int64_t> forwardPendingKept(
    const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end);

} // namespace ps
