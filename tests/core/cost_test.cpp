#include "cluster/cluster.h"
#include "cost/gemm_model.h"
#include "cost/profile.h"
#include "plan/partition.h"
#include "test_graphs.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

using namespace ps;

TEST(DeviceCatalog, HasTheIssueDevices)
{
    const auto& catalog = DeviceCatalog::builtin();
    for (const char* id : { "v100-16gb", "v100-32gb", "a100-40gb", "a100-80gb", "h100-80gb", "h200", "rtx2060",
             "rtx2080ti", "rtx3090", "rtx4090", "l4", "cpu" })
        EXPECT_NO_THROW((void)catalog.find(id)) << id;
    const auto& a100 = catalog.find("a100-40gb");
    EXPECT_EQ(a100.memoryBytes, 40LL << 30);
    EXPECT_DOUBLE_EQ(a100.peakFlops(MathMode::Bf16), 312e12);
    EXPECT_TRUE(catalog.find("cpu").measured);
    EXPECT_THROW((void)catalog.find("tpu-v9"), Error);
    EXPECT_THROW((void)DeviceCatalog::fromJson("{\"devices\": [{\"id\": \"x\"}]}", "mine.json"), Error);
}

TEST(Cluster, JsonRoundTripAndChecks)
{
    auto c = makeCluster(DeviceCatalog::builtin().find("a100-40gb"), 16);
    EXPECT_EQ(c.nodes, 2);
    EXPECT_EQ(c.nodeOf(DeviceId(9)), 1);
    c.interTrace = BandwidthTrace { { { 0, 1.0 }, { 0.5, 0.25 } }, 1.0 };
    EXPECT_EQ(clusterFromJson(clusterToJson(c), "c.json"), c);
    EXPECT_DOUBLE_EQ(c.interTrace->fractionAt(1.7), 0.25);
    EXPECT_THROW((void)clusterFromJson(
                     "{\"device\": \"a100-40gb\", \"nodes\": 2, \"inter_node\": {\"bandwidth\": 0}}", "c.json"),
        Error);
    EXPECT_THROW((void)makeCluster(DeviceCatalog::builtin().find("a100-40gb"), 0), Error);
}

// Found by tests/fuzz (regressions/fuzz_cluster_json): nlohmann's type errors escaped as non-ps
// exceptions, and a float too large for an integer field was undefined behaviour.
TEST(Cluster, JsonFieldsOfTheWrongTypeOrRangeAreErrors)
{
    EXPECT_THROW((void)deviceSpecFromJson(R"({"id": "x", "flops": {"fp32": "fast"}})", "d.json"), Error);
    EXPECT_THROW((void)DeviceCatalog::fromJson(R"({"devices": [{"id": "x", "memory_bytes": 1e70}]})", "c.json"), Error);
    EXPECT_THROW((void)clusterFromJson(R"({"device": "a100-40gb", "nodes": "two"})", "c.json"), Error);
    EXPECT_THROW((void)clusterFromJson(R"({"device": "a100-40gb", "nodes": 1e300})", "c.json"), Error);
    EXPECT_THROW(
        (void)clusterFromJson(R"({"device": "a100-40gb", "nodes": 65536, "devices_per_node": 65536})", "c.json"),
        Error);
    EXPECT_EQ(clusterFromJson(R"({"device": "a100-40gb", "nodes": 2.0})", "c.json").nodes, 2);
}

TEST(TrainingSetup, BytesPerParameterMatchPatrickStar)
{
    EXPECT_DOUBLE_EQ(bytesPerParameter({ Precision::Fp32, Optimizer::Adam }).total(), 16); // 4 + 4 + 8
    const auto mixed = bytesPerParameter({ Precision::Fp16, Optimizer::Adam });
    EXPECT_DOUBLE_EQ(mixed.total(), 16); // 2 + 2 + 4 + 4 + 4 (PatrickStar §2 lists these terms)
    EXPECT_DOUBLE_EQ(mixed.weights + mixed.gradients, 4);
    EXPECT_DOUBLE_EQ(bytesPerParameter({ Precision::Fp32, Optimizer::Sgd }).total(), 8);
    // Megatron-LM's bf16 layout: fp32 main gradients (18 bytes); ZeRO-1 over 4 replicas keeps a
    // quarter of the master weights and Adam's states (2 + 4 + (4 + 8) / 4 = 9).
    TrainingSetup megatron { Precision::Bf16, Optimizer::Adam };
    megatron.fp32Gradients = true;
    EXPECT_DOUBLE_EQ(bytesPerParameter(megatron).total(), 18);
    megatron.optimizerShards = 4;
    EXPECT_DOUBLE_EQ(bytesPerParameter(megatron).total(), 9);
    EXPECT_DOUBLE_EQ(bytesPerParameter(megatron).gradients, 4);
}

