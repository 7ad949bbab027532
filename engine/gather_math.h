// Index math of GatherElements and GatherND, shared by the CPU kernels (cpu/kernels_gather.cpp) and
// the CUDA ones (cuda/cuda_gather_kernels.cu): which data element or slice an output element reads,
// each function __host__ __device__ under nvcc (kernel_math.h's PS_HOST_DEVICE), so the CPU tests
// cover the arithmetic the GPU runs. Shapes travel in fixed arrays of kMaxGatherRank dims.
// Depends on: kernel_math.h (PS_HOST_DEVICE).
#pragma once

#include "kernel_math.h"

#include <cstdint>

namespace ps::engine::math {

inline constexpr int kMaxGatherRank = 8;

// A raw index counted from the end when negative; -1 when outside [0, length).
PS_HOST_DEVICE inline long long checkedPosition(long long raw, long long length)
{
    const long long i = raw < 0 ? raw + length : raw;
    return i < 0 || i >= length ? -1 : i;
}

// GatherElements: out (the indices' shape) [i0..ik] = data[i0.., indices[i0..ik] on `axis`, ..ik].
struct ElementGather
{
    int rank = 0;
    int axis = 0;
    long long indexDims[kMaxGatherRank] = {}; // the indices' (and output's) shape
    long long dataStrides[kMaxGatherRank] = {}; // row-major strides of the data
    long long axisLength = 0; // data's length along axis
};

// The data offset output element `e` reads, its index `position` (checkedPosition) put on the axis.
PS_HOST_DEVICE inline long long elementGatherOffset(const ElementGather& g, long long e, long long position)
{
    long long offset = 0;
    for (int d = g.rank - 1; d >= 0; --d) {
        const long long coordinate = e % g.indexDims[d];
        e /= g.indexDims[d];
        offset += (d == g.axis ? position : coordinate) * g.dataStrides[d];
    }
    return offset;
}

// GatherND with b batch axes: data (B..., S1..Sr, inner...), indices (B..., rows..., r); output row
// `row` (over batches x rows) reads the slice data[batch][i1..ir] of `inner` elements.
struct NdGather
{
    int depth = 0; // r
    long long sliceDims[kMaxGatherRank] = {}; // S1..Sr
    long long rowsPerBatch = 1;
    long long slicesPerBatch = 1; // S1 * .. * Sr
};

// The slice index (data offset / inner) of output row `row` whose index tuple is `tuple`; -1 when
// one of its indices is out of range (`*badAxis` then says which of the r).
PS_HOST_DEVICE inline long long ndGatherSlice(const NdGather& g, long long row, const std::int64_t* tuple, int* badAxis)
{
    long long slice = 0;
    for (int j = 0; j < g.depth; ++j) {
        const long long i = checkedPosition(tuple[j], g.sliceDims[j]);
        if (i < 0) {
            *badAxis = j;
            return -1;
        }
        slice = slice * g.sliceDims[j] + i;
    }
    return (row / g.rowsPerBatch) * g.slicesPerBatch + slice;
}

} // namespace ps::engine::math
