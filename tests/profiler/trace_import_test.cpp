// Trace import: hand-built Nsight Systems exports and PyTorch profiler traces mapped onto a small
// MLP (nodes layers.{0,1}.linear.{matmul,bias_add}, layers.{0,1}.relu, head.*, loss; scopes
// layers.0 and layers.1), plus a real trace of the torch 1.13 CPU profiler when torch is installed.
#include "graph/op_cost.h"
#include "nsys_export.h"
#include "scratch_test.h"
#include "store/project_store.h"
#include "store/sqlite.h"
#include "tiny_mlp.h"
#include "trace_import.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

std::size_t nodeIndex(const Graph& g, const std::string& name)
{
    for (const auto& n : g.nodes()) {
        if (n.name == name)
            return n.id.index();
    }
    ADD_FAILURE() << "no node " << name;
    return 0;
}

// The share of `node` in a scope's forward time: its forward FLOPs over the scope's.
double forwardShare(const Graph& g, const std::string& node, const std::string& scope)
{
    const auto costs = computeOpCosts(g);
    double total = 0;
    for (const auto& n : g.nodes()) {
        if (n.scope == scope || n.scope.starts_with(scope + "."))
            total += costs[n.id.index()].forwardFlops;
    }
    return costs[nodeIndex(g, node)].forwardFlops / total;
}

class TraceImportTest : public test::ScratchTest
{
protected:
    fs::path write(const std::string& name, const std::string& text) const
    {
        std::ofstream(m_dir / name, std::ios::binary) << text;
        return m_dir / name;
    }
    std::string errorOf(const fs::path& path) const
    {
        try {
            (void)profiler::importTrace(m_graph, path);
        } catch (const Error& e) {
            return e.what();
        }
        return "no error";
    }

    Graph m_graph = tinyMlp();
};

// A GPU Kineto trace: kernels reach their ranges through the runtime call's correlation id.
constexpr const char* kKinetoTrace = R"({
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB"}],
  "traceEvents": [
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 20, "args": {"name": "pt_autograd_0"}},
    {"ph": "X", "cat": "user_annotation", "name": "layers.0", "pid": 1, "tid": 10, "ts": 0, "dur": 100},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 10, "ts": 10, "dur": 2,
     "args": {"correlation": 1}},
    {"ph": "X", "cat": "user_annotation", "name": "layers.0.linear.matmul", "pid": 1, "tid": 10, "ts": 20, "dur": 20},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 10, "ts": 22, "dur": 10,
     "args": {"External id": 7, "Sequence number": 42, "Fwd thread id": 0}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 10, "ts": 25, "dur": 2,
     "args": {"correlation": 2, "External id": 7}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 10, "ts": 200, "dur": 2,
     "args": {"correlation": 5}},
    {"ph": "X", "cat": "cpu_op", "name": "autograd::engine::evaluate_function: MmBackward0", "pid": 1, "tid": 20,
     "ts": 300, "dur": 50, "args": {"Sequence number": 42, "Fwd thread id": 1}},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 20, "ts": 310, "dur": 2,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "user_annotation", "name": "head.matmul.backward", "pid": 1, "tid": 20, "ts": 400, "dur": 20},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 20, "ts": 405, "dur": 2,
     "args": {"correlation": 4}},
    {"ph": "X", "cat": "kernel", "name": "gemm_a", "pid": 0, "tid": 7, "ts": 15, "dur": 30, "args": {"correlation": 1}},
    {"ph": "X", "cat": "kernel", "name": "gemm_b", "pid": 0, "tid": 7, "ts": 50, "dur": 50, "args": {"correlation": 2}},
    {"ph": "X", "cat": "kernel", "name": "gemm_bwd", "pid": 0, "tid": 7, "ts": 320, "dur": 40,
     "args": {"correlation": 3}},
    {"ph": "X", "cat": "kernel", "name": "gemm_head_bwd", "pid": 0, "tid": 7, "ts": 410, "dur": 20,
     "args": {"correlation": 4}},
    {"ph": "X", "cat": "kernel", "name": "elementwise", "pid": 0, "tid": 7, "ts": 205, "dur": 5,
     "args": {"correlation": 5}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 8, "ts": 500, "dur": 8, "args": {}},
    {"ph": "X", "cat": "gpu_user_annotation", "name": "layers.0", "pid": 0, "tid": 7, "ts": 15, "dur": 85}
  ]
})";

} // namespace

