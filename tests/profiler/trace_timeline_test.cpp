// An imported trace as a measured timeline (trace_timeline.h): passes split by phase and by a pass
// starting over, iterations by ProfilerStep ranges, the optimizer step as one action; then a real
// PyTorch profiler trace of an MLP training step (torch 2.15, recorded by
// tests/data/make_torch_step_trace.py) read end to end.
#include "trace_import.h"
#include "trace_timeline.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

using namespace ps;
using namespace ps::profiler;

namespace {

using Kind = TraceActionKind;

TimedActivity act(double start, double end, Kind kind, std::size_t node = 0)
{
    return { start, end, kind, node };
}

std::string shape(const TraceIteration& it)
{
    std::string s;
    for (const auto& a : it.actions)
        s += (a.kind == Kind::Forward           ? "F"
                     : a.kind == Kind::Backward ? "B"
                                                : "O")
            + std::to_string(a.microBatch) + " ";
    return s;
}

} // namespace

TEST(TraceTimeline, AccumulatedMicroBatchesAndTheOptimizerFormOneIteration)
{
    // Two micro-batches of a 3-node model, F B F B, then the optimizer; no ProfilerStep ranges.
    const auto t = buildTraceTimeline(
        {
            act(0, 1, Kind::Forward, 0),
            act(1, 2, Kind::Forward, 1),
            act(2, 3, Kind::Forward, 2),
            act(3, 4, Kind::Backward, 2),
            act(4, 5, Kind::Backward, 1),
            act(5, 6, Kind::Backward, 0),
            act(6, 7, Kind::Forward, 0),
            act(7, 8, Kind::Forward, 1),
            act(8, 9, Kind::Forward, 2),
            act(9, 10, Kind::Backward, 2),
            act(10, 11, Kind::Backward, 0), // node 1's backward untimed
            act(11, 12, Kind::Optimizer),
            act(12.5, 13, Kind::Optimizer),
        },
        {});
    ASSERT_EQ(t.size(), 1U);
    EXPECT_FALSE(t[0].marked);
    EXPECT_EQ(shape(t[0]), "F0 B0 F1 B1 O0 ");
    EXPECT_DOUBLE_EQ(t[0].actions[2].startNs, 6);
    EXPECT_DOUBLE_EQ(t[0].actions[2].endNs, 9);
    EXPECT_DOUBLE_EQ(t[0].actions[4].startNs, 11); // one action over both optimizer activities
    EXPECT_DOUBLE_EQ(t[0].actions[4].endNs, 13);
    EXPECT_DOUBLE_EQ(t[0].startNs, 0);
    EXPECT_DOUBLE_EQ(t[0].endNs, 13);
}

TEST(TraceTimeline, ForwardsBackToBackSplitWhereThePassStartsOver)
{
    // GPipe's F0 F1 B0 B1 on one device; within a pass nodes may come slightly out of graph order
    // (node 2 before node 1) without starting a new pass.
    const auto t = buildTraceTimeline(
        {
            act(0, 1, Kind::Forward, 0),
            act(1, 2, Kind::Forward, 2),
            act(2, 3, Kind::Forward, 1),
            act(3, 4, Kind::Forward, 0),
            act(4, 5, Kind::Forward, 1),
            act(5, 6, Kind::Forward, 2),
            act(6, 7, Kind::Backward, 2),
            act(7, 8, Kind::Backward, 0),
            act(8, 9, Kind::Backward, 2),
            act(9, 10, Kind::Backward, 1),
            act(10, 11, Kind::Backward, 0),
        },
        {});
    ASSERT_EQ(t.size(), 1U);
    EXPECT_EQ(shape(t[0]), "F0 F1 B0 B1 ");
    EXPECT_DOUBLE_EQ(t[0].actions[0].endNs, 3);
    EXPECT_DOUBLE_EQ(t[0].actions[3].startNs, 8);
}

// A forward benchmark (two passes, no backward, no optimizer, no ProfilerStep): each pass is an
// iteration of its own, as an inference's would be.
TEST(TraceTimeline, ForwardPassesAloneAreIterationsEach)
{
    const auto t = buildTraceTimeline(
        {
            act(0, 1, Kind::Forward, 0),
            act(1, 2, Kind::Forward, 1),
            act(10, 11, Kind::Forward, 0),
            act(11, 13, Kind::Forward, 1),
        },
        {});
    ASSERT_EQ(t.size(), 2U);
    EXPECT_EQ(shape(t[0]), "F0 ");
    EXPECT_EQ(shape(t[1]), "F0 ");
    EXPECT_DOUBLE_EQ(t[1].startNs, 10);
    EXPECT_DOUBLE_EQ(t[1].endNs, 13);
    EXPECT_FALSE(t[1].marked);
}

