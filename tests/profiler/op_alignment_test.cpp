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
#include "tiny_mlp.h"
#include "trace_import.h"
#include "trace_timeline.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>
#include <zlib.h>

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

// A hand-written Kineto trace of one training step of the zoo MLP (2 layers of 16, 4 classes,
// batch 4) with no range named after a node: each aten operator launches one kernel from its own
// runtime call; autograd's thread runs the backward functions with the forward ops' sequence
// numbers; SGD's step is an optimizer range. Also read gzip-compressed.
std::string mlpStepTrace(int forwards = 1)
{
    std::ostringstream t;
    t << R"({"schemaVersion": 1, "traceEvents": [
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "pt_autograd_0"}})";
    int correlation = 0;
    const auto op = [&](const char* name, int tid, double ts, int seq, const char* dims) {
        ++correlation;
        t << ",\n{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"" << name << "\", \"pid\": 1, \"tid\": " << tid
          << ", \"ts\": " << ts << ", \"dur\": 8, \"args\": {\"Sequence number\": " << seq
          << ", \"Input Dims\": " << dims << "}}";
        t << ",\n{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1, \"tid\": "
          << tid << ", \"ts\": " << ts + 1 << ", \"dur\": 2, \"args\": {\"correlation\": " << correlation << "}}";
        t << ",\n{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k" << correlation
          << "\", \"pid\": 0, \"tid\": 7, \"ts\": " << ts + 3
          << ", \"dur\": 4, \"args\": {\"correlation\": " << correlation << "}}";
    };
    for (int f = 0; f < forwards; ++f) { // GPipe's forwards back to back, then their backwards
        const double at = 60.0 * f;
        const int seq = 10 * f;
        op("aten::linear", 1, at, seq + 1, "[[4, 16], [16, 16], [16]]");
        op("aten::relu", 1, at + 10, seq + 2, "[[4, 16]]");
        op("aten::linear", 1, at + 20, seq + 3, "[[4, 16], [16, 16], [16]]");
        op("aten::relu", 1, at + 30, seq + 4, "[[4, 16]]");
        op("aten::linear", 1, at + 40, seq + 5, "[[4, 16], [4, 16], [4]]");
        op("aten::cross_entropy_loss", 1, at + 50, seq + 6, "[[4, 4], [4]]");
    }
    for (int f = 0; f < forwards; ++f) {
        for (int i = 0; i < 6; ++i) // backward, last operator first
            op(i % 2 == 0 ? "NllLossBackward0" : "AddmmBackward0", 2, 150 + 60 * f + 10 * i, 10 * f + 6 - i, "[]");
    }
    t << R"(,
      {"ph": "X", "cat": "user_annotation", "name": "Optimizer.step#SGD.step", "pid": 1, "tid": 1, "ts": 400, "dur": 20})";
    op("aten::_foreach_add_", 1, 405, -1, "[]");
    t << "\n]}";
    return t.str();
}

