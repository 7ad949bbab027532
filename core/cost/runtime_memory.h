// What a PyTorch process holds on a GPU besides its tensors, and the caching allocator's rounding
// and fragmentation, measured on an H100 with PyTorch 2.11 and CUDA 13 (`tests/gpu/torch_on_gpu.py
// memory`, tests/data/measured/h100_torch_memory.json): 0.72 GB of CUDA context and cuBLAS handle;
// 1.03-1.05x reserved over allocated while training GPT-2 medium. Planners that decide what fits a
// GPU (the chunk replay, the cluster scale model) give tensors only what is left.
// Depends on: nothing.
#pragma once

namespace ps {

// The measured margins (the defaults) and what they leave of a device's memory for tensors.
struct RuntimeMemory
{
    double contextBytes = 0.72e9; // CUDA context and cuBLAS handle
    double allocatorOverhead = 1.05; // reserved over allocated

    [[nodiscard]] double usableBytes(double deviceBytes) const
    {
        return (deviceBytes - contextBytes) / allocatorOverhead;
    }
};

} // namespace ps
