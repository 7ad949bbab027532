// cuda_probe.h for builds without the CUDA toolkit (PS_WITH_CUDA=OFF or no nvcc).
#include "cuda/cuda_probe.h"

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

} // namespace ps::engine::cuda
