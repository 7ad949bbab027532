#include "local_devices.h"
#include "profiler_backends.h"

#include <gtest/gtest.h>

using namespace ps::profiler;

TEST(ProfilerBackends, CpuTimersAlwaysAvailableAndCuptiNeedsAGpu)
{
    const auto backends = availableBackends();
    ASSERT_EQ(backends.size(), 2U);
    EXPECT_EQ(backends[0].name, "cpu-timers");
    EXPECT_TRUE(backends[0].available);
    EXPECT_EQ(backends[1].name, "cupti");
    const bool hasGpu = ps::engine::probeLocalDevices().devices.size() > 1;
    if (!hasGpu) {
        EXPECT_FALSE(backends[1].available) << backends[1].detail;
    }
    EXPECT_FALSE(backends[1].detail.empty());
}