TEST_F(TraceImportTest, KinetoKernelsMapToTheInnermostRangeAndBackwardBySequenceNumber)
{
    const auto t = profiler::importTrace(m_graph, write("kineto.json", kKinetoTrace));
    EXPECT_EQ(t.format, "kineto-json");
    EXPECT_EQ(t.schemaVersion, "1");
    EXPECT_TRUE(t.deviceActivity);
    EXPECT_EQ(t.activities, 6);
    EXPECT_EQ(t.matchedActivities, 4);
    EXPECT_EQ(t.unmatchedActivities, 1); // the elementwise kernel outside any range
    EXPECT_DOUBLE_EQ(t.unmatchedNs, 5000);
    EXPECT_EQ(t.inputCopyActivities, 1); // the host-to-device memcpy after the first node's work
    EXPECT_DOUBLE_EQ(t.inputCopyNs, 8000);
    EXPECT_DOUBLE_EQ(t.totalNs, 153000);
    ASSERT_EQ(t.unmatched.size(), 1U);
    EXPECT_EQ(t.unmatched[0].name, "elementwise");
    EXPECT_NEAR(t.coverage(), 140.0 / 145.0, 1e-12);
    EXPECT_EQ(t.gpuName, "NVIDIA A100-SXM4-40GB"); // no totalGlobalMem: memory unknown
    EXPECT_EQ(t.gpuMemoryBytes, 0);

    const auto matmul = t.nodes[nodeIndex(m_graph, "layers.0.linear.matmul")];
    // gemm_b inside layers.0.linear.matmul (innermost wins over layers.0), plus matmul's FLOP share of
    // gemm_a, launched in layers.0 only; one occurrence (layers.0 encloses both).
    EXPECT_EQ(matmul.forwardOccurrences, 1);
    EXPECT_NEAR(matmul.forwardNs, 50000 + 30000 * forwardShare(m_graph, "layers.0.linear.matmul", "layers.0"), 1e-6);
    // MmBackward0 carries aten::mm's sequence number: its kernel is matmul's backward.
    EXPECT_EQ(matmul.backwardOccurrences, 1);
    EXPECT_DOUBLE_EQ(matmul.backwardNs, 40000);
    const auto relu = t.nodes[nodeIndex(m_graph, "layers.0.relu")];
    EXPECT_NEAR(relu.forwardNs, 30000 * forwardShare(m_graph, "layers.0.relu", "layers.0"), 1e-6);
    EXPECT_DOUBLE_EQ(t.nodes[nodeIndex(m_graph, "head.matmul")].backwardNs, 20000);
    EXPECT_DOUBLE_EQ(t.nodes[nodeIndex(m_graph, "head.matmul")].forwardNs, 0);
    EXPECT_DOUBLE_EQ(t.nodes[nodeIndex(m_graph, "layers.1.relu")].forwardNs, 0);
    EXPECT_EQ(t.nodesMatched, 4U); // layers.0's matmul, bias_add, relu; head.matmul
}

// The legacy torch profiler's array form (no categories) of a CPU-only run: each event's self
// time goes to the innermost enclosing node range; `backward` marks what it encloses.
TEST_F(TraceImportTest, CpuSelfTimesFollowTheInnermostRangeAndBackwardMarkers)
{
    const auto path = write("legacy.json", R"([
      {"name": "layers.0", "ph": "X", "ts": 0, "dur": 100, "tid": 1, "pid": "CPU functions", "args": {}},
      {"name": "layers.0.relu", "ph": "X", "ts": 10, "dur": 20, "tid": 1, "pid": "CPU functions", "args": {}},
      {"name": "aten::relu", "ph": "X", "ts": 12, "dur": 16, "tid": 1, "pid": "CPU functions", "args": {}},
      {"name": "aten::zeros", "ph": "X", "ts": 200, "dur": 10, "tid": 1, "pid": "CPU functions", "args": {}},
      {"name": "backward", "ph": "X", "ts": 300, "dur": 100, "tid": 1, "pid": "CPU functions", "args": {}},
      {"name": "layers.1.relu", "ph": "X", "ts": 310, "dur": 20, "tid": 1, "pid": "CPU functions", "args": {}},
      {"name": "aten::mm", "ph": "X", "ts": 340, "dur": 10, "tid": 1, "pid": "CPU functions", "args": {}}
    ])");
    const auto t = profiler::importTrace(m_graph, path);
    EXPECT_EQ(t.schemaVersion, "legacy");
    EXPECT_FALSE(t.deviceActivity);
    EXPECT_EQ(t.ranges, 3);
    EXPECT_DOUBLE_EQ(t.totalNs, 210000); // self times sum to the busy time: nothing counted twice
    EXPECT_EQ(t.unmatchedActivities, 3); // aten::zeros, aten::mm, backward's own time
    EXPECT_DOUBLE_EQ(t.unmatchedNs, 90000);
    const auto relu0 = t.nodes[nodeIndex(m_graph, "layers.0.relu")];
    EXPECT_NEAR(relu0.forwardNs, 4000 + 16000 + 80000 * forwardShare(m_graph, "layers.0.relu", "layers.0"), 1e-6);
    EXPECT_DOUBLE_EQ(relu0.backwardNs, 0);
    const auto relu1 = t.nodes[nodeIndex(m_graph, "layers.1.relu")];
    EXPECT_DOUBLE_EQ(relu1.forwardNs, 0);
    EXPECT_DOUBLE_EQ(relu1.backwardNs, 20000);
}

