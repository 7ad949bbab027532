#include "cpu_probe.h"

#include "cpu/gemm_team.h"
#include "cpu/thread_affinity.h"
#include "cpu/vector_loops.h"
#include "local_devices.h"

#include <algorithm>
#include <cblas.h>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace ps::engine {
namespace {

    using Clock = std::chrono::steady_clock;

    double secondsSince(Clock::time_point start)
    {
        return std::max(std::chrono::duration<double>(Clock::now() - start).count(), 1e-9);
    }

    // Runs body(t) on `threads` threads at once, thread t pinned to cores[t % cores], and returns
    // the wall time of the slowest.
    template <typename Body> double onThreads(const std::vector<int>& cores, int threads, Body body)
    {
        std::vector<std::thread> pool;
        const auto start = Clock::now();
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t] {
                pinCurrentThread({ cores[static_cast<std::size_t>(t) % cores.size()] });
                body(t);
            });
        for (auto& th : pool)
            th.join();
        return secondsSince(start);
    }

    // The vector peak of the engine's own loops (cpu/vector_loops.h, compiled as its element-wise
    // kernels are) on every thread.
    double measureVectorPeak(const std::vector<int>& cores, int threads)
    {
        constexpr std::int64_t kIterations = 1'000'000;
        double flops = 0;
        for (int rep = 0; rep < 2; ++rep) {
            const double seconds = onThreads(cores, threads, [](int) { (void)cpu::multiplyAddPeakLoop(kIterations); });
            flops = std::max(flops, static_cast<double>(cpu::kMultiplyAddPeakFlops) * kIterations * threads / seconds);
        }
        return flops;
    }

    // b = a * s + b * h over n floats, compiled as the engine's element-wise kernels are
    // (engine/CMakeLists.txt: -O3, vectorized behind an overlap check).
    __attribute__((noinline)) void streamMultiplyAdd(const float* a, float* b, std::int64_t n, float s, float h)
    {
        for (std::int64_t i = 0; i < n; ++i)
            b[i] = a[i] * s + b[i] * h;
    }

    // A streaming element-wise kernel as the engine's (b = a * s + b * h: two reads, one write per
    // element) over `bytes` of working set per thread, repeated for at least `traffic` bytes;
    // bytes per second over every thread, the best of eight (on a shared machine a rate of three
    // came out anywhere from two thirds of the best to the best).
    double measureStream(const std::vector<int>& cores, int threads, std::int64_t bytes, std::int64_t traffic)
    {
        const auto n = std::max<std::int64_t>(1024, bytes / 8); // two arrays of floats
        const auto passes = std::max<std::int64_t>(1, traffic / (12 * n));
        std::vector<std::vector<float>> a(static_cast<std::size_t>(threads));
        std::vector<std::vector<float>> b(static_cast<std::size_t>(threads));
        onThreads(cores, threads, [&](int t) { // first touch on the thread's own core
            a[static_cast<std::size_t>(t)].assign(static_cast<std::size_t>(n), 1.0F);
            b[static_cast<std::size_t>(t)].assign(static_cast<std::size_t>(n), 0.5F);
        });
        double best = 0;
        for (int rep = 0; rep < 8; ++rep) {
            const double seconds = onThreads(cores, threads, [&](int t) {
                const float* x = a[static_cast<std::size_t>(t)].data();
                float* y = b[static_cast<std::size_t>(t)].data();
                for (std::int64_t p = 0; p < passes; ++p)
                    streamMultiplyAdd(x, y, n, 1.0001F, 0.5F);
            });
            best = std::max(best, 12.0 * static_cast<double>(n * passes) * threads / seconds);
        }
        return best;
    }

    // The engine's GEMM (cpu/gemm_team.h: one pinned team of `threads` cores, single-threaded
    // OpenBLAS calls) as a training step runs it: products of a transformer layer's size, forward
    // (A B) and both backward orientations (dY B^T, A^T dY), over `sets` operand sets in turn so
    // that operands come from beyond the private caches (hot operands measured 6% faster).
    double measureGemm(const std::vector<int>& cores, int threads, std::int64_t cacheBytes)
    {
        const std::int64_t m = 256L * threads;
        const std::int64_t n = 256;
        const std::int64_t k = 256;
        // Per set: A, B and C = A B, and the two gradients' outputs (written, never read back, so the
        // values stay what the inputs make them: no overflow, no denormals).
        const std::int64_t setBytes = 4 * (2 * m * k + 2 * k * n + m * n);
        const auto sets = std::clamp<std::int64_t>(cacheBytes / setBytes + 1, 2, 16);
        std::vector<std::vector<float>> a(static_cast<std::size_t>(sets));
        std::vector<std::vector<float>> b(static_cast<std::size_t>(sets));
        std::vector<std::vector<float>> c(static_cast<std::size_t>(sets));
        std::vector<std::vector<float>> da(static_cast<std::size_t>(sets));
        std::vector<std::vector<float>> db(static_cast<std::size_t>(sets));
        for (std::size_t i = 0; i < a.size(); ++i) {
            a[i].assign(static_cast<std::size_t>(m * k), 0.5F);
            b[i].assign(static_cast<std::size_t>(k * n), 0.25F);
            c[i].assign(static_cast<std::size_t>(m * n), 0.0F);
            da[i].assign(static_cast<std::size_t>(m * k), 0.0F);
            db[i].assign(static_cast<std::size_t>(k * n), 0.0F);
        }
        std::vector<int> teamCores;
        for (int t = 0; t < threads; ++t)
            teamCores.push_back(cores[static_cast<std::size_t>(t) % cores.size()]);
        double best = 0;
        // As the runtime runs them: OpenBLAS on one thread, the team splitting the product.
        const int blasThreads = openblas_get_num_threads();
        openblas_set_num_threads(1);
        std::thread([&] {
            pinCurrentThread({ teamCores.front() });
            auto team = threads > 1 ? std::make_unique<GemmTeam>(teamCores) : nullptr;
            const GemmTeamScope scope(team.get());
            for (int rep = 0; rep < 4; ++rep) {
                const auto start = Clock::now();
                for (std::size_t i = 0; i < a.size(); ++i) {
                    sgemm(false, false, m, n, k, 1.0F, a[i].data(), k, b[i].data(), n, 0.0F, c[i].data(), n);
                    sgemm(false, true, m, k, n, 1.0F, c[i].data(), n, b[i].data(), n, 0.0F, da[i].data(), k);
                    sgemm(true, false, k, n, m, 1.0F, a[i].data(), k, c[i].data(), n, 0.0F, db[i].data(), n);
                }
                best = std::max(best, 6.0 * static_cast<double>(m * n * k * sets) / secondsSince(start));
            }
        }).join();
        openblas_set_num_threads(blasThreads);
        return best;
    }

    std::int64_t readBytes(const std::string& path)
    {
        std::ifstream in(path);
        std::string text;
        if (!(in >> text) || text.empty())
            return 0;
        std::int64_t value = 0;
        try {
            value = std::stoll(text);
        } catch (const std::exception&) {
            return 0;
        }
        const char unit = text.back();
        return unit == 'K' ? value << 10 : unit == 'M' ? value << 20 : unit == 'G' ? value << 30 : value;
    }

    // How many CPUs a "0-3,8-11" list names.
    int countCpuList(const std::string& list)
    {
        int count = 0;
        std::size_t at = 0;
        while (at < list.size()) {
            const auto comma = list.find(',', at);
            const auto part = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
            const auto dash = part.find('-');
            try {
                count += dash == std::string::npos ? 1 : std::stoi(part.substr(dash + 1)) - std::stoi(part) + 1;
            } catch (const std::exception&) {
                return 0;
            }
            if (comma == std::string::npos)
                break;
            at = comma + 1;
        }
        return count;
    }

} // namespace

