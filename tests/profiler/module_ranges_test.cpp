// Module calls of with_stack traces (module_ranges.h): "nn.Module: Linear_1" ranges named after the
// model's modules by class and order, the calls the counts leave out named by the operators aligned
// inside them, and Python's own functions counted as no work.
#include "module_ranges.h"
#include "onnx/onnx_import.h"
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

// The zoo MLP as a torch.export import would have it: modules Layer (layers.0, layers.1, each
// with its relu) holding a Linear (its matmul and bias add), the head a Linear, the loss in the
// root module's forward, and the module classes the import keeps.
Graph mlpWithModules()
{
    const auto plain = tinyMlp();
    auto info = plain.info();
    info.configJson = importConfigJson({}, {},
        { { "", "Mlp" }, { "layers.0", "Layer" }, { "layers.0.linear", "Linear" }, { "layers.1", "Layer" },
            { "layers.1.linear", "Linear" }, { "head", "Linear" } });
    Graph g(info);
    for (const auto& t : plain.tensors())
        (void)g.addTensor(t);
    for (auto n : plain.nodes()) {
        const auto dot = n.name.find_last_of('.');
        n.scope = n.name == "loss" ? "" : n.name.substr(0, dot);
        (void)g.addNode(n);
    }
    g.setOutputs(plain.outputs());
    return g;
}

// One CPU training step with_stack: module calls and Python functions around the operators. The
// first Linear runs a custom operator no table knows; a Dropout module ran that the model has no
// node for; a Python function wraps the first relu (its self time is the interpreter's).
std::string withStackTrace()
{
    std::ostringstream t;
    t << R"({"schemaVersion": 1, "traceEvents": [
      {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "pt_autograd_0"}})";
    const auto span = [&t](const char* cat, const char* name, int tid, double ts, double dur, int seq = -1,
                          const char* dims = nullptr) {
        t << ",\n{\"ph\": \"X\", \"cat\": \"" << cat << "\", \"name\": \"" << name << "\", \"pid\": 1, \"tid\": " << tid
          << ", \"ts\": " << ts << ", \"dur\": " << dur << ", \"args\": {";
        if (seq >= 0)
            t << "\"Sequence number\": " << seq << (dims ? ", " : "");
        if (dims)
            t << "\"Input Dims\": " << dims;
        t << "}}";
    };
    span("python_function", "nn.Module: Mlp_0", 1, 0, 200);
    span("python_function", "nn.Module: Layer_0", 1, 5, 60);
    span("python_function", "nn.Module: Linear_0", 1, 6, 26);
    span("cpu_op", "mylib::fused_linear", 1, 8, 20, 1, "[[4, 16], [16, 16], [16]]");
    span("python_function", "<built-in method relu of type object>", 1, 34, 16);
    span("cpu_op", "aten::relu", 1, 35, 10, 2, "[[4, 16]]");
    span("python_function", "nn.Module: Dropout_0", 1, 52, 6);
    span("python_function", "nn.Module: Layer_1", 1, 66, 55);
    span("python_function", "nn.Module: Linear_1", 1, 67, 24);
    span("cpu_op", "aten::linear", 1, 68, 20, 3, "[[4, 16], [16, 16], [16]]");
    span("cpu_op", "aten::relu", 1, 95, 10, 4, "[[4, 16]]");
    span("python_function", "nn.Module: Linear_2", 1, 125, 25);
    span("cpu_op", "aten::linear", 1, 126, 20, 5, "[[4, 16], [4, 16], [4]]");
    span("cpu_op", "aten::cross_entropy_loss", 1, 155, 10, 6, "[[4, 4], [4]]");
    const char* backward[] = { "NllLossBackward0", "AddmmBackward0", "ReluBackward0", "AddmmBackward0", "ReluBackward0",
        "FusedLinearBackward0" };
    for (int i = 0; i < 6; ++i)
        span("cpu_op", backward[i], 2, 250 + 20 * i, 10, 6 - i);
    t << "\n]}";
    return t.str();
}

