// CPU devices that outnumber their cores time-share them (sim/shared_compute.h): the core groups
// the runtime's pinning gives, processor-sharing slowdowns of overlapping spans, and whole
// simulations whose iteration can no longer beat the cores' total work.
#include "sim/shared_compute.h"
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace ps;
using namespace ps::sim;

namespace {

constexpr double kMs = 1e6;

Cluster cpuCluster(int devices, int cores)
{
    DeviceSpec d;
    d.id = "cpu";
    d.memoryBytes = 1LL << 40;
    d.flopsFp32 = 1e11;
    d.memoryBandwidth = 1e10;
    d.hostLink = { "memory", 1e10, 0 };
    d.peerLink = { "memory", 1e10, 0 };
    d.cores = cores;
    return makeCluster(d, devices);
}

SimulationResult simulateEqual(const ScheduleSpec& spec, const Cluster& cluster, double fMs, double bMs)
{
    std::vector<StageCost> stages(static_cast<std::size_t>(spec.stages));
    for (auto& s : stages) {
        s.forwardNs = fMs * kMs;
        s.backwardNs = bMs * kMs;
        s.weightGradNs = bMs * kMs / 2;
        s.activationBytes = 100;
    }
    const auto schedule = generateSchedule(spec);
    return simulate({ schedule, stages, cluster, {}, 1.0, {}, { false, false } });
}

} // namespace

TEST(SharedCompute, GroupsFollowThePinning)
{
    EXPECT_TRUE(coreGroups(2, 8, 2).empty()); // a core each
    EXPECT_TRUE(coreGroups(4, 8, 0).empty()); // not a CPU
    EXPECT_EQ(coreGroups(4, 8, 2), (std::vector<int> { 0, 1, 0, 1 })); // device d on core d mod 2
    EXPECT_EQ(coreGroups(3, 8, 1), (std::vector<int> { 0, 0, 0 }));
    // Two nodes of 3 devices on 2 cores each: groups do not cross nodes.
    EXPECT_EQ(coreGroups(6, 3, 2), (std::vector<int> { 0, 1, 0, 2, 3, 2 }));
}

TEST(SharedCompute, OverlapSlowsBySharingAndAloneDoesNot)
{
    const std::vector<int> groups { 0, 0, 1 };
    const std::vector<ComputeSpan> spans {
        { 0, 0, 0, 10 }, // overlaps span 1 fully
        { 1, 0, 0, 10 },
        { 2, 0, 0, 10 }, // another core: alone
        { 0, 1, 20, 30 }, // half of it beside span 4
        { 1, 1, 25, 35 },
    };
    const auto f = sharingSlowdowns(spans, groups);
    EXPECT_DOUBLE_EQ(f[0], 2.0);
    EXPECT_DOUBLE_EQ(f[1], 2.0);
    EXPECT_DOUBLE_EQ(f[2], 1.0);
    // 5 ms alone and 5 ms at half speed: 7.5 ms of work in 10 ms.
    EXPECT_NEAR(f[3], 10.0 / 7.5, 1e-12);
    EXPECT_NEAR(f[4], 10.0 / 7.5, 1e-12);
}

TEST(SharedCompute, FourDevicesOnOneCoreTakeTheirTotalWork)
{
    // GPipe, 4 stages, 8 micro-batches of 1 ms forward and 2 ms backward on one core: the core
    // does all 96 ms of work, with no idle once the first forward starts and until the last
    // backward ends, so the iteration is the total work (within the fixed point's tolerance).
    const auto spec = parseScheduleSpec("gpipe", 4, 8);
    const auto alone = simulateEqual(spec, cpuCluster(4, 4), 1, 2);
    const auto shared = simulateEqual(spec, cpuCluster(4, 1), 1, 2);
    EXPECT_NEAR(alone.iterationNs / kMs, 3 * (8 + 3), 1e-6); // (M + S - 1)(F + B)
    EXPECT_GE(shared.iterationNs / kMs, 96 * 0.99);
    EXPECT_LE(shared.iterationNs / kMs, 96 * 1.03);
}

TEST(SharedCompute, TwoCoresForFourDevicesLieBetween)
{
    const auto spec = parseScheduleSpec("1f1b", 4, 8);
    const auto own = simulateEqual(spec, cpuCluster(4, 4), 1, 2);
    const auto two = simulateEqual(spec, cpuCluster(4, 2), 1, 2);
    // Half the cores: at least the total work over two cores, never faster than a core each.
    EXPECT_GE(two.iterationNs / kMs, 96.0 / 2 * 0.99);
    EXPECT_GT(two.iterationNs, own.iterationNs * 1.2);
    EXPECT_LT(two.iterationNs, own.iterationNs * 2.0);
    // Every compute action is stretched at most by the devices on its core.
    for (const auto& e : two.events) {
        if (e.stream != Stream::Compute || (e.action != ActionType::Forward && e.action != ActionType::Backward))
            continue;
        const double base = e.action == ActionType::Forward ? 1 : 2;
        EXPECT_LE((e.endNs - e.startNs) / kMs, 2 * base * 1.001);
        EXPECT_GE((e.endNs - e.startNs) / kMs, base * 0.999);
    }
}