TEST(AnalyticalProfile, LinearInMicroBatchAndComputeBoundForBigMatmuls)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 1;
    const auto graph = buildZooModel(c);
    CostModelOptions options;
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = estimateProfile(graph, a100, options);
    ASSERT_EQ(profile.nodes.size(), graph.nodeCount());
    // lm_head: (T, C) x (C, V) per sample; at micro-batch 16 one GEMM of 16 x 1024 rows, priced by
    // the GEMM model (tiles and waves on the A100's 108 SMs) on FP32 cores, below their peak.
    const auto& head = profile.nodes[graph.nodeCount() - 2];
    const double flops = 2.0 * 1024 * 768 * 50257 * 16;
    const auto gemm = estimateGemm({ 1, 16 * 1024, 50257, 768 }, gemmDevice(a100, MathMode::Fp32));
    EXPECT_NEAR(head.forwardNs.at(16), options.kernelLaunchNs + 1e9 * gemm.seconds, 1e3);
    EXPECT_GT(head.forwardNs.at(16), 1e9 * flops / (19.5e12 * a100.gemmEfficiencyFp32));
    EXPECT_GT(head.backwardNs.at(16), 1.9 * head.forwardNs.at(16));
    EXPECT_GT(head.weightGradNs.at(16), 0);
    options.setup.precision = Precision::Fp16;
    const auto mixed = estimateProfile(graph, a100, options);
    EXPECT_LT(mixed.nodes[graph.nodeCount() - 2].forwardNs.at(16), head.forwardNs.at(16) / 5);
    EXPECT_DOUBLE_EQ(mixed.nodes[5].savedBytes.at(4), profile.nodes[5].savedBytes.at(4) / 2);
}

TEST(Partition, CutListsAndBalancedSplit)
{
    EXPECT_EQ(partitionFromCuts("12, 24,36", 50, 4).stageStarts, (std::vector<std::size_t> { 0, 12, 24, 36 }));
    EXPECT_EQ(partitionFromCuts("12,24,36", 50, 4).cutsText(), "12,24,36");
    EXPECT_THROW((void)partitionFromCuts("12,24", 50, 4), Error);
    EXPECT_THROW((void)partitionFromCuts("24,12,36", 50, 4), Error);
    EXPECT_THROW((void)partitionFromCuts("12,24,60", 50, 4), Error);
    EXPECT_THROW((void)partitionFromCuts("12,x,36", 50, 4), Error);
    const auto p = computeBalancedPartition({ 1, 1, 1, 1, 1, 1, 1, 1 }, 4);
    EXPECT_EQ(p.stageStarts, (std::vector<std::size_t> { 0, 2, 4, 6 }));
    EXPECT_THROW((void)computeBalancedPartition({ 1, 1 }, 3), Error);
}

TEST(Partition, StageCostsCountBoundaryTrafficAndTiedWeights)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 2;
    c.seq = 16;
    c.microBatch = 2;
    const auto graph = buildZooModel(c);
    const auto profile = estimateProfile(graph, DeviceCatalog::builtin().find("a100-40gb"), {});
    const auto p = computeBalancedPartition(std::vector<double>(graph.nodeCount(), 1.0), 2);
    const auto stages = computeStageCosts(graph, profile, p, 4);
    ASSERT_EQ(stages.size(), 2U);
    // The residual stream (B, T, C) crosses the cut; at micro-batch 4 fp32 that is 4*16*768*4 bytes
    // (plus any attention tensor if the cut falls inside a block).
    EXPECT_GE(stages[0].sendForwardBytes, 4.0 * 16 * 768 * 4);
    EXPECT_EQ(stages[0].sendForwardBytes, stages[1].sendBackwardBytes);
    EXPECT_EQ(stages[1].sendForwardBytes, 0);
    // The tied token embedding is read by both stages.
    EXPECT_EQ(stages[0].parameterCount + stages[1].parameterCount, graph.parameterCount() + 50257 * 768);
    EXPECT_GT(stages[0].activationBytes, 0);
    EXPECT_LE(stages[0].weightGradOnlyBytes, stages[0].activationBytes);
}

