// Column reductions of the CUDA kernels: the gradient of a broadcast operand (a bias, the operand
// of a broadcasting Add/Mul/Sub/Div, Expand's input) and LayerNorm's gamma and beta, each a sum
// over the rows of a (rows x cols) view. This header holds the device's blocking and its host
// reference (issue P14's rule for reductions); the CPU tests check the reference against plain
// sums.
//
// Blocking: the rows are cut into `chunks` runs of `rowsPerChunk` consecutive rows. Pass 1 sums
// each run of each column in row order (one GPU thread per chunk and column; neighbouring threads
// take neighbouring columns, so a bias gradient reads coalesced); pass 2 sums a column's chunk
// partials in chunk order. The cut depends on the sizes only, not on the GPU, so every GPU gives
// the same bits. One thread per column summing every row in order (the first CUDA kernels) left a
// GPU of 132 multiprocessors with 768 threads for a GPT-2 bias: 4.5 ms per bias gradient, 216 ms
// of a 569 ms step on an H200, where two passes take microseconds.
// Depends on: kernel_math.h (PS_HOST_DEVICE); no CUDA headers.
#pragma once

#include "kernel_math.h"

#include <cstdint>

namespace ps::engine::math {

struct ColumnChunks
{
    std::int64_t chunks = 0; // 0 when there are no rows
    std::int64_t rowsPerChunk = 1;
};

// About 2^18 threads in pass 1 (enough to fill any current GPU), no run under 16 rows (shorter
// ones cost more in partials than they save) and at most 1024 chunks (pass 2 stays short).
PS_HOST_DEVICE inline ColumnChunks columnChunks(std::int64_t rows, std::int64_t cols)
{
    constexpr std::int64_t kThreadsWanted = std::int64_t { 1 } << 18;
    constexpr std::int64_t kMinRows = 16;
    constexpr std::int64_t kMaxChunks = 1024;
    ColumnChunks k;
    if (rows <= 0 || cols <= 0)
        return k;
    std::int64_t wanted = (kThreadsWanted + cols - 1) / cols;
    wanted = wanted < kMaxChunks ? wanted : kMaxChunks;
    k.rowsPerChunk = (rows + wanted - 1) / wanted;
    k.rowsPerChunk = k.rowsPerChunk > kMinRows ? k.rowsPerChunk : kMinRows;
    k.chunks = (rows + k.rowsPerChunk - 1) / k.rowsPerChunk;
    return k;
}

// Pass 1 for one (chunk, column): value(row, col) summed over the chunk's rows in order.
template <typename Value>
PS_HOST_DEVICE float chunkPartial(
    const Value& value, std::int64_t rows, std::int64_t col, std::int64_t chunk, const ColumnChunks& k)
{
    const std::int64_t first = chunk * k.rowsPerChunk;
    const std::int64_t end = first + k.rowsPerChunk < rows ? first + k.rowsPerChunk : rows;
    float s = 0.0F;
    for (std::int64_t r = first; r < end; ++r)
        s += value(r, col);
    return s;
}

// Pass 2 for one column: partials laid out [chunk][col], summed in chunk order.
PS_HOST_DEVICE inline float sumChunkPartials(
    const float* partials, std::int64_t cols, std::int64_t col, std::int64_t chunks)
{
    float s = 0.0F;
    for (std::int64_t c = 0; c < chunks; ++c)
        s += partials[c * cols + col];
    return s;
}

// The host reference of both passes: column col of value summed in the device's order.
template <typename Value>
float chunkedColumnSum(const Value& value, std::int64_t rows, std::int64_t cols, std::int64_t col)
{
    const auto k = columnChunks(rows, cols);
    float s = 0.0F;
    for (std::int64_t c = 0; c < k.chunks; ++c)
        s += chunkPartial(value, rows, col, c, k);
    return s;
}

} // namespace ps::engine::math
