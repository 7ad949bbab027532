// Measures this machine's CPU as a catalog device, with the engine's own code: the vector peak of
// its element-wise loops, the rate of its GEMMs (one pinned team, cpu/gemm_team.h) as the fraction
// of that peak GEMMs reach, the bandwidth of a streaming element-wise kernel within the device's
// share of the caches and beyond them, and the physical memory.
// Depends on: core (DeviceSpec); no Qt, no CUDA.
#pragma once

#include "cluster/device_catalog.h"

#include <cstdint>

namespace ps::engine {

// This machine's data caches, from sysfs (CPU 0's): the per-core level 2, and the shared last level
// with how many CPUs share one.
struct CpuCaches
{
    std::int64_t privateBytes = 0;
    std::int64_t sharedBytes = 0;
    int sharedBy = 1;
};
[[nodiscard]] CpuCaches readCpuCaches();

// About 0.3 s of measurement. `threads` 0 uses every hardware thread: a device of that many
// threads, each pinned to its own core, its cache share `threads` cores' worth.
[[nodiscard]] DeviceSpec measureCpuDevice(int threads = 0);

} // namespace ps::engine
