// CPU kernels of the IR's ops as autograd functions: forward computes a node's outputs and keeps
// what its backward needs; backward turns output gradients into input gradients. They run through
// the CPU backend's kernel table (cpu/cpu_backend.h, cpuBackend().forward/backward).
//
// fp32 throughout (int64 for ids and labels); GEMMs through OpenBLAS. Every op of the zoo and of
// the ONNX fixtures (transformers, ResNet, ViT) is implemented; Opaque is not.
// Depends on: core (Node, OpType), backend.h, OpenBLAS; no Qt, no CUDA.
#pragma once

#include "backend.h"

namespace ps::engine {

// Sets the BLAS thread count (0: leave OpenBLAS's default).
void setComputeThreads(int threads);

} // namespace ps::engine
