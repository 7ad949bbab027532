#include "cluster/cluster.h"
#include "cpu/blas_core.h"
#include "cpu/thread_affinity.h"
#include "cpu_probe.h"
#include "cuda_libraries.h"
#include "local_devices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

using namespace ps::engine;

TEST(LocalDevices, CpuIsAlwaysListedFirst)
{
    const auto report = probeLocalDevices();
    ASSERT_FALSE(report.devices.empty());
    const auto& cpu = report.devices.front();
    EXPECT_EQ(cpu.kind, "cpu");
    EXPECT_GT(cpu.memoryBytes, 0);
    EXPECT_GE(cpu.computeUnits, 1);
    EXPECT_FALSE(report.cudaStatus.empty());
    for (std::size_t i = 0; i < report.devices.size(); ++i)
        EXPECT_EQ(report.devices[i].id.value, i);
}

TEST(GpuSelfTest, SaxpyMatchesCpu)
{
    const auto report = probeLocalDevices();
    if (report.devices.size() < 2)
        GTEST_SKIP() << "no CUDA device: " << report.cudaStatus;
    const auto r = cudaSelfTest(0);
    EXPECT_TRUE(r.ran);
    EXPECT_TRUE(r.passed) << r.message;
}

// A machine without the driver library is told so, not that its driver is too old.
TEST(LocalDevices, NoDriverIsSaidPlainly)
{
    void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver) {
        ::dlclose(driver);
        GTEST_SKIP() << "this machine has an NVIDIA driver";
    }
    const auto report = probeLocalDevices();
    if (report.cudaStatus.find("built without CUDA") != std::string::npos)
        GTEST_SKIP() << report.cudaStatus;
    EXPECT_EQ(report.cudaStatus, "no NVIDIA driver (libcuda.so.1 not found)");
}

TEST(CpuProbe, MeasuresPositiveRates)
{
    const auto cpu = ps::engine::measureCpuDevice(1);
    EXPECT_EQ(cpu.id, "cpu");
    EXPECT_FALSE(cpu.measured); // filled in, usable for planning
    EXPECT_GT(cpu.flopsFp32, 1e8); // any CPU of this century does more than 0.1 GFLOP/s
    EXPECT_GT(cpu.memoryBandwidth, 1e8);
    EXPECT_GT(cpu.memoryBytes, 0);
    // The GEMM team's rate (OpenBLAS on one core does several GFLOP/s), and a cache share where
    // sysfs reports caches.
    EXPECT_GT(cpu.flopsFp32 * cpu.gemmEfficiencyFp32, 1e9);
    // One thread's cache share: its core's level 2 and at most the whole last level.
    const auto caches = ps::engine::readCpuCaches();
    if (caches.privateBytes > 0 || caches.sharedBytes > 0) {
        EXPECT_GT(cpu.cacheBytes, 0);
        EXPECT_LE(cpu.cacheBytes, caches.privateBytes + caches.sharedBytes);
    }
    std::printf("1 thread: vector peak %.1f GFLOP/s, GEMM %.1f GFLOP/s, cache %.1f MiB at %.1f GB/s, memory "
                "%.1f GB/s\n",
        cpu.flopsFp32 / 1e9, cpu.flopsFp32 * cpu.gemmEfficiencyFp32 / 1e9,
        static_cast<double>(cpu.cacheBytes) / 1048576.0, cpu.cacheBandwidth / 1e9, cpu.memoryBandwidth / 1e9);
    EXPECT_NO_THROW(ps::makeCluster(cpu, 2).check());
    const auto json = ps::deviceSpecFromJson(ps::deviceSpecToJson(cpu), "round trip");
    EXPECT_EQ(json.cacheBytes, cpu.cacheBytes);
    EXPECT_EQ(json.cacheBandwidth, cpu.cacheBandwidth);
    EXPECT_EQ(json.gemmEfficiencyFp32, cpu.gemmEfficiencyFp32);
}

// sysfs's cache description (a fake tree): instruction caches skipped, a level 2 shared by two CPUs
// split between them, the last level with its sharers; a tree without sharer lists says so (0).
TEST(CpuProbe, CachesAreReadFromSysfs)
{
    const auto root = std::filesystem::temp_directory_path() / "ps-fake-cpu-cache";
    std::filesystem::remove_all(root);
    const auto put = [&](int index, const char* level, const char* type, const char* size, const char* shared) {
        const auto dir = root / ("index" + std::to_string(index));
        std::filesystem::create_directories(dir);
        std::ofstream(dir / "level") << level << "\n";
        std::ofstream(dir / "type") << type << "\n";
        std::ofstream(dir / "size") << size << "\n";
        if (shared != nullptr)
            std::ofstream(dir / "shared_cpu_list") << shared << "\n";
    };
    put(0, "1", "Data", "48K", "0");
    put(1, "1", "Instruction", "32K", "0");
    put(2, "2", "Unified", "2048K", "0-1");
    put(3, "3", "Unified", "32M", "0-3,8-11");
    auto c = ps::engine::readCpuCaches(root.string());
    EXPECT_EQ(c.privateBytes, std::int64_t { 1 } << 20);
    EXPECT_EQ(c.sharedBytes, std::int64_t { 32 } << 20);
    EXPECT_EQ(c.sharedBy, 8);
    std::filesystem::remove(root / "index3" / "shared_cpu_list");
    c = ps::engine::readCpuCaches(root.string());
    EXPECT_EQ(c.sharedBy, 0); // unknown: the probe takes every core as sharing it
    std::filesystem::remove_all(root);
    EXPECT_EQ(ps::engine::readCpuCaches(root.string()).sharedBytes, 0);
}

