// The CUDA profiler's host side on synthetic CUPTI activity: record conversion from CUPTI's own
// structs (where the CUDA build has CUPTI's headers), attribution to (node, pass) through the
// external correlation ids the engine pushes, overlapping kernels, several kernels per node, copies
// on another stream, dropped records, clock alignment and the measured-cuda profile.
#include "cupti/activity.h"
#include "graph/graph_builder.h"
#include "util/error.h"

#if defined(PS_HAVE_CUPTI_HEADERS)
#include "cupti/cupti_records.h"
#endif

#include <gtest/gtest.h>

using namespace ps;
using namespace ps::profiler::cupti;

namespace {

DeviceActivity kernel(std::uint32_t correlation, std::uint64_t start, std::uint64_t end, std::uint32_t stream = 7)
{
    return { ActivityKind::Kernel, "k", start, end, correlation, stream, 0, 0 };
}

// Two nodes, two repetitions: forward and backward of node 0, forward of node 1.
std::vector<NodeLaunch> launches()
{
    return { { 100, 0, Pass::Forward, 0 }, { 101, 0, Pass::Backward, 0 }, { 102, 1, Pass::Forward, 0 },
        { 200, 0, Pass::Forward, 1 }, { 201, 0, Pass::Backward, 1 }, { 202, 1, Pass::Forward, 1 } };
}

} // namespace

TEST(CuptiActivity, UnionOfIntervalsCountsOverlapsOnce)
{
    EXPECT_DOUBLE_EQ(unionLength({}), 0);
    EXPECT_DOUBLE_EQ(unionLength({ { 0, 10 }, { 5, 15 }, { 20, 30 } }), 25);
    EXPECT_DOUBLE_EQ(unionLength({ { 20, 30 }, { 0, 100 } }), 100); // nested
    EXPECT_DOUBLE_EQ(unionLength({ { 0, 10 }, { 10, 20 } }), 20); // touching
    EXPECT_DOUBLE_EQ(unionLength({ { 50, 40 }, { 0, 5 } }), 5); // an inverted record adds nothing
}

TEST(CuptiActivity, KernelsAreAttributedToTheirNodeAndPass)
{
    ActivityBatch batch;
    // Repetition 0: node 0 forward runs two kernels on two streams that overlap by 200 ns; its
    // backward one kernel; node 1 one kernel. Repetition 1: the same, a little slower.
    batch.activities = { kernel(1, 1000, 2000, 7), kernel(2, 1800, 2600, 8), kernel(3, 3000, 5000),
        kernel(4, 6000, 6500), kernel(11, 11000, 12100, 7), kernel(12, 11900, 12700, 8), kernel(13, 13000, 15200),
        kernel(14, 16000, 16600) };
    batch.correlations = { { 1, 100 }, { 2, 100 }, { 3, 101 }, { 4, 102 }, { 11, 200 }, { 12, 200 }, { 13, 201 },
        { 14, 202 } };
    const auto a = attribute(2, batch, launches());
    ASSERT_EQ(a.nodes.size(), 2u);
    EXPECT_EQ(a.nodes[0].forwardNs, (std::vector<double> { 1600, 1700 }));
    EXPECT_EQ(a.nodes[0].backwardNs, (std::vector<double> { 2000, 2200 }));
    EXPECT_EQ(a.nodes[1].forwardNs, (std::vector<double> { 500, 600 }));
    EXPECT_TRUE(a.nodes[1].backwardNs.empty());
    EXPECT_EQ(a.nodes[0].kernels, 6);
    EXPECT_EQ(a.unattributedRecords, 0u);
    EXPECT_TRUE(a.warnings.empty());

    const auto run = toProfileRun(a, 4);
    EXPECT_EQ(run.microBatch, 4);
    EXPECT_DOUBLE_EQ(run.nodes[0].forwardNs.median, 1650);
    EXPECT_EQ(run.nodes[1].backwardNs.count, 0u);
    EXPECT_DOUBLE_EQ(run.nodeSumNs, 1650 + 2100 + 550);
}

