// The devices this machine can train on: the CPU (always) and CUDA GPUs (when the build has the
// CUDA backend and a driver is present).
//
// Owns: device discovery and a CUDA self-test kernel. CUDA headers stay inside engine/cuda/*.
// Depends on: core (ids) only at the API; no Qt.
#pragma once

#include "ids.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ps::engine {

struct LocalDevice
{
    DeviceId id;
    std::string kind; // "cpu" or "cuda"
    std::string name; // "AMD EPYC 7B13", "NVIDIA H100 80GB HBM3"
    std::int64_t memoryBytes = 0;
    int computeUnits = 0; // CPU threads or CUDA SMs
    std::string detail; // "sm_90", "2 threads"
};

struct LocalDeviceReport
{
    std::vector<LocalDevice> devices; // CPU first, then GPUs in CUDA order
    bool cudaBuilt = false;
    std::string cudaStatus; // "1 GPU(s)", "no NVIDIA driver (libcuda.so.1 not found)", "built without CUDA"
};

[[nodiscard]] LocalDeviceReport probeLocalDevices();

struct SelfTestResult
{
    bool ran = false; // false when there is no GPU to run on
    bool passed = false;
    std::string message;
};

// The catalog entry local GPU `gpu` (CUDA ordinal) is, from its name and memory
// (DeviceCatalog::matchGpu); "" when none fits. Throws ps::Error saying why when there is no such
// GPU (no driver, a build without CUDA, too few GPUs).
[[nodiscard]] std::string localGpuCatalogId(int gpu);
// The catalog device a run on `devices` (train --devices) is: "cpu" for CPU devices, the entry
// its GPU matches ("" when none does: planned and predicted as this CPU's devices would be).
[[nodiscard]] std::string runDeviceKind(const std::string& devices);

// Runs a saxpy kernel, then the GELU and AdamW kernels over engine/kernel_math.h, on GPU `device`
// and checks them against the CPU result.
[[nodiscard]] SelfTestResult cudaSelfTest(int device);

} // namespace ps::engine
