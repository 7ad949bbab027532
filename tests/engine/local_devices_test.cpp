#include "local_devices.h"

#include <gtest/gtest.h>

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
