// The engine's own single-precision GEMM for CPUs with AVX-512: packed panels of op(B) (32 columns),
// op(A) read in place 12 rows at a time (packing it cost as much as the multiply-adds of a head-sized
// 128 x 32 x 128 product), and a 12 x 32 register-blocked micro-kernel (24 accumulators, two FMAs per
// broadcast), blocked for the caches as BLIS and OpenBLAS are (Goto and van de Geijn, "Anatomy of
// High-Performance Matrix Multiplication", 2008). It exists because the OpenBLAS a process loads
// may run narrower kernels than its CPU: Debian 12's 0.3.21 does not know recent CPUs, and an
// OPENBLAS_CORETYPE set in the environment pins its kernels for the whole process (AVX2's Haswell
// kernels on an AVX-512 CPU reach at most half the CPU's multiply-add rate).
// Depends on: nothing of the engine; the compiler's x86 intrinsics (other CPUs: never available).
#pragma once

#include <cstdint>
#include <string_view>

namespace ps::engine {

// True where this CPU and its OS run AVX-512F (x86-64 only).
[[nodiscard]] bool packedGemmAvailable();

// Row-major C = alpha op(A) op(B) + beta C, as cblas_sgemm(CblasRowMajor, ...) (beta 0: C is
// written, never read; alpha 0: C = beta C, A and B not read). Single-threaded; only where packedGemmAvailable(). Each
// element of C sums its products in k order within blocks of 256, so a row's (or a column's) result does not depend on
// how a product is split into rows or columns.
void packedSgemm(bool transA, bool transB, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
    std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// Which GEMM the engine's CPU kernels run: "packed" (packedSgemm, for products of at least 4 rows
// and 8 columns; engine::sgemm decides once per product) or "openblas". Packed where it is
// available and OpenBLAS runs narrower than AVX-512 kernels; PS_CPU_GEMM=openblas|packed overrides
// (packed only where available). Each GEMM thread keeps a 1 MiB packing buffer, outside the
// device allocators' accounting (as OpenBLAS's own buffers are).
[[nodiscard]] std::string_view cpuGemmKernels();

} // namespace ps::engine
