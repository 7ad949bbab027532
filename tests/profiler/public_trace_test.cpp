// A public PyTorch profiler trace of someone else's run, imported as a user would: torchvision
// AlexNet's forward passes at batch 128 on an A100 40GB (a warm-up and a measured pass after the
// model's set-up; no shapes, no annotations naming nodes), recorded for a benchmark and published in
// Meta's HolisticTraceAnalysis test data (tests/data/critical_path/alexnet/
// benchmark_result_2869224_1695835535_trace.json.gz, MIT licence). The trace is not shipped with
// PipeStudio: the test reads it as hta_alexnet_a100_trace.json.gz from ../shared/data/traces/ (or
// $PS_PUBLIC_TRACES) where a development or CI machine holds it, and skips without it. It imports onto the ONNX
// fixtures' AlexNet (make_onnx_fixtures.py).
#include "onnx/onnx_import.h"
#include "trace_import.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

using namespace ps;
namespace fs = std::filesystem;

TEST(PublicTraces, AlexNetOnAnA100AlignsEveryForwardPassAfterItsSetUp)
{
    const char* dir = std::getenv("PS_PUBLIC_TRACES"); // where else a copy is kept
    const fs::path trace =
        fs::path(dir != nullptr ? dir : PS_SOURCE_DIR "/../shared/data/traces") / "hta_alexnet_a100_trace.json.gz";
    if (!fs::exists(trace))
        GTEST_SKIP() << trace << " not found: the public trace is kept under ../shared, not in the repository";
    const char* fixtures = std::getenv("PS_ONNX_FIXTURES");
    const fs::path onnx =
        fixtures == nullptr ? fs::path() : fs::path(fixtures) / "fixed_shapes" / "alexnet-dynamic.onnx";
    if (onnx.empty() || !fs::exists(onnx))
        GTEST_SKIP() << "no AlexNet ONNX fixture (tests/data/make_onnx_fixtures.py needs python3-torch)";
    OnnxImportOptions options;
    options.batch = 128;
    options.keepWeights = false;
    const auto graph = importOnnx(onnx, options).graph;
    const auto t = profiler::importTrace(graph, trace);
    EXPECT_TRUE(t.deviceActivity);
    EXPECT_EQ(t.gpuName, "NVIDIA A100-PG509-200");
    ASSERT_TRUE(t.aligned);
    EXPECT_EQ(t.alignment.passes, 2); // the warm-up's and the measured one
    EXPECT_EQ(t.alignment.nodesCovered, t.alignment.nodes);
    EXPECT_GT(t.setupActivities, 0); // the parameters' initialisation and copies
    EXPECT_GT(t.setupNs, 4 * t.matchedNs); // 55.6 ms against 10.6 ms of the two passes
    EXPECT_GE(t.coverage(), 0.95) << t.matchedNs << " of " << t.totalNs << " ns";
    // The published forward time per pass (tests/data/published/alexnet_a100_forward.json: 5.3 ms).
    double perPass = 0;
    for (const auto& n : t.nodes)
        perPass += n.forwardNs;
    EXPECT_NEAR(perPass / 1e6, 5.3, 0.5);
}
