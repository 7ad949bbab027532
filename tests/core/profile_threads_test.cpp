// cost/profile_threads.h: the CPU profile a run's devices should be predicted with, by thread count.
#include "cost/profile_threads.h"

#include <gtest/gtest.h>

using namespace ps;

namespace {

// One node whose forward takes serial + parallel / threads (per sample), backward twice that.
Profile measuredAt(int threads, double serial = 100, double parallel = 900)
{
    Profile p;
    p.deviceKind = "cpu";
    p.source = "measured-cpu";
    p.threads = threads;
    NodeProfile n;
    n.forwardNs = { 10, serial + parallel / threads };
    n.backwardNs = { 20, 2 * (serial + parallel / threads) };
    n.outputBytes = { 0, 64 };
    p.nodes.push_back(n);
    return p;
}

} // namespace

TEST(ProfileThreads, TheMeasuredCountIsTakenAsIs)
{
    const auto m = matchProfileThreads({ measuredAt(4), measuredAt(1) }, 1);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->profile.threads, 1);
    EXPECT_NE(m->note.find("measured with 1 thread per device"), std::string::npos) << m->note;
}

TEST(ProfileThreads, CountsBetweenAreFittedByAmdahlsLaw)
{
    const auto m = matchProfileThreads({ measuredAt(1), measuredAt(8) }, 2);
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->profile.threads, 2);
    const auto want = measuredAt(2).nodes[0];
    EXPECT_NEAR(m->profile.nodes[0].forwardNs.perSample, want.forwardNs.perSample, 1e-9);
    EXPECT_NEAR(m->profile.nodes[0].forwardNs.fixed, want.forwardNs.fixed, 1e-9); // no thread dependence
    EXPECT_NEAR(m->profile.nodes[0].backwardNs.at(3), want.backwardNs.at(3), 1e-9);
    EXPECT_EQ(m->profile.nodes[0].outputBytes, want.outputBytes); // bytes do not depend on threads
    EXPECT_NE(m->note.find("fitted to 2 threads per device"), std::string::npos) << m->note;
}

TEST(ProfileThreads, AMismatchIsUsedAndSaidAndGpusTakeTheOnlyProfile)
{
    const auto one = matchProfileThreads({ measuredAt(2) }, 1);
    ASSERT_TRUE(one.has_value());
    EXPECT_EQ(one->profile.threads, 2);
    EXPECT_NE(one->note.find("--threads 1"), std::string::npos) << one->note;
    const auto unrecorded = matchProfileThreads({ measuredAt(0) }, 1);
    EXPECT_NE(unrecorded->note.find("did not record"), std::string::npos) << unrecorded->note;
    const auto gpu = matchProfileThreads({ measuredAt(0) }, 0);
    EXPECT_TRUE(gpu->note.empty());
    EXPECT_FALSE(matchProfileThreads({}, 1).has_value());
}