TEST(OpAlignment, OperatorsWithoutNamedRangesLandOnTheirNodes)
{
    const auto graph = tinyMlp();
    const auto dir = fs::temp_directory_path() / ("ps_align_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const auto text = mlpStepTrace();
    std::ofstream(dir / "step.json") << text;
    gzFile gz = gzopen((dir / "step.json.gz").string().c_str(), "wb");
    ASSERT_NE(gz, nullptr);
    gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
    gzclose(gz);
    for (const auto* file : { "step.json", "step.json.gz" }) {
        SCOPED_TRACE(file);
        const auto t = profiler::importTrace(graph, dir / file);
        ASSERT_TRUE(t.aligned);
        EXPECT_EQ(t.ranges, 0); // the trace's own ranges: none names a node
        EXPECT_EQ(t.alignment.passes, 1);
        EXPECT_EQ(t.alignment.alignedOperators, 6);
        EXPECT_EQ(t.alignment.nodesCovered, graph.nodeCount());
        EXPECT_EQ(t.nodesMatched, graph.nodeCount());
        EXPECT_EQ(t.optimizerActivities, 1);
        EXPECT_EQ(t.unmatchedActivities, 0);
        EXPECT_EQ(t.matchedActivities + t.unmatchedActivities + t.optimizerActivities, t.activities);
        for (const auto& n : graph.nodes()) {
            const auto& time = t.nodes[n.id.index()];
            EXPECT_EQ(time.forwardOccurrences, 1) << n.name;
            EXPECT_GT(time.forwardNs, 0) << n.name;
        }
        // Each linear's kernel is split between its MatMul and BiasAdd by FLOPs; its backward
        // (sequence number) lands on the same two nodes.
        const auto& matmul = t.nodes[1 - 1];
        const auto& biasAdd = t.nodes[1];
        EXPECT_NEAR(matmul.forwardNs + biasAdd.forwardNs, 4000, 1e-6);
        EXPECT_GT(matmul.backwardNs, 0);
        EXPECT_NEAR(t.nodes[2].forwardNs, 4000, 1e-6); // relu
    }
    fs::remove_all(dir);
}

// Two forwards back to back (GPipe, gradient accumulation written F F B B) are two passes: each
// node occurs twice, and each backward follows its own forward by sequence number.
TEST(OpAlignment, ForwardsBackToBackAreSeparatePasses)
{
    const auto graph = tinyMlp();
    const auto file = fs::temp_directory_path() / ("ps_align_ffbb_" + std::to_string(::getpid()) + ".json");
    std::ofstream(file) << mlpStepTrace(2);
    const auto t = profiler::importTrace(graph, file);
    fs::remove(file);
    ASSERT_TRUE(t.aligned);
    EXPECT_EQ(t.alignment.passes, 2);
    for (const auto& n : graph.nodes()) {
        const auto& time = t.nodes[n.id.index()];
        EXPECT_EQ(time.forwardOccurrences, 2) << n.name;
    }
    EXPECT_EQ(t.nodes[0].backwardOccurrences, 2); // layers.0.linear.matmul: once per micro-batch
    EXPECT_NEAR(t.nodes[2].forwardNs, 4000, 1e-6); // a relu's kernel, per micro-batch
}

TEST(OpAlignment, AtenOperatorsNameTheKindsTheyCompute)
{
    const auto linear = profiler::atenOpKinds("aten::linear");
    EXPECT_NE(std::find(linear.begin(), linear.end(), OpType::MatMul), linear.end());
    EXPECT_EQ(
        profiler::atenOpKinds("aten::layer_norm"), (std::vector<OpType> { OpType::LayerNorm, OpType::ReduceMean }));
    EXPECT_EQ(profiler::atenOpKinds("aten::sin"), (std::vector<OpType> { OpType::Sin }));
    EXPECT_EQ(profiler::atenOpKinds("aten::cos"), (std::vector<OpType> { OpType::Cos }));
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
// Dropout, which the eval-mode export has no node for, goes to the operator before it; what stays
// unmatched is mostly concatenation and gradient accumulation.
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
        // Without shapes an out-of-order operator other than a GEMM or convolution is not
        // placed (ResNet: one ReLU of the block whose branch the importer sorted first).
        EXPECT_GE(10 * t.alignment.nodesCovered, 9 * t.alignment.nodes);
        EXPECT_GE(coverage(t), 0.9) << t.matchedNs << " of " << t.totalNs - t.optimizerNs << " ns";
        // The per-node times (means per step) add up to a step's forward and backward work.
        double nodes = 0;
        for (const auto& time : t.nodes)
            nodes += time.forwardNs + time.backwardNs;
        EXPECT_NEAR(nodes / ((t.totalNs - t.optimizerNs) / 3), 1.0, 0.1);
        for (const auto& n : graph.nodes()) {
            if (n.op == OpType::MatMul || n.op == OpType::Conv) {
                EXPECT_GT(t.nodes[n.id.index()].backwardNs, 0) << n.name; // aligned by name in reverse
            }
        }
    }
}

