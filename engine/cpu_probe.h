// Measures this machine's CPU as a catalog device, with the engine's own code: the vector peak of
// its element-wise loops, the rate of its GEMMs (one pinned team, cpu/gemm_team.h) as the fraction
// of that peak GEMMs reach, the bandwidth of a streaming element-wise kernel within the device's
// share of the caches and beyond them, and the physical memory.
// Depends on: core (DeviceSpec); no Qt, no CUDA.
#pragma once

#include "cluster/device_catalog.h"

#include <cstdint>
#include <string>

namespace ps::engine {

// This machine's data caches, from sysfs (CPU 0's): each core's part of level 2 (divided among the
// CPUs that share it), and the shared last level with how many CPUs share one (0: not reported).
struct CpuCaches
{
    std::int64_t privateBytes = 0;
    std::int64_t sharedBytes = 0;
    int sharedBy = 0;
};
inline constexpr const char* kCpuCacheDirectory = "/sys/devices/system/cpu/cpu0/cache";
[[nodiscard]] CpuCaches readCpuCaches(const std::string& cacheDirectory = kCpuCacheDirectory);

// About 0.3 s of measurement. `threads` 0 uses every core this process may use: a device of that
// many threads, each pinned to its own core (more threads than cores share them), its cache share
// that many cores' worth.
[[nodiscard]] DeviceSpec measureCpuDevice(int threads = 0);

} // namespace ps::engine
