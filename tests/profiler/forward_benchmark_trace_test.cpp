// A forward benchmark's trace as public benchmark traces are recorded (one of AlexNet on an A100,
// found in a public repository, has this shape): the model's parameters initialised and copied to
// the GPU first, then a warm-up and a measured forward pass, each after its input's copy; no
// backward, no optimizer, no ProfilerStep, no range named after a node; the GPU described in
// deviceProperties.
#include "tiny_mlp.h"
#include "trace_import.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

// `setupOps` parameter initialisations (a kernel each) and one parameter copy, then two forward
// passes of the tiny MLP (loss included, a dropout after its second ReLU, which the graph, built
// without dropout as an eval-mode export is, has no node for), each after its input's copy.
std::string forwardBenchmarkTrace(int setupOps)
{
    std::ostringstream t;
    t << R"({"schemaVersion": 1, "deviceProperties": [
      {"id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85899345920},
      {"id": 1, "name": "NVIDIA A100-SXM4-40GB", "totalGlobalMem": 42505273344}],
      "traceEvents": [
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}})";
    int correlation = 0;
    double at = 0;
    // An operator on the main thread launching one activity of `category` on GPU 1 (the second
    // entry of deviceProperties, so the reader must take the kernels' device, not the first).
    const auto op = [&](const std::string& name, const char* dims, const std::string& category, const std::string& work,
                        double workUs) {
        ++correlation;
        t << ",\n{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"" << name
          << "\", \"pid\": 1, \"tid\": 1, \"ts\": " << at << ", \"dur\": 8, \"args\": {\"Input Dims\": " << dims
          << "}}";
        t << ",\n{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, \"tid\": 1, "
          << "\"ts\": " << at + 1 << ", \"dur\": 2, \"args\": {\"correlation\": " << correlation << "}}";
        t << ",\n{\"ph\": \"X\", \"cat\": \"" << category << "\", \"name\": \"" << work
          << "\", \"pid\": 1, \"tid\": 7, \"ts\": " << at + 3 << ", \"dur\": " << workUs
          << ", \"args\": {\"device\": 1, \"correlation\": " << correlation << "}}";
        at += 10 + workUs;
    };
    for (int i = 0; i < setupOps; ++i)
        op("aten::uniform_", "[[16, 16], [], [], []]", "kernel", "uniform_kernel", 5);
    op("aten::to", "[[16, 16], [], [], [], []]", "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 50);
    for (int pass = 0; pass < 2; ++pass) {
        op("aten::to", "[[4, 16], [], [], [], []]", "gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 3);
        op("aten::linear", "[[4, 16], [16, 16], [16]]", "kernel", "ampere_sgemm", 4);
        op("aten::relu", "[[4, 16]]", "kernel", "relu_kernel", 4);
        op("aten::linear", "[[4, 16], [16, 16], [16]]", "kernel", "ampere_sgemm", 4);
        op("aten::relu", "[[4, 16]]", "kernel", "relu_kernel", 4);
        op("aten::dropout", "[[4, 16], [], []]", "kernel", "fused_dropout_kernel", 2); // trained with it
        op("aten::linear", "[[4, 16], [4, 16], [4]]", "kernel", "ampere_sgemm", 4);
        op("aten::cross_entropy_loss", "[[4, 4], [4]]", "kernel", "nll_kernel", 4);
    }
    t << "\n]}";
    return t.str();
}

} // namespace

// Both passes align (the set-up before the first is not counted as a pass's operators); the
// set-up and the input copies are reported as such, not as unmatched work, and the dropout goes to
// the node before it, so the coverage of the forward time is whole; the GPU is the one that ran
// the kernels.
TEST(ForwardBenchmarkTrace, EveryPassAlignsAfterTheSetUpWhichIsNotForwardWork)
{
    const auto graph = tinyMlp();
    const auto file = fs::temp_directory_path() / ("ps_forward_bench_" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << forwardBenchmarkTrace(12);
    const auto t = profiler::importTrace(graph, file);
    fs::remove(file);
    ASSERT_TRUE(t.aligned);
    EXPECT_EQ(t.alignment.passes, 2);
    for (const auto& n : graph.nodes())
        EXPECT_EQ(t.nodes[n.id.index()].forwardOccurrences, 2) << n.name;
    // 12 initialisations, the parameters' copy and the first input's copy: all before any node ran.
    EXPECT_EQ(t.setupActivities, 14);
    EXPECT_DOUBLE_EQ(t.setupNs, 12 * 5000.0 + 50000.0 + 3000.0);
    EXPECT_EQ(t.inputCopyActivities, 1); // the second input's
    EXPECT_DOUBLE_EQ(t.inputCopyNs, 3000.0);
    EXPECT_EQ(t.unmatchedActivities, 0);
    EXPECT_EQ(t.matchedActivities, 14);
    // The dropout's kernel is the ReLU's before it: 4 + 2 us a pass.
    for (const auto& n : graph.nodes()) {
        if (n.name == "layers.1.relu") {
            EXPECT_DOUBLE_EQ(t.nodes[n.id.index()].forwardNs, 6000.0);
        }
    }
    EXPECT_EQ(t.matchedActivities + t.unmatchedActivities + t.setupActivities + t.inputCopyActivities, t.activities);
    EXPECT_DOUBLE_EQ(t.coverage(), 1.0);
    EXPECT_EQ(t.gpuName, "NVIDIA A100-SXM4-40GB");
    EXPECT_EQ(t.gpuMemoryBytes, 42505273344);
}
