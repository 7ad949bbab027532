#include "profiler_backends.h"

#include "local_devices.h"

#include <chrono>
#include <cstdint>
#include <dlfcn.h>

namespace ps::profiler {
namespace {

    BackendInfo cpuTimers()
    {
        using Clock = std::chrono::steady_clock;
        const double tickNs = 1e9 * static_cast<double>(Clock::period::num) / static_cast<double>(Clock::period::den);
        return { "cpu-timers", true, "steady_clock, " + std::to_string(tickNs) + " ns resolution" };
    }

    // cuptiGetVersion(uint32_t*) is part of CUPTI's stable C API; resolved at run time.
    BackendInfo cupti()
    {
        BackendInfo info { "cupti", false, "" };
        void* lib = nullptr;
        for (const char* name : { "libcupti.so.13", "libcupti.so.12", "libcupti.so" }) {
            lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
            if (lib)
                break;
        }
        if (!lib) {
            info.detail = "libcupti not found (install the CUDA toolkit's CUPTI)";
            return info;
        }
        using GetVersion = int (*)(std::uint32_t*);
        auto* getVersion = reinterpret_cast<GetVersion>(::dlsym(lib, "cuptiGetVersion"));
        std::uint32_t version = 0;
        const bool ok = getVersion && getVersion(&version) == 0;
        const auto devices = engine::probeLocalDevices();
        const bool hasGpu = devices.devices.size() > 1;
        info.available = ok && hasGpu;
        info.detail = (ok ? "CUPTI API " + std::to_string(version) : std::string("cuptiGetVersion failed"))
            + (hasGpu ? "" : "; no GPU: " + devices.cudaStatus);
        return info;
    }

} // namespace

std::vector<BackendInfo> availableBackends()
{
    return { cpuTimers(), cupti() };
}

} // namespace ps::profiler