TEST(TraceTimeline, ProfilerStepsAreTheIterations)
{
    const auto t = buildTraceTimeline(
        {
            act(1, 2, Kind::Forward, 0), act(2, 3, Kind::Backward, 0), act(3, 4, Kind::Optimizer),
            act(11, 12, Kind::Forward, 0), act(12, 25, Kind::Backward, 0), // device work past the range
            act(30, 31, Kind::Forward, 0), // outside every step: not part of the timeline
        },
        { { 10, 20 }, { 0, 5 } });
    ASSERT_EQ(t.size(), 2U);
    EXPECT_TRUE(t[0].marked);
    EXPECT_EQ(shape(t[0]), "F0 B0 O0 ");
    EXPECT_EQ(shape(t[1]), "F0 B0 ");
    EXPECT_DOUBLE_EQ(t[0].startNs, 0);
    EXPECT_DOUBLE_EQ(t[0].endNs, 5);
    EXPECT_DOUBLE_EQ(t[1].endNs, 25);
    // A kernel launched late in a step runs after the step's range: its launch places it.
    TimedActivity late = act(21, 26, Kind::Optimizer);
    late.anchorNs = 19;
    const auto g = buildTraceTimeline(
        { act(11, 12, Kind::Forward, 0), act(12, 18, Kind::Backward, 0), late, act(22, 23, Kind::Forward, 0) },
        { { 10, 20 }, { 20, 30 } });
    ASSERT_EQ(g.size(), 2U);
    EXPECT_EQ(shape(g[0]), "F0 B0 O0 ");
    EXPECT_DOUBLE_EQ(g[0].endNs, 26);
    EXPECT_EQ(shape(g[1]), "F0 ");
    EXPECT_TRUE(buildTraceTimeline({}, {}).empty());
    EXPECT_TRUE(isProfilerStep("ProfilerStep#12"));
    EXPECT_FALSE(isProfilerStep("Step#1"));
    EXPECT_TRUE(isOptimizerRange("Optimizer.step#AdamW.step"));
    EXPECT_FALSE(isOptimizerRange("Optimizer.zero_grad#AdamW.zero_grad"));
}

TEST(TraceTimeline, RealTorchTrainingStepTraceReadsAsItsIterations)
{
    const auto path = std::filesystem::path(PS_SOURCE_DIR) / "tests/data/traces/mlp_train_step_cpu.json";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    auto c = zooPreset("mlp");
    c.layers = 4;
    c.hidden = 1024;
    c.vocab = 1000;
    c.microBatch = 128;
    c.dropout = 0;
    const auto graph = buildZooModel(c);
    const auto t = importTrace(graph, path);
    // Ranges name modules ("layers.2", "head"); backward ops reach them by sequence number.
    EXPECT_EQ(t.nodesMatched, graph.nodeCount());
    ASSERT_EQ(t.iterations.size(), 3U); // the schedule's three active steps
    for (const auto& it : t.iterations) {
        EXPECT_TRUE(it.marked);
        EXPECT_EQ(shape(it), "F0 B0 F1 B1 O0 "); // two accumulated micro-batches, then AdamW
        for (std::size_t i = 1; i < it.actions.size(); ++i)
            EXPECT_GE(it.actions[i].startNs, it.actions[i - 1].endNs - 1e3); // passes do not overlap
        EXPECT_GT(it.actions.back().endNs - it.actions.back().startNs, 1e6); // AdamW over 5.2M parameters
    }
    const auto profile = toImportedProfile(graph, t, "cpu", 128);
    EXPECT_GT(profile.setup.optimizerNsPerParameter, 0.1);
    EXPECT_LT(profile.setup.optimizerNsPerParameter, 100.0);
}

