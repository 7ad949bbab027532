// CUDA runtime implementation of cuda_probe.h (built when PS_HAVE_CUDA). cudart is linked
// statically, so a machine without a driver starts fine and reports why there is no GPU.
#include "cuda/cuda_probe.h"

#include <cuda_runtime.h>

#include <cmath>
#include <dlfcn.h>
#include <vector>

namespace ps::engine::cuda {
namespace {

    std::string describe(cudaError_t err)
    {
        return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    }

    __global__ void saxpy(int n, float a, const float* x, float* y)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n)
            y[i] = a * x[i] + y[i];
    }

    // Device buffers released on every path.
    struct DeviceBuffer
    {
        float* ptr = nullptr;
        ~DeviceBuffer()
        {
            cudaFree(ptr);
        }
    };

} // namespace

GpuProbe probeGpus()
{
    GpuProbe probe;
    probe.built = true;
    // Without a driver the runtime says "driver version is insufficient", which misleads a user who
    // has none at all: look for the driver library first (docs: GPU.md).
    if (void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL); driver == nullptr) {
        probe.status = "no NVIDIA driver (libcuda.so.1 not found)";
        return probe;
    } else {
        ::dlclose(driver);
    }
    int count = 0;
    const auto err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        probe.status = "no usable GPU (" + describe(err) + ")";
        return probe;
    }
    for (int i = 0; i < count; ++i) {
        cudaDeviceProp prop {};
        if (const auto e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
            // Kept in its place: list positions are CUDA ordinals (cuda:N).
            probe.devices.push_back(
                { "GPU " + std::to_string(i) + " (properties unreadable: " + describe(e) + ")", 0, 0, 0, 0 });
            continue;
        }
        probe.devices.push_back({ prop.name, static_cast<std::int64_t>(prop.totalGlobalMem), prop.multiProcessorCount,
            prop.major, prop.minor });
    }
    probe.status = std::to_string(probe.devices.size()) + " GPU(s)";
    return probe;
}

std::optional<KernelCheck> selectDevice(int device)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count)
        return KernelCheck { false, false, "no CUDA device " + std::to_string(device) };
    if (const auto err = cudaSetDevice(device); err != cudaSuccess)
        return KernelCheck { true, false, describe(err) };
    return std::nullopt;
}

KernelCheck runSaxpySelfTest(int device)
{
    if (auto failed = selectDevice(device))
        return *failed;
    constexpr int n = 1 << 20;
    std::vector<float> x(n), y(n);
    for (int i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i % 97) * 0.5f;
        y[i] = static_cast<float>(i % 13);
    }
    DeviceBuffer dx, dy;
    cudaError_t err = cudaMalloc(&dx.ptr, n * sizeof(float));
    if (err == cudaSuccess)
        err = cudaMalloc(&dy.ptr, n * sizeof(float));
    if (err == cudaSuccess)
        err = cudaMemcpy(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    if (err == cudaSuccess)
        err = cudaMemcpy(dy.ptr, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    if (err == cudaSuccess) {
        saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx.ptr, dy.ptr);
        err = cudaGetLastError();
    }
    std::vector<float> result(n);
    if (err == cudaSuccess)
        err = cudaMemcpy(result.data(), dy.ptr, n * sizeof(float), cudaMemcpyDeviceToHost);
    if (err != cudaSuccess)
        return { true, false, describe(err) };
    for (int i = 0; i < n; ++i) {
        if (std::fabs(result[i] - (2.0f * x[i] + y[i])) > 1e-5f)
            return { true, false, "saxpy mismatch at element " + std::to_string(i) };
    }
    return { true, true, "saxpy on 1M elements matches the CPU" };
}

} // namespace ps::engine::cuda
