// The CPU profiler on a small GPT: a measurement for every node at two micro-batch sizes, stored
// as measured-cpu rows and read back.
#include "cpu/thread_affinity.h"
#include "cpu_profiler.h"
#include "fusion.h"
#include "store/project_store.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

TEST(CpuProfiler, EveryNodeMeasuredAtTwoSizesAndStored)
{
    ModelConfig c = zooPreset("gpt2-tiny");
    c.layers = 1;
    c.seq = 16;
    c.dropout = 0.1;
    profiler::CpuProfileOptions o { 1, 3, 0, 1 };
    c.microBatch = 2;
    const auto small = buildZooModel(c);
    const auto a = profiler::measureOnCpu(small, o);
    c.microBatch = 8;
    const auto b = profiler::measureOnCpu(buildZooModel(c), o);
    ASSERT_EQ(a.nodes.size(), small.nodeCount());
    EXPECT_GT(a.stepNs.median, 0);
    EXPECT_GT(a.nodeSumNs, 0);
    // Times are taken in real steps, where each attention's Scale -> Mask -> Softmax runs fused:
    // the chain's time is its Softmax node's, its Scale and Mask measure nothing. A Linear's GEMM
    // and bias add (and a Gelu after them) run as one call too: its forward is the MatMul's, the
    // add's and the Gelu's backwards their own.
    const engine::FusionPlan fused(small, 0, small.nodeCount(), engine::cpuBackend());
    ASSERT_EQ(fused.chains().size(), 1U);
    ASSERT_FALSE(fused.gemmChains().empty());
    for (std::size_t i = 0; i < small.nodeCount(); ++i) {
        const auto& node = small.nodes()[i];
        const auto* chain = fused.chainOf(i);
        const auto samples = chain != nullptr && chain->softmax != i ? 0U : 3U;
        const auto* gemm = fused.gemmChainOf(i);
        const bool fusedAfterGemm = gemm != nullptr && (gemm->add == i || gemm->gelu == static_cast<std::ptrdiff_t>(i));
        const auto forwardSamples = fusedAfterGemm ? 0U : samples;
        EXPECT_EQ(a.nodes[i].forwardNs.count, forwardSamples) << node.name;
        EXPECT_EQ(a.nodes[i].forwardNs.median > 0, forwardSamples > 0) << node.name;
        // Every node of this graph leads to the loss through parameters: each has a backward.
        EXPECT_EQ(a.nodes[i].backwardNs.count, samples) << node.name;
        if (node.op == OpType::MatMul || node.op == OpType::Softmax) { // real outputs, growing with the batch
            EXPECT_EQ(b.nodes[i].outputBytes, 4 * a.nodes[i].outputBytes) << node.name;
        }
        if (node.op == OpType::Reshape) {
            EXPECT_EQ(a.nodes[i].outputBytes, 0) << node.name; // a view
        }
        if (node.op == OpType::Dropout) {
            EXPECT_GT(a.nodes[i].savedBytes, 0) << node.name; // the mask
        }
    }
    const auto profile = profiler::toProfile(small, a, b);
    const auto path = fs::temp_directory_path() / ("ps_cpu_profile_" + std::to_string(::getpid()) + ".pstudio");
    fs::remove(path);
    writeNewProject(path, small, false);
    {
        auto store = ProjectStore::open(path);
        store.saveProfile(profile, 2, 8);
        const auto loaded = store.loadProfile("cpu", "measured-cpu");
        ASSERT_TRUE(loaded.has_value());
        ASSERT_EQ(loaded->nodes.size(), small.nodeCount());
        for (std::size_t i = 0; i < small.nodeCount(); ++i) {
            EXPECT_NEAR(loaded->nodes[i].forwardNs.at(2), a.nodes[i].forwardNs.median, 1.0);
            EXPECT_NEAR(loaded->nodes[i].forwardNs.at(8), b.nodes[i].forwardNs.median, 1.0);
        }
    }
    fs::remove(path);
}

