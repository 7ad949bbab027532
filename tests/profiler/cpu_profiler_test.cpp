// The CPU profiler on a small GPT: a measurement for every node at two micro-batch sizes, stored
// as measured-cpu rows and read back.
#include "cpu_profiler.h"
#include "fusion.h"
#include "store/project_store.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <filesystem>
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
    // and bias add run as one call too: its forward is the MatMul's, the add's backward its own.
    const engine::FusionPlan fused(small, 0, small.nodeCount(), engine::cpuBackend());
    ASSERT_EQ(fused.chains().size(), 1U);
    ASSERT_FALSE(fused.gemmChains().empty());
    for (std::size_t i = 0; i < small.nodeCount(); ++i) {
        const auto& node = small.nodes()[i];
        const auto* chain = fused.chainOf(i);
        const auto samples = chain != nullptr && chain->softmax != i ? 0U : 3U;
        const auto* gemm = fused.gemmChainOf(i);
        const auto forwardSamples = gemm != nullptr && gemm->add == i ? 0U : samples;
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