TEST_F(TraceImportTest, PhaseSuffixesAndOccurrencesGiveTheMeanPerMicroBatch)
{
    const auto path = write("suffix.json", R"({"traceEvents": [
      {"name": "head.matmul:fwd", "ph": "X", "cat": "user_annotation", "ts": 0, "dur": 10, "tid": 1, "pid": 1},
      {"name": "head.matmul:fwd", "ph": "X", "cat": "user_annotation", "ts": 20, "dur": 30, "tid": 1, "pid": 1},
      {"name": "head.matmul_bwd", "ph": "X", "cat": "user_annotation", "ts": 60, "dur": 8, "tid": 1, "pid": 1},
      {"name": "head.matmul.forward", "ph": "X", "cat": "user_annotation", "ts": 70, "dur": 5, "tid": 2, "pid": 1},
      {"name": "head.matmul.backwards", "ph": "X", "cat": "user_annotation", "ts": 80, "dur": 5, "tid": 2, "pid": 1}
    ]})");
    const auto t = profiler::importTrace(m_graph, path);
    EXPECT_EQ(t.schemaVersion, "unversioned");
    const auto head = t.nodes[nodeIndex(m_graph, "head.matmul")];
    EXPECT_EQ(head.forwardOccurrences, 3);
    EXPECT_DOUBLE_EQ(head.forwardNs, 15000); // (10 + 30 + 5) / 3
    EXPECT_EQ(head.backwardOccurrences, 1);
    EXPECT_DOUBLE_EQ(head.backwardNs, 8000);
    EXPECT_EQ(t.unmatchedActivities, 1); // "head.matmul.backwards" names no node
}

namespace {

} // namespace

TEST_F(TraceImportTest, NsysExportKernelsMapThroughTheirLaunchingThreadsRanges)
{
    const auto path = m_dir / "report.sqlite";
    test::createNsysExport(path, "3.11.1");
    const auto t = profiler::importTrace(m_graph, path);
    EXPECT_EQ(t.format, "nsys-sqlite");
    EXPECT_EQ(t.schemaVersion, "3.11.1");
    EXPECT_EQ(t.activities, 6);
    EXPECT_EQ(t.unmatchedActivities, 1); // a kernel without its launch
    EXPECT_DOUBLE_EQ(t.unmatchedNs, 40);
    EXPECT_EQ(t.inputCopyActivities, 1); // the memcpy, host to device (copyKind 1), outside every range
    EXPECT_DOUBLE_EQ(t.inputCopyNs, 200);
    EXPECT_EQ(t.gpuName, "NVIDIA H100 80GB HBM3"); // TARGET_INFO_GPU's row of the device that ran the work
    EXPECT_EQ(t.gpuMemoryBytes, 85520809984);
    EXPECT_DOUBLE_EQ(t.nodes[nodeIndex(m_graph, "layers.0.linear.matmul")].forwardNs, 100);
    const auto relu1 = t.nodes[nodeIndex(m_graph, "layers.1.relu")];
    EXPECT_NEAR(relu1.forwardNs, 50 + 300 * forwardShare(m_graph, "layers.1.relu", "layers.1"), 1e-9);
    EXPECT_NEAR(t.nodes[nodeIndex(m_graph, "layers.1.linear.matmul")].forwardNs,
        300 * forwardShare(m_graph, "layers.1.linear.matmul", "layers.1"), 1e-9);
    // Launched from PyTorch's autograd thread: backward.
    const auto head = t.nodes[nodeIndex(m_graph, "head.matmul")];
    EXPECT_DOUBLE_EQ(head.forwardNs, 0);
    EXPECT_DOUBLE_EQ(head.backwardNs, 70);
    EXPECT_EQ(t.nodesMatched, 5U); // layers.0's matmul, layers.1's three nodes, head.matmul

    const auto profile = profiler::toImportedProfile(m_graph, t, "a100-40gb", 4);
    EXPECT_EQ(profile.source, "imported");
    ASSERT_EQ(profile.nodes.size(), m_graph.nodeCount());
    EXPECT_DOUBLE_EQ(profile.nodes[nodeIndex(m_graph, "head.matmul")].backwardNs.at(4), 70);
    EXPECT_DOUBLE_EQ(profile.nodes[nodeIndex(m_graph, "head.matmul")].backwardNs.at(8), 140);
}

