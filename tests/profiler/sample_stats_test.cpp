#include "sample_stats.h"
#include "util/error.h"

#include <gtest/gtest.h>

using namespace ps::profiler;

TEST(SampleStats, MedianAndSpreadIgnoreOneOutlier)
{
    const auto s = summarizeSamples({ 10, 11, 9, 10, 500 });
    EXPECT_EQ(s.count, 5U);
    EXPECT_DOUBLE_EQ(s.median, 10);
    EXPECT_DOUBLE_EQ(s.min, 9);
    EXPECT_DOUBLE_EQ(s.max, 500);
    EXPECT_DOUBLE_EQ(s.mad, 1);
}

TEST(SampleStats, QuantilesInterpolate)
{
    const auto s = summarizeSamples({ 1, 2, 3, 4 });
    EXPECT_DOUBLE_EQ(s.median, 2.5);
    EXPECT_NEAR(s.p10, 1.3, 1e-12);
    EXPECT_NEAR(s.p90, 3.7, 1e-12);
}

TEST(SampleStats, EmptyIsAnError)
{
    EXPECT_THROW((void)summarizeSamples({}), ps::Error);
}