// The GPU half's libraries, found in the documented order, each with its file or the reason.
TEST(CudaLibraries, EveryLibraryIsFoundOrExplained)
{
    const auto libs = findCudaLibraries();
    ASSERT_EQ(libs.size(), 7u);
    EXPECT_EQ(libs.front().role, "driver");
    for (const auto& l : libs) {
        if (l.found) {
            EXPECT_TRUE(std::filesystem::exists(l.path)) << l.soname << " at " << l.path;
            EXPECT_TRUE(l.detail.empty());
        } else {
            EXPECT_FALSE(l.detail.empty()) << l.soname;
        }
    }
    // The toolkit's flat layout (development and CI machines) is on the search path.
    if (std::filesystem::exists("/usr/local/cuda/lib/libcupti.so.13")) {
        const auto cupti =
            std::find_if(libs.begin(), libs.end(), [](const CudaLibrary& l) { return l.role == "cupti"; });
        ASSERT_NE(cupti, libs.end());
        EXPECT_TRUE(cupti->found) << cupti->detail;
    }
    void* driver = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver)
        ::dlclose(driver);
    else
        EXPECT_NE(libs.front().detail.find("no NVIDIA driver"), std::string::npos) << libs.front().detail;
}

// $PS_CUDA_LIB_DIR comes first on the search path.
TEST(CudaLibraries, TheEnvironmentDirectoryIsSearchedFirst)
{
    const auto dir = std::filesystem::temp_directory_path() / ("ps_cuda_libs_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    ::setenv("PS_CUDA_LIB_DIR", dir.c_str(), 1);
    const auto path = cudaLibrarySearchPath();
    ::unsetenv("PS_CUDA_LIB_DIR");
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(path.empty());
    EXPECT_EQ(path.front(), dir);
}

// OpenBLAS's kernels are chosen at least as wide as the CPU's vectors: Debian 12's 0.3.21 takes
// Prescott's SSE3 kernels on CPUs newer than it (family 6 model 207), 6x slower GEMMs.
TEST(BlasCore, ANarrowChoiceIsUpgradedToTheCpusWidestVectors)
{
    CpuVectorFeatures avx512;
    avx512.avx2 = avx512.fma = avx512.avx512 = true;
    CpuVectorFeatures avx2;
    avx2.avx2 = avx2.fma = true;
    EXPECT_EQ(betterBlasCore("Prescott", avx512), "SkylakeX");
    EXPECT_EQ(betterBlasCore("Haswell", avx512), "SkylakeX");
    EXPECT_EQ(betterBlasCore("SkylakeX", avx512), "");
    EXPECT_EQ(betterBlasCore("Cooperlake", avx512), "");
    EXPECT_EQ(betterBlasCore("SAPPHIRERAPIDS", avx512), "");
    EXPECT_EQ(betterBlasCore("Prescott", avx2), "Haswell");
    EXPECT_EQ(betterBlasCore("Sandybridge", avx2), "Haswell");
    EXPECT_EQ(betterBlasCore("Zen", avx2), "");
    EXPECT_EQ(betterBlasCore("Haswell", avx2), "");
    EXPECT_EQ(betterBlasCore("Prescott", CpuVectorFeatures {}), "");
    CpuVectorFeatures avx2NoFma;
    avx2NoFma.avx2 = true;
    EXPECT_EQ(betterBlasCore("Prescott", avx2NoFma), "");
    EXPECT_EQ(blasCoreLevel("unknown"), 0);
    EXPECT_EQ(blasCoreLevel("Excavator"), 2);
}

// This test binary runs the engine's static initialisation: its OpenBLAS now runs kernels as wide as
// the CPU's (unless the environment chose them: OPENBLAS_CORETYPE or PS_KEEP_BLAS_CORE).
TEST(BlasCore, ThisProcessRunsKernelsAsWideAsTheCpu)
{
    const auto report = blasCoreReport();
    EXPECT_FALSE(report.config.empty());
    const char* keep = std::getenv("PS_KEEP_BLAS_CORE");
    if ((keep != nullptr && *keep != '\0' && std::string_view(keep) != "0")
        || (std::getenv("OPENBLAS_CORETYPE") && report.detected.empty()))
        GTEST_SKIP() << "the environment chose OpenBLAS's kernels";
    if (report.config.find("DYNAMIC_ARCH") == std::string::npos)
        GTEST_SKIP() << "this OpenBLAS is built for one core type: " << report.config;
    EXPECT_EQ(betterBlasCore(report.core, thisCpuVectorFeatures()), "") << "OpenBLAS runs " << report.core;
    if (!report.detected.empty()) {
        EXPECT_NE(report.detected, report.core);
    }
}
