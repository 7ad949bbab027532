// cuda_probe.h for builds without the CUDA toolkit (PS_WITH_CUDA=OFF or no nvcc).
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "util/error.h"

namespace ps::engine::cuda {

GpuProbe probeGpus()
{
    return { false, "built without CUDA (reconfigure with PS_WITH_CUDA=ON on a machine with nvcc)", {} };
}

KernelCheck runSaxpySelfTest(int /*device*/)
{
    return { false, false, "built without CUDA" };
}

KernelCheck runElementwiseSelfTest(int /*device*/)
{
    return { false, false, "built without CUDA" };
}

const Backend& cudaBackend(int device)
{
    throw Error("cuda:" + std::to_string(device)
        + ": this build has no CUDA backend (reconfigure with PS_WITH_CUDA=ON on a machine with nvcc)");
}

std::uint64_t gemmBiasEpilogueCalls()
{
    return 0;
}

std::uint64_t gemmBiasGeluEpilogueCalls()
{
    return 0;
}

std::vector<OpType> cudaKernelOps()
{
    return {};
}

} // namespace ps::engine::cuda