// Co-runners hold whole copies of the step: no more run than fit in half the memory this process
// may still take, each counted by a bound that a measured step stays under: a model whose
// parameters dominate (GPT-2's 50257-token embeddings at a short sequence), an MLP, and a BERT.
TEST(CpuProfiler, CoRunnersAreAsManyAsFitInHalfTheMemory)
{
    struct Model
    {
        const char* preset;
        std::int64_t layers, hidden, seq, microBatch; // 0: the preset's
    };
    for (const auto& m :
        { Model { "gpt2-small", 2, 256, 16, 1 }, Model { "mlp", 2, 0, 0, 8 }, Model { "bert-base", 1, 256, 64, 2 } }) {
        auto c = zooPreset(m.preset);
        c.layers = m.layers;
        c.hidden = m.hidden > 0 ? m.hidden : c.hidden;
        c.heads = m.hidden > 0 ? 4 : c.heads;
        c.seq = m.seq > 0 ? m.seq : c.seq;
        c.microBatch = m.microBatch;
        const auto graph = buildZooModel(c);
        const auto run = profiler::measureOnCpu(graph, profiler::CpuProfileOptions { 0, 1, 0, 1 });
        const auto bound = profiler::trainingStepBytesBound(graph);
        EXPECT_GT(run.stepPeakBytes, 0) << m.preset;
        EXPECT_LE(run.stepPeakBytes, bound) << m.preset;
        std::cout << "[ NOTE ] " << m.preset << ": step peak " << run.stepPeakBytes << " B, bound " << bound << " B\n";
        EXPECT_EQ(profiler::coRunnersThatFit(graph, 3, 0), 3); // memory unknown
        EXPECT_EQ(profiler::coRunnersThatFit(graph, 3, 100 * bound), 3);
        EXPECT_EQ(profiler::coRunnersThatFit(graph, 3, 4 * bound + 1), 2);
        EXPECT_EQ(profiler::coRunnersThatFit(graph, 3, bound), 0);
        EXPECT_EQ(profiler::coRunnersThatFit(graph, 0, 100 * bound), 0);
    }
    EXPECT_GT(profiler::availableMemoryBytes(), 0);
}

// A profile at fewer threads than cores is taken beside copies of the step on the other cores (the
// pipeline's other devices) when asked: while it measures, other threads of the process work about
// as much as the measuring one, where alone they do not. Measured in CPU time (the process's less
// the measuring thread's), which other processes on the machine do not skew.
TEST(CpuProfiler, CoRunnersKeepTheOtherCoresBusyWhileOneDeviceIsMeasured)
{
    EXPECT_EQ(profiler::coRunnersFor(1, 2), 1);
    EXPECT_EQ(profiler::coRunnersFor(2, 8), 3);
    EXPECT_EQ(profiler::coRunnersFor(3, 8), 1);
    EXPECT_EQ(profiler::coRunnersFor(2, 2), 0);
    EXPECT_EQ(profiler::coRunnersFor(0, 8), 0);
    if (engine::allowedCores().size() < 2)
        GTEST_SKIP() << "one core allowed: no other core to load";
    ModelConfig c = zooPreset("gpt2-tiny");
    c.layers = 2;
    c.seq = 64;
    c.microBatch = 8;
    const auto graph = buildZooModel(c);
    const auto seconds = [](clockid_t clock) {
        timespec t {};
        clock_gettime(clock, &t);
        return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
    };
    // CPU time of the process's other threads per second of the measuring thread's.
    const auto othersPerMine = [&](int coRunners) {
        const profiler::CpuProfileOptions o { 1, 5, 0, 1, engine::GemmPrecision::Fp32, coRunners };
        const double process = seconds(CLOCK_PROCESS_CPUTIME_ID);
        const double mine = seconds(CLOCK_THREAD_CPUTIME_ID);
        const auto run = profiler::measureOnCpu(graph, o);
        EXPECT_GT(run.stepNs.median, 0);
        EXPECT_EQ(run.coRunners, coRunners);
        const double myTime = seconds(CLOCK_THREAD_CPUTIME_ID) - mine;
        return (seconds(CLOCK_PROCESS_CPUTIME_ID) - process - myTime) / myTime;
    };
    (void)othersPerMine(0); // OpenBLAS's idle pool threads spin for a while after they start: not the profile's
    const double alone = othersPerMine(0);
    const double loaded = othersPerMine(1);
    std::cout << "[ NOTE ] other threads' CPU time per second of the measuring thread's: alone " << alone
              << ", with a co-runner " << loaded << "\n";
    // Alone, what other threads do is the libraries' idle threads (0.11-0.22 on a 2-core AMD host);
    // a co-runner adds about a core's worth.
    EXPECT_LT(alone, 0.5 * loaded);
    EXPECT_GT(loaded, 0.5);
}
