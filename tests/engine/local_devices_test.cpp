#include "cluster/cluster.h"
#include "cpu_probe.h"
#include "local_devices.h"

#include <gtest/gtest.h>

#include <dlfcn.h>

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
    EXPECT_NO_THROW(ps::makeCluster(cpu, 2).check());
}