CpuCaches readCpuCaches(const std::string& cacheDirectory)
{
    CpuCaches c;
    int sharersOfPrivate = 1;
    for (int index = 0; index < 8; ++index) {
        const auto dir = cacheDirectory + "/index" + std::to_string(index) + "/";
        std::ifstream levelFile(dir + "level");
        std::ifstream typeFile(dir + "type");
        int level = 0;
        std::string type;
        if (!(levelFile >> level) || !(typeFile >> type) || type == "Instruction")
            continue;
        const auto size = readBytes(dir + "size");
        std::ifstream sharedFile(dir + "shared_cpu_list");
        std::string shared;
        sharedFile >> shared;
        const int sharers = countCpuList(shared); // 0: not reported
        if (level == 2) {
            c.privateBytes = size;
            sharersOfPrivate = std::max(1, sharers);
        } else if (level >= 3 && size > 0) {
            c.sharedBytes = size;
            c.sharedBy = sharers;
        }
    }
    // A level 2 shared by a cluster of cores (E-cores, many Arm designs): each core's part of it.
    c.privateBytes /= sharersOfPrivate;
    if (c.privateBytes == 0 && cacheDirectory == kCpuCacheDirectory) // no sysfs: what glibc reads from CPUID
        c.privateBytes = std::max<long>(0, ::sysconf(_SC_LEVEL2_CACHE_SIZE));
    return c;
}

