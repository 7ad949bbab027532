#include "cpu_probe.h"

#include "cpu/thread_affinity.h"
#include "local_devices.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace ps::engine {
namespace {

    using Clock = std::chrono::steady_clock;

    // 8 independent accumulators of 8 lanes: enough chains to hide FMA latency once the compiler
    // vectorizes; 2 FLOPs per multiply-add.
    double fmaLoop(std::size_t iterations)
    {
        float acc[64];
        for (int i = 0; i < 64; ++i)
            acc[i] = static_cast<float>(i) * 1e-3F;
        const float a = 0.999999F;
        const float b = 1e-7F;
        for (std::size_t it = 0; it < iterations; ++it) {
            for (float& x : acc)
                x = x * a + b;
        }
        float sum = 0;
        for (float x : acc)
            sum += x;
        return static_cast<double>(sum);
    }

    double measureFlops(int threads)
    {
        constexpr std::size_t kIterations = 2'000'000;
        std::vector<std::thread> pool;
        std::vector<double> sink(static_cast<std::size_t>(threads));
        const auto start = Clock::now();
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&sink, t] { sink[static_cast<std::size_t>(t)] = fmaLoop(kIterations); });
        for (auto& th : pool)
            th.join();
        const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        return 2.0 * 64 * kIterations * threads / std::max(seconds, 1e-9);
    }

    double measureBandwidth()
    {
        constexpr std::size_t kBytes = 64 << 20;
        std::vector<char> src(kBytes, 1);
        std::vector<char> dst(kBytes, 0);
        double best = 0;
        for (int rep = 0; rep < 3; ++rep) {
            const auto start = Clock::now();
            std::memcpy(dst.data(), src.data(), kBytes);
            const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
            best = std::max(best, 2.0 * kBytes / std::max(seconds, 1e-9)); // read + write
        }
        return best + static_cast<double>(dst[kBytes / 2]) * 0; // keep the copy observable
    }

} // namespace

DeviceSpec measureCpuDevice(int threads)
{
    const auto report = probeLocalDevices();
    const auto& cpu = report.devices.front();
    if (threads <= 0)
        threads = cpu.computeUnits;
    DeviceSpec d = DeviceCatalog::builtin().find("cpu");
    d.name = cpu.name + " (" + std::to_string(threads) + " threads, measured)";
    d.memoryBytes = cpu.memoryBytes;
    d.flopsFp32 = measureFlops(threads);
    d.flopsTf32 = d.flopsFp32;
    d.flopsFp16 = d.flopsFp32;
    d.flopsBf16 = d.flopsFp32;
    d.memoryBandwidth = measureBandwidth();
    d.hostLink = { "memory", d.memoryBandwidth, 0 };
    d.peerLink = { "memory", d.memoryBandwidth, 0 };
    d.measured = false; // filled in
    d.cores = static_cast<int>(allowedCores().size());
    return d;
}

} // namespace ps::engine