TEST(CuptiActivity, CopiesUncorrelatedAndDroppedRecordsAreKeptApart)
{
    ActivityBatch batch;
    batch.activities = { kernel(1, 0, 1000), { ActivityKind::Memcpy, "memcpy DtoH", 500, 4500, 5, 9, 0, 1 << 20 },
        { ActivityKind::Memset, "memset", 1000, 1100, 1, 7, 0, 64 }, kernel(99, 0, 300), kernel(6, 0, 50) };
    batch.correlations = { { 1, 100 }, { 5, 100 }, { 6, 999 } }; // 999: an id the engine never pushed
    batch.droppedRecords = 3;
    const auto a = attribute(2, batch, launches());
    // The memset joins node 0's forward (1000..1100 after the kernel's 0..1000); the copy on stream 9
    // is copy time, not compute.
    EXPECT_EQ(a.nodes[0].forwardNs, (std::vector<double> { 1100 }));
    EXPECT_EQ(a.nodes[0].copyNs, (std::vector<double> { 4000 }));
    EXPECT_EQ(a.nodes[0].kernels, 1);
    EXPECT_EQ(a.unattributedRecords, 2u); // correlation 99 has no external id; 999 no launch
    EXPECT_DOUBLE_EQ(a.unattributedNs, 350);
    EXPECT_EQ(a.droppedRecords, 3u);
    ASSERT_EQ(a.warnings.size(), 2u);
    EXPECT_NE(a.warnings[0].find("dropped 3"), std::string::npos);
}

TEST(CuptiActivity, BadLaunchesAreRefused)
{
    EXPECT_THROW((void)attribute(1, {}, { { 1, 5, Pass::Forward, 0 } }), Error); // node out of range
    EXPECT_THROW((void)attribute(2, {}, { { 1, 0, Pass::Forward, 0 }, { 1, 1, Pass::Forward, 0 } }), Error);
}

