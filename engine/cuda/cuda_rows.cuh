// The CUDA side of engine/row_math.h's row blocking, shared by the row kernels
// (cuda_nn_kernels.cu, cuda_fused_kernels.cu): one warp of kRowLanes lanes per row, kRowsPerBlock
// rows per block, and the butterfly that combines the lanes' partials.
// Depends on: row_math.h; CUDA.
#pragma once

#include "row_math.h"

#include <cstdint>

namespace ps::engine::cuda {

inline constexpr int kRowsPerBlock = 4; // warps per block, one row each
inline constexpr unsigned kFullMask = 0xffffffffU;

__device__ inline float warpSum(float v)
{
    for (int offset = math::kRowLanes / 2; offset > 0; offset /= 2)
        v += __shfl_xor_sync(kFullMask, v, offset);
    return v;
}

__device__ inline float warpMax(float v)
{
    for (int offset = math::kRowLanes / 2; offset > 0; offset /= 2)
        v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
    return v;
}

// The row of this warp (blocks of kRowsPerBlock warps over rowBlocks) and this thread's lane in it.
__device__ inline long long warpRow()
{
    return static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
}
__device__ inline int rowLane()
{
    return static_cast<int>(threadIdx.x);
}

inline dim3 rowBlocks(std::int64_t rows)
{
    return dim3(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
}
inline dim3 rowThreads()
{
    return dim3(math::kRowLanes, kRowsPerBlock);
}

} // namespace ps::engine::cuda