TEST_F(TraceImportTest, NsysExportOfAnUnknownSchemaOrWithoutItsTablesIsRefused)
{
    const auto future = m_dir / "future.sqlite";
    test::createNsysExport(future, "9.0.0");
    const auto e = errorOf(future);
    EXPECT_NE(e.find("future.sqlite"), std::string::npos) << e;
    EXPECT_NE(e.find("schema version '9.0.0' is unknown"), std::string::npos) << e;

    const auto partial = m_dir / "partial.sqlite";
    test::createNsysExport(partial, "3.15.1");
    sql::Database(partial, sql::Database::Mode::ReadWrite).exec("DROP TABLE NVTX_EVENTS");
    const auto missing = errorOf(partial);
    EXPECT_NE(missing.find("partial.sqlite"), std::string::npos) << missing;
    EXPECT_NE(missing.find("misses table(s) NVTX_EVENTS"), std::string::npos) << missing;

    const auto old = m_dir / "old.sqlite";
    test::createNsysExport(old, "3.1.7");
    sql::Database(old, sql::Database::Mode::ReadWrite).exec("DROP TABLE META_DATA_EXPORT");
    EXPECT_NE(errorOf(old).find("without a schema version"), std::string::npos) << errorOf(old);
}

// Found by tests/fuzz (regressions/fuzz_trace_import): nlohmann's exceptions escaped importTrace.
TEST_F(TraceImportTest, JsonOfTheWrongTypesIsAnError)
{
    const auto wrongType = write("ph.json", R"({"traceEvents": [{"ph": 1, "name": "x", "ts": 0, "dur": 1}]})");
    EXPECT_NE(errorOf(wrongType).find("ph.json' is not a trace this build reads"), std::string::npos)
        << errorOf(wrongType);
    const auto overflow = write("big.json", "[5e999]");
    EXPECT_NE(errorOf(overflow).find("big.json' is not valid JSON"), std::string::npos) << errorOf(overflow);
}

// Ids out of the int64 range or fractional (found by the fuzzer: 1e85 was converted to an
// integer, undefined behaviour) read as absent: the kernel stays unmatched, nothing crashes.
TEST_F(TraceImportTest, CorrelationIdsOutOfRangeAreIgnored)
{
    std::string trace = kKinetoTrace;
    for (const char* id : { "1e85", "-1e85", "2.5", "\"nan\"" }) {
        auto mutated = trace;
        const std::string from = R"("correlation": 3)";
        const auto at = mutated.find(from);
        ASSERT_NE(at, std::string::npos);
        mutated.replace(at, from.size(), std::string(R"("correlation": )") + id);
        const auto t = profiler::importTrace(m_graph, write("ids.json", mutated));
        EXPECT_EQ(t.activities, 6) << id;
        EXPECT_LT(t.matchedActivities, 4) << id; // that launch's kernel lost its link
    }
}