// The GPT trained as a two-stage pipeline by two processes (gloo), each rank profiling its own
// steps (the fixture's gpt.rank0/1.cpu.trace.json): each trace aligned with its stage's nodes only
// (else stage 1's block would land on block 0, whose operators look the same), merged with every
// node's times from its own stage. The ranks' sends and receive waits are communication, neither
// node work nor unmatched.
TEST(OpAlignment, OneTracePerPipelineRankMergesByStage)
{
    const auto models = modelsDir();
    if (models.empty() || !fs::exists(models / "gpt.rank1.cpu.trace.json"))
        GTEST_SKIP() << "no pipeline traces of the GPT (tests/data/make_trace_models.py needs python3-torch)";
    const auto graph = trainingGraph(models / "gpt.onnx");
    const auto& nodes = graph.nodes();
    const auto cut = static_cast<std::size_t>(std::find_if(nodes.begin(), nodes.end(), [](const Node& n) {
        return n.name == "/h.1/ln_1/LayerNormalization";
    }) - nodes.begin());
    ASSERT_LT(cut, nodes.size());
    const std::vector<profiler::NodeWindow> windows { { 0, cut }, { cut, nodes.size() } };
    std::vector<profiler::TraceImport> stages;
    for (int r = 0; r < 2; ++r) {
        SCOPED_TRACE(r);
        const auto trace = models / ("gpt.rank" + std::to_string(r) + ".cpu.trace.json");
        auto t = profiler::importTrace(graph, trace, windows[static_cast<std::size_t>(r)]);
        ASSERT_TRUE(t.aligned);
        EXPECT_GT(t.communicationNs, 0);
        for (const auto& u : t.unmatched)
            EXPECT_FALSE(profiler::isCommunication(u.name)) << u.name;
        EXPECT_GE(t.coverage(), 0.85);
        EXPECT_EQ(t.alignment.nodesCovered, t.alignment.nodes); // every computing node of the stage
        ASSERT_EQ(t.iterations.size(), 3U); // ProfilerStep ranges
        // The stage's per-node times (means per micro-batch) add up to its work per micro-batch
        // (3 steps of 2).
        double sum = 0;
        for (auto v = windows[static_cast<std::size_t>(r)].first; v < windows[static_cast<std::size_t>(r)].end; ++v)
            sum += t.nodes[v].forwardNs + t.nodes[v].backwardNs;
        EXPECT_NEAR(sum / (t.matchedNs / 6), 1.0, 0.15);
        stages.push_back(std::move(t));
    }
    // Aligned with the whole graph instead, stage 1's operators take block 0's nodes.
    const auto unwindowed = profiler::importTrace(graph, models / "gpt.rank1.cpu.trace.json");
    const auto block0 = static_cast<std::size_t>(std::find_if(nodes.begin(), nodes.end(), [](const Node& n) {
        return n.name == "/h.0/attn/c_attn/MatMul";
    }) - nodes.begin());
    ASSERT_LT(block0, cut);
    EXPECT_GT(unwindowed.nodes[block0].forwardOccurrences, 0);
    EXPECT_EQ(stages[1].nodes[block0].forwardOccurrences, 0);
    const auto merged = profiler::mergeStageTraces(stages, windows);
    EXPECT_NEAR(merged.matchedNs, stages[0].matchedNs + stages[1].matchedNs, 1e-6);
    EXPECT_NEAR(merged.communicationNs, stages[0].communicationNs + stages[1].communicationNs, 1e-6);
    for (std::size_t v = 0; v < nodes.size(); ++v) {
        const auto& own = stages[v < cut ? 0 : 1].nodes[v];
        EXPECT_EQ(merged.nodes[v].forwardNs, own.forwardNs) << nodes[v].name;
        EXPECT_EQ(merged.nodes[v].backwardNs, own.backwardNs) << nodes[v].name;
        if (nodes[v].op == OpType::MatMul) {
            EXPECT_GT(merged.nodes[v].forwardNs, 0) << nodes[v].name;
            EXPECT_GT(merged.nodes[v].backwardNs, 0) << nodes[v].name;
        }
    }
    EXPECT_THROW((void)profiler::mergeStageTraces(stages, { windows[0] }), Error);
}
