// Internal to the engine: the CUDA runtime calls behind local_devices.h. Declared without CUDA
// types so the rest of the engine compiles the same with or without the toolkit.
#pragma once

#include <cstdint>
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

} // namespace ps::engine::cuda