double forwardOf(const profiler::TraceImport& t, const Graph& g, const std::string& node)
{
    for (const auto& n : g.nodes()) {
        if (n.name == node)
            return t.nodes[n.id.index()].forwardNs;
    }
    ADD_FAILURE() << "no node " << node;
    return 0;
}

} // namespace

TEST(ModuleRanges, ModuleCallsNameTheModulesOwnNodesAndPythonIsNoWork)
{
    const auto dir = fs::temp_directory_path() / ("ps_modules_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    std::ofstream(dir / "step.json") << withStackTrace();
    const auto graph = mlpWithModules();
    const auto t = profiler::importTrace(graph, dir / "step.json");
    // Five module calls named by class and order: the model's own call stands for every node
    // and is no module's; the Dropout has no module in the model.
    EXPECT_EQ(t.moduleRanges, 5);
    EXPECT_EQ(t.modules, 5U);
    ASSERT_EQ(t.modulesNotNamed.size(), 1U);
    EXPECT_EQ(t.modulesNotNamed.front(), "Dropout (the trace has 1 Dropout, the model 0)");
    EXPECT_TRUE(t.aligned);
    // Work is the operators' self time; the Python functions' is not: 3 x 20 + 3 x 10 + 6 x 10 us.
    EXPECT_NEAR(t.totalNs, 150000, 1e-6);
    // The custom operator no table knows lands on the own nodes of the Linear it ran in, forward and
    // backward (its backward follows it by sequence number); nothing is unmatched.
    EXPECT_NEAR(
        forwardOf(t, graph, "layers.0.linear.matmul") + forwardOf(t, graph, "layers.0.linear.bias_add"), 20000, 1e-6);
    EXPECT_NEAR(forwardOf(t, graph, "layers.0.relu"), 10000, 1e-6);
    EXPECT_EQ(t.unmatchedActivities, 0);
    EXPECT_NEAR(t.coverage(), 1.0, 1e-9);

    // The same trace on the model without module classes (a TorchScript or zoo import): the
    // alignment alone leaves the custom operator and its backward unmatched.
    const auto plain = profiler::importTrace(tinyMlp(), dir / "step.json");
    EXPECT_EQ(plain.moduleRanges, 0);
    EXPECT_NEAR(plain.unmatchedNs, 30000, 1e-6);
    EXPECT_NEAR(plain.totalNs, 150000, 1e-6);
    fs::remove_all(dir);
}

// A class whose counts differ (a module the export folded away) is named by the operators aligned
// inside its calls.
TEST(ModuleRanges, CallsTheCountsLeaveOutAreNamedByTheirAlignedOperators)
{
    const auto graph = mlpWithModules();
    const auto dir = fs::temp_directory_path() / ("ps_modules2_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    auto text = withStackTrace();
    // A fourth Linear call (the trace saw a module the model has no node for) after the head.
    const std::string extra = R"(,
{"ph": "X", "cat": "python_function", "name": "nn.Module: Linear_3", "pid": 1, "tid": 1, "ts": 180, "dur": 5, "args": {}})";
    text.insert(text.rfind("\n]}"), extra);
    std::ofstream(dir / "step.json") << text;
    const auto t = profiler::importTrace(graph, dir / "step.json");
    // Linear_1 and Linear_2 hold aligned linears: their modules by vote; Linear_0 holds only the
    // custom operator, Linear_3 nothing: left out, named.
    EXPECT_EQ(t.moduleRanges, 4); // the two Layers and the two Linears
    std::string notNamed;
    for (const auto& n : t.modulesNotNamed)
        notNamed += n + "; ";
    EXPECT_NE(
        notNamed.find("Linear_0 (no aligned operator inside; the trace has 4 Linear, the model 3)"), std::string::npos)
        << notNamed;
    EXPECT_NE(notNamed.find("Linear_3 (no aligned operator inside"), std::string::npos) << notNamed;
    EXPECT_NEAR(forwardOf(t, graph, "head.matmul") + forwardOf(t, graph, "head.bias_add"), 20000, 1e-6);
    fs::remove_all(dir);
}
