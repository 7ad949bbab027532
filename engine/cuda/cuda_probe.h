// Internal to the engine: the CUDA runtime calls behind local_devices.h. Declared without CUDA
// types so the rest of the engine compiles the same with or without the toolkit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ps::engine::cuda {

struct GpuInfo
{
    std::string name;
    std::int64_t memoryBytes = 0;
    int multiprocessors = 0;
    int major = 0;
    int minor = 0;
};

struct GpuProbe
{
    bool built = false;
    std::string status;
    std::vector<GpuInfo> devices;
};

GpuProbe probeGpus();

struct KernelCheck
{
    bool ran = false;
    bool passed = false;
    std::string message;
};

KernelCheck runSaxpySelfTest(int device);
// Makes `device` current for a self-test; the failed check when it cannot be (CUDA builds only).
std::optional<KernelCheck> selectDevice(int device);
// GELU (tanh and erf) forward and backward and an AdamW step over a range of inputs on `device`,
// against the same engine/kernel_math.h functions evaluated on the host.
KernelCheck runElementwiseSelfTest(int device);

} // namespace ps::engine::cuda