// A local GPU's driver name and memory find its catalog entry (profiles are stored under it).
TEST(DeviceCatalog, MatchesLocalGpusByModelAndMemory)
{
    const auto& c = DeviceCatalog::builtin();
    const auto id = [&](std::string_view name, double gib) {
        const auto* d = c.matchGpu(name, static_cast<std::int64_t>(gib * (1LL << 30)));
        return d != nullptr ? d->id : std::string("none");
    };
    EXPECT_EQ(id("NVIDIA H100 80GB HBM3", 79.2), "h100-80gb");
    EXPECT_EQ(id("NVIDIA A100-SXM4-40GB", 39.6), "a100-40gb");
    EXPECT_EQ(id("NVIDIA A100-SXM4-80GB", 79.2), "a100-80gb");
    EXPECT_EQ(id("NVIDIA H200", 139.8), "h200");
    EXPECT_EQ(id("NVIDIA GeForce RTX 4090", 23.6), "rtx4090");
    EXPECT_EQ(id("NVIDIA GeForce RTX 2080 Ti", 10.7), "rtx2080ti");
    EXPECT_EQ(id("NVIDIA L4", 22.0), "l4");
    EXPECT_EQ(id("NVIDIA L40S", 44.4), "none"); // contains "L4" but has twice its memory
    EXPECT_EQ(id("Tesla T4", 15.0), "none");
}

// A measured CPU (engine/cpu_probe.h) is priced by its own rates: GEMMs at the measured fraction
// of its peak, a kernel whose bytes fit its cache share at the cached streaming rate, every kernel
// with its measured fixed cost, and the special functions' arithmetic (tanh in GELU) counted.
TEST(AnalyticalProfile, AMeasuredCpuIsPricedByItsOwnRates)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = 1;
    c.hidden = 256;
    c.heads = 4;
    c.seq = 64;
    c.microBatch = 2;
    const auto graph = buildZooModel(c);
    auto cpu = DeviceCatalog::builtin().find("cpu");
    cpu.measured = false;
    cpu.memoryBytes = std::int64_t { 1 } << 33;
    cpu.flopsFp32 = 100e9;
    cpu.gemmEfficiencyFp32 = 0.8;
    cpu.memoryBandwidth = 20e9;
    cpu.cacheBytes = std::int64_t { 1 } << 30;
    cpu.cacheBandwidth = 80e9;
    cpu.kernelOverheadNs = 1000;
    const CostModelOptions options;
    const auto at = [&](const DeviceSpec& d) { return estimateKernels(graph, d, options, 2); };
    const auto first = [&](OpType op) {
        for (const auto& n : graph.nodes()) {
            if (n.op == op)
                return n.id.index();
        }
        ADD_FAILURE() << "no " << toString(op);
        return std::size_t { 0 };
    };
    const auto base = at(cpu);
    // Every kernel pays the fixed cost once forward and twice backward.
    auto dearer = cpu;
    dearer.kernelOverheadNs = 3000;
    const auto norm = first(OpType::LayerNorm);
    EXPECT_NEAR(at(dearer)[norm].front().forwardNs - base[norm].front().forwardNs, 2000, 1e-6);
    EXPECT_NEAR(at(dearer)[norm].front().backwardNs - base[norm].front().backwardNs, 4000, 1e-6);
    // GEMMs: at half the efficiency, twice the compute (the fc GEMM, (128, 256) x (256, 1024)).
    auto slow = cpu;
    slow.gemmEfficiencyFp32 = 0.4;
    std::size_t fc = 0;
    for (const auto& n : graph.nodes()) {
        if (n.op == OpType::MatMul && graph.tensor(n.inputs[1]).shape == Shape { 256, 1024 })
            fc = n.id.index();
    }
    ASSERT_GT(fc, 0u);
    const double flops = 2.0 * 128 * 256 * 1024;
    EXPECT_NEAR(base[fc].front().forwardNs, 1000 + 1e9 * flops / (100e9 * 0.8), 1);
    EXPECT_NEAR(at(slow)[fc].front().forwardNs - 1000, 2 * (base[fc].front().forwardNs - 1000), 1);
    // LayerNorm's bytes fit the cache: the cached rate; with no cache share, memory's (4x slower),
    // on a CPU fast enough at math for the bytes to set the time.
    auto fastMath = cpu;
    fastMath.flopsFp32 = 1e16;
    auto uncached = fastMath;
    uncached.cacheBytes = 0;
    EXPECT_NEAR(at(uncached)[norm].front().forwardNs - 1000, 4 * (at(fastMath)[norm].front().forwardNs - 1000), 1e-6);
    EXPECT_GT(at(uncached)[norm].front().forwardNs, 2000); // the bytes cost something
    // GELU (tanh form, GPT-2's) on fast memory is compute-bound: its 8 nominal FLOPs per element
    // plus tanh's 45, at half the peak (the vector efficiency).
    auto fastMemory = cpu;
    fastMemory.cacheBandwidth = 1e15;
    const auto gelu = first(OpType::Gelu);
    const double elements = 128.0 * 1024;
    EXPECT_NEAR(at(fastMemory)[gelu].front().forwardNs, 1000 + 1e9 * elements * (8 + 45) / (100e9 * 0.5), 1);
}