DeviceSpec measureCpuDevice(int threads)
{
    const auto report = probeLocalDevices();
    const auto& cpu = report.devices.front();
    const auto cores = allowedCores();
    if (threads <= 0) // every core this process may use, as the runtime counts them (threadsPerDevice)
        threads = static_cast<int>(cores.size());
    DeviceSpec d = DeviceCatalog::builtin().find("cpu");
    d.name = cpu.name + " (" + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + ", measured)";
    d.memoryBytes = cpu.memoryBytes;
    const auto caches = readCpuCaches();
    // The last level is shared by `sharedBy` CPUs (unknown: by every core); a device's threads on
    // cores of their own hold their part of it, and threads beyond the cores add no cache.
    const int coreCount = static_cast<int>(cores.size());
    const int sharing = std::clamp(caches.sharedBy > 0 ? caches.sharedBy : coreCount, 1, coreCount);
    d.cacheBytes = std::min(threads, coreCount) * (caches.privateBytes + caches.sharedBytes / sharing);
    const double vector = measureVectorPeak(cores, threads);
    const double gemm = measureGemm(cores, threads, d.cacheBytes);
    d.flopsFp32 = std::max(vector, gemm); // the peak is at least what a GEMM reaches
    d.gemmEfficiencyFp32 = gemm / d.flopsFp32;
    d.flopsTf32 = d.flopsFp32;
    d.flopsFp16 = d.flopsFp32;
    d.flopsBf16 = d.flopsFp32;
    // Half the cache per thread for the cached rate; beyond the whole last level for memory's.
    const std::int64_t cached = std::max<std::int64_t>(64 << 10, d.cacheBytes / threads / 2);
    d.cacheBandwidth = d.cacheBytes > 0 ? measureStream(cores, threads, cached, std::int64_t { 128 } << 20) : 0;
    // Per thread, four times its cache share (16 MiB at least, 1 GiB in all at most), so that no
    // level holds the arrays; two passes a repeat.
    const std::int64_t beyond = std::clamp<std::int64_t>(
        4 * (d.cacheBytes / threads), 16 << 20, std::max<std::int64_t>(16 << 20, (std::int64_t { 1 } << 30) / threads));
    d.memoryBandwidth = measureStream(cores, threads, beyond, 3 * beyond);
    if (d.cacheBandwidth < d.memoryBandwidth) // no faster level seen: one rate for every size
        d.cacheBandwidth = d.memoryBandwidth;
    d.hostLink = { "memory", d.memoryBandwidth, 0 };
    d.peerLink = { "memory", d.memoryBandwidth, 0 };
    d.measured = false; // filled in
    d.cores = static_cast<int>(cores.size());
    return d;
}

} // namespace ps::engine
