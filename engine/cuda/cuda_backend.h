// The CUDA backend (issue P14): buffers in a GPU's memory (cudaMalloc behind the accounted
// allocator's cache), ops through its own kernel table (engine/cuda/cuda_*kernels.cu, whose
// per-element and per-row math is engine/kernel_math.h and engine/row_math.h, shared with the CPU
// backend and its tests), GEMMs through cuBLAS reached by the dlopen loader (cuda_libraries.h).
// Declared without CUDA types: builds without the toolkit get the refusal below.
// Depends on: backend.h.
#pragma once

#include "backend.h"

#include <cstdint>
#include <vector>

namespace ps::engine::cuda {

// The backend of GPU `device` (made once per device). Throws ps::Error saying why a GPU cannot be
// used: a build without CUDA, no NVIDIA driver, no such device.
[[nodiscard]] const Backend& cudaBackend(int device);

// The ops the CUDA backend has kernels for (empty in a build without CUDA); needs no GPU.
[[nodiscard]] std::vector<OpType> cudaKernelOps();

// GEMM + bias calls that ran through cuBLASLt's bias epilogue in this process (0 without CUDA):
// the GPU self-test checks the epilogue ran, not the fallback.
[[nodiscard]] std::uint64_t gemmBiasEpilogueCalls();
// Those that ran through its GELU_AUX_BIAS epilogue (MatMul + bias + tanh Gelu chains).
[[nodiscard]] std::uint64_t gemmBiasGeluEpilogueCalls();

} // namespace ps::engine::cuda
