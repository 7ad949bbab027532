// Measures this machine's CPU as a catalog device: peak fp32 FLOP/s of a register-blocked FMA
// loop on every thread, memory bandwidth of a large copy, and the physical memory.
// Depends on: core (DeviceSpec); no Qt, no CUDA.
#pragma once

#include "cluster/device_catalog.h"

namespace ps::engine {

// About 0.2 s of measurement. `threads` 0 uses every hardware thread.
[[nodiscard]] DeviceSpec measureCpuDevice(int threads = 0);

} // namespace ps::engine