TEST_F(TraceImportTest, WrongFileKindsGiveOneLineErrorsNamingTheFile)
{
    const auto random = write("noise.bin", std::string("\x07\x91\xfe\x00\x13garbage", 12));
    EXPECT_NE(errorOf(random).find("noise.bin' is neither an Nsight Systems"), std::string::npos) << errorOf(random);
    const auto json = write("config.json", R"({"name": "not a trace"})");
    EXPECT_NE(errorOf(json).find("config.json' is JSON but not a Chrome"), std::string::npos) << errorOf(json);
    const auto broken = write("broken.json", "{\"traceEvents\": [");
    EXPECT_NE(errorOf(broken).find("broken.json' is not valid JSON"), std::string::npos) << errorOf(broken);
    const auto noEvents = write("empty.json", R"({"traceEvents": [{"ph": "M", "name": "process_name"}]})");
    EXPECT_NE(errorOf(noEvents).find("has no trace events"), std::string::npos) << errorOf(noEvents);
    const auto foreign = m_dir / "other.sqlite";
    sql::Database(foreign, sql::Database::Mode::Create).exec("CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    EXPECT_NE(errorOf(foreign).find("other.sqlite' is an SQLite database but not an Nsight Systems export"),
        std::string::npos)
        << errorOf(foreign);
    const auto project = m_dir / "p.pstudio";
    writeNewProject(project, m_graph, false);
    EXPECT_NE(errorOf(project).find("p.pstudio' is a PipeStudio project, not a trace"), std::string::npos)
        << errorOf(project);
    for (const auto& e : { errorOf(random), errorOf(json), errorOf(foreign), errorOf(project) })
        EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// A real trace: the torch 1.13 CPU profiler over the same MLP written node by node, each node's
// forward in a record_function range named after it and its backward (torch.autograd.grad on the
// node alone) in "<node>.backward".
TEST_F(TraceImportTest, RealTorchCpuProfilerTraceMapsEveryNamedNode)
{
    const char* python = "/usr/bin/python3";
    if (!fs::exists(python) || std::system((std::string(python) + " -c 'import torch' 2>/dev/null").c_str()) != 0)
        GTEST_SKIP() << "python3 with torch is not installed: no real PyTorch profiler trace to import";
    const auto script = write("trace_mlp.py", R"PY(
import sys
import torch
import torch.nn.functional as F
from torch.profiler import profile, record_function, ProfilerActivity

torch.manual_seed(0)
B, H, V, LAYERS = 4, 16, 4, 2
weights = [(torch.randn(H, H, requires_grad=True), torch.randn(H, requires_grad=True)) for _ in range(LAYERS)]
head = (torch.randn(H, V, requires_grad=True), torch.randn(V, requires_grad=True))

def step():
    tape = []
    def node(name, fn, *sources):
        inputs = [t.detach().requires_grad_() if t.grad_fn is not None else t for t in sources]
        with record_function(name):
            out = fn(*inputs)
        tape.append((name, out, sources, inputs))
        return out
    x = torch.randn(B, H)
    labels = torch.randint(0, V, (B,))
    for i, (w, b) in enumerate(weights):
        y = node(f"layers.{i}.linear.matmul", torch.matmul, x, w)
        y = node(f"layers.{i}.linear.bias_add", torch.add, y, b)
        x = node(f"layers.{i}.relu", torch.relu, y)
    logits = node("head.bias_add", torch.add, node("head.matmul", torch.matmul, x, head[0]), head[1])
    loss = node("loss", lambda l: F.cross_entropy(l, labels), logits)
    grads = {id(loss): torch.ones(())}
    for name, out, sources, inputs in reversed(tape):
        pairs = [(s, t) for s, t in zip(sources, inputs) if t.requires_grad]
        with record_function(name + ".backward"):
            got = torch.autograd.grad(out, [t for _, t in pairs], grads[id(out)])
        for (s, _), g in zip(pairs, got):
            grads[id(s)] = g
    return tape

with profile(activities=[ProfilerActivity.CPU]) as prof:
    for _ in range(2):
        step()
prof.export_chrome_trace(sys.argv[1])
)PY");
    const auto trace = m_dir / "torch_trace.json";
    const auto command = std::string(python) + " " + script.string() + " " + trace.string() + " > "
        + (m_dir / "python.log").string() + " 2>&1";
    ASSERT_EQ(std::system(command.c_str()), 0) << "the torch script failed: see " << (m_dir / "python.log");
    const auto t = profiler::importTrace(m_graph, trace);
    EXPECT_FALSE(t.deviceActivity);
    EXPECT_GT(t.matchedActivities, 0);
    EXPECT_GT(t.unmatchedActivities, 0); // the profiler's own setup ops, torch.randn outside every range
    for (const auto& n : m_graph.nodes()) {
        const auto& time = t.nodes[n.id.index()];
        EXPECT_EQ(time.forwardOccurrences, 2) << n.name; // two steps
        EXPECT_GT(time.forwardNs, 0) << n.name;
        EXPECT_EQ(time.backwardOccurrences, 2) << n.name;
        EXPECT_GT(time.backwardNs, 0) << n.name;
    }
    EXPECT_EQ(t.nodesMatched, m_graph.nodeCount());
}
