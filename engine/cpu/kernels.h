// CPU kernels of the IR's ops as autograd functions: forward computes a node's outputs and keeps
// what its backward needs; backward turns output gradients into input gradients.
//
// fp32 throughout (int64 for ids and labels); GEMMs through OpenBLAS. Every op of the zoo and of
// the ONNX fixtures (transformers, ResNet, ViT) is implemented; Opaque is not.
// Depends on: core (Node, OpType), cpu/ndarray.h, OpenBLAS; no Qt, no CUDA.
#pragma once

#include "cpu/ndarray.h"
#include "graph/graph.h"

#include <random>
#include <vector>

namespace ps::engine {

struct KernelContext
{
    Allocator& allocator;
    std::mt19937_64& rng; // dropout masks
    bool training = true; // dropout active, batch norm on batch statistics
};

// One node's values for one micro-batch: inputs and outputs, and what forward saved besides them
// (dropout mask, normalization statistics, softmax probabilities, pooling indices).
struct NodeValues
{
    std::vector<NdArray> in;
    std::vector<NdArray> out;
    std::vector<NdArray> saved;
};

[[nodiscard]] bool isSupportedOnCpu(OpType op);

// Fills values.out (and values.saved). Throws ps::Error naming the node on bad input (an id out of
// the table's range, an op the engine does not implement).
void runForward(const Node& node, NodeValues& values, KernelContext& ctx);

// gradOut has one entry per output (undefined: zero). Returns one gradient per input, defined
// where needGrad is true.
[[nodiscard]] std::vector<NdArray> runBackward(const Node& node, const NodeValues& values,
    const std::vector<NdArray>& gradOut, const std::vector<bool>& needGrad, KernelContext& ctx);

// Sets the BLAS thread count (0: leave OpenBLAS's default).
void setComputeThreads(int threads);

} // namespace ps::engine