TEST(TraceTimeline, WithoutProfilerStepsTheOptimizerStepsEndTheIterations)
{
    // Three steps of F B O (a legacy trace, or profile() without a schedule), each optimizer step a
    // host range (two optimizers in the first: one step), then a forward the trace cut: three
    // iterations, each from the previous step's end to its own.
    std::vector<TimedActivity> acts;
    std::vector<std::pair<double, double>> ranges;
    for (int s = 0; s < 3; ++s) {
        const double at = 10.0 * s;
        acts.push_back(act(at + 1, at + 2, Kind::Forward, 0));
        acts.push_back(act(at + 2, at + 3, Kind::Forward, 1));
        acts.push_back(act(at + 3, at + 4, Kind::Backward, 1));
        acts.push_back(act(at + 4, at + 5, Kind::Backward, 0));
        acts.push_back(act(at + 6, at + 7, Kind::Optimizer));
        acts.push_back(act(at + 7, at + 8, Kind::Optimizer));
        ranges.emplace_back(at + 5.5, at + 8);
    }
    ranges.emplace_back(6.5, 7.5); // a second optimizer inside the first step: no work between
    acts.push_back(act(31, 32, Kind::Forward, 0));
    const auto t = buildTraceTimeline(acts, {}, ranges);
    ASSERT_EQ(t.size(), 3U); // the cut step's forward is no iteration
    for (int s = 0; s < 3; ++s) {
        const auto& it = t[static_cast<std::size_t>(s)];
        EXPECT_FALSE(it.marked);
        EXPECT_EQ(shape(it), "F0 B0 O0 ") << s;
        EXPECT_DOUBLE_EQ(it.startNs, s == 0 ? 1.0 : 10.0 * s - 2); // the previous step's end
        EXPECT_DOUBLE_EQ(it.endNs, 10.0 * s + 8);
    }
    // GPU kernels: each belongs where it was launched. The second step's first forward kernel was
    // launched (host 8.5) before the first step's optimizer kernel finished on the device (9.5).
    std::vector<TimedActivity> gpu = acts;
    gpu.resize(12);
    gpu[5] = { 7, 9.5, Kind::Optimizer, 0, 7.2 }; // launched at 7.2, done at 9.5
    gpu[6] = { 9.5, 10, Kind::Forward, 0, 8.5 }; // launched at 8.5, ran after it
    const auto g = buildTraceTimeline(gpu, {}, { ranges[0], ranges[1] });
    ASSERT_EQ(g.size(), 2U);
    EXPECT_EQ(shape(g[0]), "F0 B0 O0 ");
    EXPECT_EQ(shape(g[1]), "F0 B0 O0 ");
    // A trace that starts inside a step (its optimizer only) drops that part; one optimizer step:
    // one iteration, first to last action, as before.
    std::vector<TimedActivity> late(acts.begin() + 4, acts.begin() + 12);
    EXPECT_EQ(buildTraceTimeline(late, {}, { ranges[0], ranges[1] }).size(), 1U);
    acts.resize(6);
    const auto one = buildTraceTimeline(acts, {}, { ranges[0] });
    ASSERT_EQ(one.size(), 1U);
    EXPECT_DOUBLE_EQ(one[0].startNs, 1.0);
    EXPECT_DOUBLE_EQ(one[0].endNs, 8.0);
}

// Kernel names as a table shows them: templates folded, parameters dropped, anonymous namespaces
// kept; short names and names without templates unchanged.
TEST(TraceNames, KernelNamesAreShortenedForTables)
{
    using profiler::shortKernelName;
    EXPECT_EQ(shortKernelName("void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned "
                              "int, 1, 4, bool>(at::cuda::detail::TensorInfo<float, unsigned int>, float)"),
        "at::native::(anonymous namespace)::fused_dropout_kernel_vec<...>");
    EXPECT_EQ(shortKernelName("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::"
                              "CUDAFunctor_add<float> >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)"),
        "at::native::elementwise_kernel<...>");
    EXPECT_EQ(shortKernelName("ampere_sgemm_32x32_sliced1x4_tn"), "ampere_sgemm_32x32_sliced1x4_tn");
    EXPECT_EQ(shortKernelName("Memcpy HtoD (Pageable -> Device)"), "Memcpy HtoD (Pageable -> Device)");
    EXPECT_EQ(shortKernelName(std::string(150, 'k')).size(), 100U);
    const auto accents =
        shortKernelName(std::string(96, 'k') + "\xc3\xa9\xc3\xa9\xc3\xa9"); // never half a UTF-8 character
    EXPECT_EQ(accents, std::string(96, 'k') + "...");
    EXPECT_EQ(shortKernelName("void (x)"), "(x)"); // nothing before the parameters: kept
}