TEST(CuptiActivity, ClocksAlignByLeastSquares)
{
    EXPECT_THROW((void)alignClocks({}), Error);
    const auto one = alignClocks({ { 1'000'000, 5'000.0 } });
    EXPECT_DOUBLE_EQ(one.scale, 1);
    EXPECT_DOUBLE_EQ(one.toHost(1'000'500), 5'500.0);
    // host = 123456 + 1.0001 gpu, at timestamps near 1.7e18 ns (epoch nanoseconds).
    const std::uint64_t base = 1'700'000'000'000'000'000ULL;
    std::vector<std::pair<std::uint64_t, double>> pairs;
    for (std::uint64_t i = 0; i < 5; ++i) {
        const std::uint64_t g = base + i * 1'000'000;
        pairs.emplace_back(g, 123456.0 + 1.0001 * static_cast<double>(i * 1'000'000));
    }
    const auto map = alignClocks(pairs);
    EXPECT_NEAR(map.scale, 1.0001, 1e-9);
    EXPECT_NEAR(map.toHost(base + 2'500'000) - map.toHost(base), 1.0001 * 2'500'000, 1e-3);
    EXPECT_NEAR(map.toHost(base), 123456.0, 1.0);
}

TEST(CuptiActivity, MeasuredCudaProfileThroughTwoMicroBatches)
{
    GraphBuilder b(ModelInfo { "m", "test", "{}", 4 });
    const auto x = b.input("x", { 4, 8 }, DType::F32);
    const auto h = b.op(OpType::MatMul, "fc", { x, b.parameter("w", { 8, 8 }) });
    const auto g = b.finish({ b.op(OpType::Relu, "relu", { h }) });
    const auto at = [&](double fc, double relu, std::int64_t mb) {
        Attribution a;
        a.nodes.resize(2);
        a.nodes[0].forwardNs = { fc };
        a.nodes[0].backwardNs = { 2 * fc };
        a.nodes[1].forwardNs = { relu };
        a.nodes[1].backwardNs = { relu };
        return toProfileRun(a, mb);
    };
    const auto p = toCudaProfile(g, at(10'000, 2'000, 4), at(16'000, 3'000, 8), "h100-80gb");
    EXPECT_EQ(p.source, "measured-cuda");
    EXPECT_EQ(p.deviceKind, "h100-80gb");
    EXPECT_DOUBLE_EQ(p.nodes[0].forwardNs.at(4), 10'000);
    EXPECT_DOUBLE_EQ(p.nodes[0].forwardNs.at(8), 16'000);
    EXPECT_DOUBLE_EQ(p.nodes[0].forwardNs.perSample, 1'500);
    EXPECT_DOUBLE_EQ(p.nodes[1].backwardNs.at(8), 3'000);
    EXPECT_EQ(p.setup.precision, Precision::Fp32);
    // Profiled with bf16 GEMMs: stored apart, under the source a bf16 run looks for.
    const auto bf16 = toCudaProfile(g, at(10'000, 2'000, 4), at(16'000, 3'000, 8), "h100-80gb", Precision::Bf16);
    EXPECT_EQ(bf16.source, "measured-cuda-bf16");
    EXPECT_EQ(bf16.setup.precision, Precision::Fp32); // the engine's values stay fp32: bytes as measured
    EXPECT_EQ(measuredPrecision(bf16.source), Precision::Bf16);
    EXPECT_EQ(measuredPrecision("measured-cuda-tf32"), Precision::Tf32);
    EXPECT_EQ(measuredPrecision("measured-cpu"), Precision::Fp32);
    EXPECT_EQ(measuredPrecision("measured-cuda-int4"), Precision::Fp32);
}

#if defined(PS_HAVE_CUPTI_HEADERS)
// CUPTI's own structs, filled as CUPTI fills them, converted and attributed.
TEST(CuptiActivity, CuptiRecordsConvert)
{
    ActivityBatch batch;
    CUpti_ActivityKernel10 k {};
    k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k.name = "ampere_sgemm_128x64_nn";
    k.start = 1000;
    k.end = 3000;
    k.correlationId = 42;
    k.streamId = 7;
    k.deviceId = 1;
    EXPECT_TRUE(appendRecord(reinterpret_cast<const CUpti_Activity*>(&k), batch));
    CUpti_ActivityMemcpy6 m {};
    m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m.bytes = 4096;
    m.start = 3000;
    m.end = 3500;
    m.correlationId = 43;
    m.streamId = 9;
    EXPECT_TRUE(appendRecord(reinterpret_cast<const CUpti_Activity*>(&m), batch));
    CUpti_ActivityMemset4 s {};
    s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    s.bytes = 64;
    s.start = 3000;
    s.end = 3100;
    s.correlationId = 42;
    EXPECT_TRUE(appendRecord(reinterpret_cast<const CUpti_Activity*>(&s), batch));
    CUpti_ActivityExternalCorrelation c {};
    c.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    c.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
    c.externalId = 100;
    c.correlationId = 42;
    EXPECT_TRUE(appendRecord(reinterpret_cast<const CUpti_Activity*>(&c), batch));
    c.correlationId = 43;
    EXPECT_TRUE(appendRecord(reinterpret_cast<const CUpti_Activity*>(&c), batch));
    CUpti_Activity other {};
    other.kind = CUPTI_ACTIVITY_KIND_OVERHEAD;
    EXPECT_FALSE(appendRecord(&other, batch));

    ASSERT_EQ(batch.activities.size(), 3u);
    EXPECT_EQ(batch.activities[0].name, "ampere_sgemm_128x64_nn");
    EXPECT_EQ(batch.activities[0].deviceId, 1u);
    EXPECT_EQ(batch.activities[1].kind, ActivityKind::Memcpy);
    EXPECT_EQ(batch.activities[1].name, "memcpy HtoD");
    EXPECT_EQ(batch.activities[1].bytes, 4096u);
    ASSERT_EQ(batch.correlations.size(), 2u);
    const auto a = attribute(1, batch, { { 100, 0, Pass::Forward, 0 } });
    EXPECT_EQ(a.nodes[0].forwardNs, (std::vector<double> { 2100 }));
    EXPECT_EQ(a.nodes[0].copyNs, (std::vector<double> { 500 }));
}
#endif
