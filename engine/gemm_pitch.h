// The row pitch at which the CUDA backend's GEMMs read and write a row-major matrix of `rows` x
// `cols` elements (cuda/cuda_matmul_kernels.cu). cuBLAS picks kernels by the alignment of every
// operand's leading dimension: where a row of `cols` fp32 or bf16 elements does not end on a
// 16-byte boundary (cols not a multiple of 8, as GPT-2's 50257-token vocabulary), it falls back to
// alignment-1 kernels (on an H100, 125-129 TFLOP/s for GPT-2 small's LM head in every precision,
// where its other GEMMs ran at 512-751 TFLOP/s in bf16). Such a matrix is copied to (or written at) a
// pitch of cols rounded up to 8 when it is large enough for the copy to cost less than the slow
// kernel would; the padding elements are never read by the GEMM. Host-only: the rule is tested on
// the CPU.
#pragma once

#include <cstdint>

namespace ps::engine {

inline constexpr std::int64_t kGemmPitchElements = 8; // 16 bytes of bf16; a multiple of 4 fp32s
inline constexpr std::int64_t kGemmPitchMinElements = std::int64_t { 1 } << 20; // smaller: as stored

// The pitch for a rows x cols matrix: cols, or cols rounded up to kGemmPitchElements where `enabled`,
// cols is not a multiple of it and the matrix holds at least kGemmPitchMinElements elements.
[[nodiscard]] inline std::int64_t gemmRowPitch(std::int64_t rows, std::int64_t cols, bool enabled)
{
    if (!enabled || cols % kGemmPitchElements == 0 || rows * cols < kGemmPitchMinElements)
        return cols;
    return (cols + kGemmPitchElements - 1) / kGemmPitchElements * kGemmPitchElements;
}

} // namespace ps::engine
