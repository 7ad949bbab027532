// Operator alignment (op_alignment.h) on real, unannotated torch.profiler traces of training steps:
// the H100 traces kept in tests/data/torch_traces/h100 (recorded by tests/gpu/torch_on_gpu.py
// traces, PyTorch 2.11: kernels, correlation ids, shapes, sequence numbers) and CPU traces of the
// same steps recorded here by Debian's torch 1.13 (its legacy profiler: no shapes, no sequence
// numbers), imported onto the ONNX exports of the same models (tests/data/make_trace_models.py,
// the `trace_models` fixture).
#include "aten_ops.h"
#include "graph/loss.h"
#include "onnx/onnx_import.h"
#include "op_alignment.h"
#include "trace_import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>

using namespace ps;
namespace fs = std::filesystem;

namespace {

// The ONNX exports and CPU traces made by the fixture; empty when it did not run or had no torch.
fs::path modelsDir()
{
    const char* dir = std::getenv("PS_TRACE_MODELS");
    return dir != nullptr && fs::exists(fs::path(dir) / "gpt.onnx") ? fs::path(dir) : fs::path();
}

Graph trainingGraph(const fs::path& onnx)
{
    return attachLoss(importOnnx(onnx).graph, LossSpec {});
}

// The share of the forward and backward work (the optimizer step's left out) attributed to nodes.
double coverage(const profiler::TraceImport& t)
{
    return t.matchedNs / (t.totalNs - t.optimizerNs);
}

} // namespace

TEST(OpAlignment, AtenOperatorsNameTheKindsTheyCompute)
{
    const auto linear = profiler::atenOpKinds("aten::linear");
    EXPECT_NE(std::find(linear.begin(), linear.end(), OpType::MatMul), linear.end());
    EXPECT_EQ(
        profiler::atenOpKinds("aten::layer_norm"), (std::vector<OpType> { OpType::LayerNorm, OpType::ReduceMean }));
    EXPECT_TRUE(profiler::atenOpKinds("aten::view").empty()); // a view: no node of its own
    EXPECT_TRUE(profiler::atenOpKinds("aten::no_such_op").empty());
}

// An unannotated trace of three training steps on an H100 imports with nearly all of its
// operators' device time on nodes: every computing node of the graph covered, backward kernels
// following their forward operators by autograd sequence number, AdamW's kernels reported as
// the optimizer's, nothing attributed twice.
TEST(OpAlignment, UnannotatedH100TracesCoverTheirGraphs)
{
    const auto models = modelsDir();
    if (models.empty())
        GTEST_SKIP() << "no ONNX exports of the traced models (tests/data/make_trace_models.py needs python3-torch)";
    const fs::path traces = fs::path(PS_SOURCE_DIR) / "tests" / "data" / "torch_traces" / "h100";
    for (const std::string name : { "gpt", "resnet" }) {
        SCOPED_TRACE(name);
        const auto graph = trainingGraph(models / (name + ".onnx"));
        const auto t = profiler::importTrace(graph, traces / (name + ".trace.json.gz")); // gzip read directly
        EXPECT_TRUE(t.deviceActivity);
        ASSERT_TRUE(t.aligned);
        EXPECT_EQ(t.alignment.passes, 3); // three steps
        EXPECT_EQ(t.alignment.nodesCovered, t.alignment.nodes);
        EXPECT_GE(coverage(t), 0.9) << t.matchedNs << " of " << t.totalNs - t.optimizerNs << " ns";
        EXPECT_GT(t.optimizerNs, 0);
        EXPECT_NEAR(t.matchedNs + t.unmatchedNs + t.optimizerNs, t.totalNs, 1e-6 * t.totalNs);
        for (const auto& n : graph.nodes()) {
            const auto& time = t.nodes[n.id.index()];
            if (n.op == OpType::MatMul || n.op == OpType::Conv || n.op == OpType::LayerNorm) {
                EXPECT_EQ(time.forwardOccurrences, 3) << n.name;
                EXPECT_GT(time.forwardNs, 0) << n.name;
                EXPECT_GT(time.backwardNs, 0) << n.name; // linked by sequence number
            }
        }
    }
}

// The same steps on the CPU, recorded by torch 1.13's legacy profiler: no shapes, no sequence
// numbers. Forward operators align by order and kind, backward functions by name in reverse order.
// What stays unmatched is mostly dropout's work, which the eval-mode export has no node for.
TEST(OpAlignment, LegacyCpuTracesAlignWithoutShapesOrSequenceNumbers)
{
    const auto models = modelsDir();
    if (models.empty())
        GTEST_SKIP() << "no ONNX exports or CPU traces of the traced models (needs python3-torch)";
    for (const std::string name : { "gpt", "resnet" }) {
        SCOPED_TRACE(name);
        const auto graph = trainingGraph(models / (name + ".onnx"));
        const auto t = profiler::importTrace(graph, models / (name + ".cpu.trace.json"));
        EXPECT_FALSE(t.deviceActivity);
        ASSERT_TRUE(t.aligned);
        EXPECT_EQ(t.alignment.passes, 3);
        EXPECT_EQ(t.alignment.nodesCovered, t.alignment.nodes);
        EXPECT_GE(coverage(t), 0.85) << t.matchedNs << " of " << t.totalNs - t.optimizerNs << " ns";
        // The per-node times (means per step) add up to a step's forward and backward work.
        double nodes = 0;
        for (const auto& time : t.nodes)
            nodes += time.forwardNs + time.backwardNs;
        EXPECT_NEAR(nodes / ((t.totalNs - t.optimizerNs) / 3), 1.0, 0.15);
        for (const auto& n : graph.nodes()) {
            if (n.op == OpType::MatMul || n.op == OpType::Conv) {
                EXPECT_GT(t.nodes[n.id.index()].backwardNs, 0) << n.name; // aligned by name in reverse
            }
        }
    }
}
