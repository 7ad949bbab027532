#include "local_devices.h"

#include "cluster/device_catalog.h"
#include "cuda/cuda_probe.h"
#include "runtime/training_run.h"
#include "util/error.h"

#include <fstream>
#include <thread>
#include <unistd.h>

namespace ps::engine {
namespace {

    std::string cpuModelName()
    {
        std::ifstream in("/proc/cpuinfo");
        std::string line;
        while (std::getline(in, line)) {
            if (line.rfind("model name", 0) == 0) {
                const auto colon = line.find(':');
                if (colon != std::string::npos)
                    return line.substr(line.find_first_not_of(' ', colon + 1));
            }
        }
        return "CPU";
    }

    LocalDevice hostCpu()
    {
        LocalDevice cpu;
        cpu.id = DeviceId(0);
        cpu.kind = "cpu";
        cpu.name = cpuModelName();
        cpu.memoryBytes = static_cast<std::int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
        cpu.computeUnits = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
        cpu.detail = std::to_string(cpu.computeUnits) + " threads";
        return cpu;
    }

} // namespace

LocalDeviceReport probeLocalDevices()
{
    LocalDeviceReport report;
    report.devices.push_back(hostCpu());
    const auto gpus = cuda::probeGpus();
    report.cudaBuilt = gpus.built;
    report.cudaStatus = gpus.status;
    for (const auto& g : gpus.devices) {
        LocalDevice d;
        d.id = DeviceId(static_cast<std::uint32_t>(report.devices.size()));
        d.kind = "cuda";
        d.name = g.name;
        d.memoryBytes = g.memoryBytes;
        d.computeUnits = g.multiprocessors;
        d.detail = "sm_" + std::to_string(g.major) + std::to_string(g.minor);
        report.devices.push_back(d);
    }
    return report;
}

SelfTestResult cudaSelfTest(int device)
{
    const auto r = cuda::runSaxpySelfTest(device);
    if (!r.ran || !r.passed)
        return { r.ran, r.passed, r.message };
    const auto e = cuda::runElementwiseSelfTest(device);
    return { e.ran, e.passed, r.message + "; " + e.message };
}

std::string localGpuCatalogId(int gpu)
{
    const auto report = probeLocalDevices();
    for (const auto& d : report.devices) { // the CPU is id 0, GPU g is id g + 1
        if (d.kind != "cuda" || d.id.value != static_cast<std::uint32_t>(gpu + 1))
            continue;
        const auto* spec = DeviceCatalog::builtin().matchGpu(d.name, d.memoryBytes);
        return spec != nullptr ? spec->id : std::string();
    }
    throw Error("cuda:" + std::to_string(gpu) + ": " + report.cudaStatus);
}

std::string runDeviceKind(const std::string& devices)
{
    const auto spec = parseDeviceSpec(devices);
    return spec.cuda ? localGpuCatalogId(spec.gpus.front()) : std::string("cpu");
}

} // namespace ps::engine
