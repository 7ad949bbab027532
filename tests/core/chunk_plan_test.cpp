// PatrickStar's chunk planner: layout, size search, Access/Release replay, eviction, the host
// limit, multi-GPU sharding and the maximum-model-scale ladder, on hand-computed cases.
#include "plan/chunk_plan.h"
#include "plan/max_model.h"
#include "test_graphs.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

namespace ps {
namespace {

    std::vector<ChunkParameter> params(std::initializer_list<std::int64_t> sizes)
    {
        std::vector<ChunkParameter> p;
        for (auto n : sizes)
            p.push_back({ TensorId(static_cast<std::uint32_t>(p.size())), n });
        return p;
    }

    ChunkMoment access(ChunkPhase phase, std::initializer_list<std::uint32_t> tensors)
    {
        ChunkMoment m;
        m.phase = phase;
        for (auto t : tensors)
            m.parameters.push_back(TensorId(t));
        return m;
    }

    std::vector<int> evictedChunks(const ReplayResult& r)
    {
        std::vector<int> chunks;
        for (const auto& e : r.evictions)
            chunks.push_back(e.chunk);
        return chunks;
    }

    DeviceSpec deviceWithMemory(std::int64_t bytes)
    {
        auto d = DeviceCatalog::builtin().find("v100-32gb");
        d.memoryBytes = bytes;
        return d;
    }

    Profile mixedPrecisionProfile(const Graph& graph, const DeviceSpec& device)
    {
        CostModelOptions cost;
        cost.setup.precision = Precision::Fp16;
        return estimateProfile(graph, device, cost);
    }

    Graph smallGpt(std::int64_t layers, std::int64_t hidden, std::int64_t seq)
    {
        auto c = zooPreset("gpt2-small");
        c.layers = layers;
        c.hidden = hidden;
        c.heads = 4;
        c.seq = seq;
        c.microBatch = 1;
        return buildZooModel(c);
    }

} // namespace

TEST(ChunkLayout, PacksParametersInOrderIntoFixedChunks)
{
    // 6 | 3+5 | 2 | 7 in chunks of 8 elements (§6.1: a new chunk when the next one does not fit).
    const auto layout = buildChunkLayout(params({ 6, 3, 5, 2, 7 }), 8, 1);
    EXPECT_EQ(layout.usedElements, (std::vector<std::int64_t> { 6, 8, 2, 7 }));
    ASSERT_EQ(layout.slots.size(), 5U);
    EXPECT_EQ(layout.slots[2].chunk, 1);
    EXPECT_EQ(layout.slots[2].offset, 3);
    EXPECT_EQ(layout.slots[4].chunk, 3);
    EXPECT_EQ(layout.slots[4].offset, 0);
    EXPECT_DOUBLE_EQ(layout.wasteFraction(), 1.0 - 23.0 / 32.0);
}

TEST(ChunkLayout, PadsTheLastCommunicationGroup)
{
    const auto layout = buildChunkLayout(params({ 6, 3, 5, 2, 7 }), 8, 3);
    EXPECT_EQ(layout.usedElements, (std::vector<std::int64_t> { 6, 8, 2, 7, 0, 0 }));
    EXPECT_EQ(layout.localChunkCount(), 2);
    EXPECT_EQ(layout.groupOf(4), 1);
    EXPECT_EQ(layout.ownerOf(4), 1);
    EXPECT_DOUBLE_EQ(layout.wasteFraction(), 1.0 - 23.0 / 48.0);
}

TEST(ChunkLayout, FourteenBytesPerParameterInFourLists)
{
    const auto layout = buildChunkLayout(params({ 1000 }), 1000, 1);
    double bytes = 0;
    for (auto list : { ChunkList::ParamFp16, ChunkList::ParamFp32, ChunkList::Momentum, ChunkList::Variance })
        bytes += layout.chunkBytes(list);
    EXPECT_DOUBLE_EQ(bytes, 14000);
    EXPECT_DOUBLE_EQ(kChunkBytesPerParameter, 14);
    EXPECT_DOUBLE_EQ(layout.chunkBytes(ChunkList::ParamFp16), 2000); // grad fp16 reuses it: no list
}

TEST(ChunkLayout, RejectsAParameterLargerThanAChunk)
{
    try {
        (void)buildChunkLayout(params({ 4, 9 }), 8, 1);
        FAIL() << "a 9-element parameter was put in an 8-element chunk";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("parameter tensor 1 has 9 elements"), std::string::npos) << e.what();
    }
}

TEST(ChunkSizeSearch, PicksTheLeastWasteAmongValidSizes)
{
    // Used elements per size: 7 -> 6,3,7,7 (waste 5/28); 8 -> 6,8,2,7 (9/32); 9 -> 9,7,7 (4/27);
    // 10 -> 9,7,7 (7/30); 16 -> 16,7 (9/32). Size 6 cannot hold the 7-element parameter.
    const auto p = params({ 6, 3, 5, 2, 7 });
    const std::vector<std::int64_t> sizes { 6, 7, 8, 9, 10, 16 };
    const auto roomy = searchChunkSize(p, 1, sizes, { 1e9, 1e9 });
    EXPECT_EQ(roomy.layout.chunkElements, 9);
    EXPECT_FALSE(roomy.trials[0].valid);
    EXPECT_DOUBLE_EQ(roomy.trials[3].wasteFraction, 4.0 / 27.0);
    // A gathered fp16 chunk (2 B/element) must fit the GPU room: 17 bytes rule out 9 and up.
    const auto tight = searchChunkSize(p, 1, sizes, { 17, 1e9 });
    EXPECT_EQ(tight.layout.chunkElements, 7);
    EXPECT_FALSE(tight.trials[3].valid);
    EXPECT_NE(tight.trials[3].reason.find("does not fit"), std::string::npos) << tight.trials[3].reason;
}

TEST(ChunkReplay, EvictsTheChunkNeededLatest)
{
    // Three 4-element chunks, room for two fp16 chunks (16 bytes), accesses 0 1 2 0 1.
    const auto layout = buildChunkLayout(params({ 4, 4, 4 }), 4, 1);
    std::vector<ChunkMoment> moments;
    for (std::uint32_t t : { 0, 1, 2, 0, 1 })
        moments.push_back(access(ChunkPhase::Forward, { t }));
    ReplaySetup setup { 16, {}, EvictionPolicy::LatestNextUse, 0 };
    const auto latest = replayChunks(layout, moments, setup);
    ASSERT_TRUE(latest.feasible) << latest.reason;
    // At moment 2 chunk 0 is next needed at 3 and chunk 1 at 4: evict 1. At moment 4 neither 0
    // nor 2 is needed again this iteration; 2 comes later in the next one.
    EXPECT_EQ(evictedChunks(latest), (std::vector<int> { 1, 2 }));
    EXPECT_EQ(latest.evictions[0].moment, 2U);
    EXPECT_EQ(latest.evictions[1].moment, 4U);

    setup.policy = EvictionPolicy::ChunkListOrder; // §8.1's warm-up rule
    const auto listOrder = replayChunks(layout, moments, setup);
    EXPECT_EQ(evictedChunks(listOrder), (std::vector<int> { 0, 1, 0 }));
    EXPECT_LT(latest.uploadBytes, listOrder.uploadBytes);
}

TEST(ChunkReplay, NoRoomForTheComputedChunkIsInfeasible)
{
    const auto layout = buildChunkLayout(params({ 4, 4 }), 4, 1);
    const std::vector<ChunkMoment> moments { access(ChunkPhase::Forward, { 0, 1 }) };
    const auto r = replayChunks(layout, moments, { 12, {}, EvictionPolicy::LatestNextUse, 0 });
    EXPECT_FALSE(r.feasible);
    EXPECT_NE(r.reason.find("cannot hold"), std::string::npos) << r.reason;
}

TEST(ChunkReplay, GathersAndReduceScattersCommunicationGroups)
{
    // Four 4-element parameters, one per chunk, two ranks: groups {0,1} and {2,3}; rank 0 owns 0
    // and 2. Forward gathers each group once, backward again and reduce-scatters it: 4 + 2
    // collectives of (p-1) x 8 bytes = 6(p-1)/p x M bytes with M = 16 (§7).
    const auto layout = buildChunkLayout(params({ 4, 4, 4, 4 }), 4, 2);
    std::vector<ChunkMoment> moments;
    for (std::uint32_t t : { 0, 1, 2, 3 })
        moments.push_back(access(ChunkPhase::Forward, { t }));
    for (std::uint32_t t : { 3, 2, 1, 0 })
        moments.push_back(access(ChunkPhase::Backward, { t }));
    const auto r = replayChunks(layout, moments, { 1e6, {}, EvictionPolicy::LatestNextUse, 1 });
    ASSERT_TRUE(r.feasible) << r.reason;
    EXPECT_EQ(r.allGathers, 4);
    EXPECT_EQ(r.reduceScatters, 2);
    EXPECT_DOUBLE_EQ(r.collectiveBytes, 48);
    EXPECT_EQ(r.finalLocations[1], ChunkLocation::None); // remote chunks released
    EXPECT_EQ(r.finalLocations[3], ChunkLocation::None);
    for (auto s : { 0, 2 }) // local chunks after CPU ADAM: on the host, tensors HOLD
        EXPECT_EQ(r.finalStates[static_cast<std::size_t>(s)], TensorState::Hold);
    EXPECT_EQ(r.finalLocations[0], ChunkLocation::Cpu);
    // Every iteration: gradients down for CPU ADAM and parameters up for the forward.
    EXPECT_DOUBLE_EQ(r.downloadBytes, 16);
    EXPECT_DOUBLE_EQ(r.uploadBytes, 16);
}

TEST(ChunkPlan, OptimizerStatesInTheMarginRemoveHostTraffic)
{
    // tinyMlp: 128 + 16 + 32 = 176 parameters, one 256-element chunk.
    const auto graph = test::tinyMlp();
    const auto device = deviceWithMemory(1LL << 30);
    const auto profile = mixedPrecisionProfile(graph, device);
    auto cluster = makeCluster(device, 1);
    ChunkPlanOptions options;
    options.microBatch = 4;
    options.chunkElements = 256;
    const auto onGpu = planChunks(graph, profile, cluster, options);
    ASSERT_TRUE(onGpu.feasible) << onGpu.reason;
    EXPECT_EQ(onGpu.optimizerChunksOnGpu, 1);
    EXPECT_DOUBLE_EQ(onGpu.replay.gpuChunkPeakBytes, 256 * 14);
    EXPECT_DOUBLE_EQ(onGpu.cpuGpuBytes, 0);
    EXPECT_DOUBLE_EQ(onGpu.replay.gpuAdamElements, 176);

    options.optimizerInMargin = false; // ZeRO-Offload's static split: OS and ADAM on the CPU
    const auto onCpu = planChunks(graph, profile, cluster, options);
    ASSERT_TRUE(onCpu.feasible) << onCpu.reason;
    EXPECT_DOUBLE_EQ(onCpu.cpuGpuBytes, 2 * 256 * 2); // grads down, params up
    EXPECT_DOUBLE_EQ(onCpu.hostBytes, 256 * 14); // OS + the fp16 chunk during ADAM
    EXPECT_DOUBLE_EQ(onCpu.replay.cpuAdamElements, 176);
    EXPECT_GT(onCpu.time.cpuAdamNs, 0);
}

TEST(ChunkPlan, HostMemoryLimitMakesThePlanInfeasible)
{
    // 12 layers x 768 keep ~1.6 GB of chunks; a 1 GiB GPU (0.8 usable) must evict to the host.
    const auto graph = smallGpt(12, 768, 128);
    const auto device = deviceWithMemory(1LL << 30);
    const auto profile = mixedPrecisionProfile(graph, device);
    auto cluster = makeCluster(device, 1);
    ChunkPlanOptions options;
    options.microBatch = 1;
    cluster.hostMemoryBytes = 16LL << 30;
    const auto roomy = planChunks(graph, profile, cluster, options);
    ASSERT_TRUE(roomy.feasible) << roomy.reason;
    EXPECT_GT(roomy.hostBytes, 1e9);
    EXPECT_LE(roomy.gpuPeakBytes, 0.8 * (1LL << 30) + 1);
    cluster.hostMemoryBytes = 1LL << 30; // no chunk size passes the layout check
    const auto tight = planChunks(graph, profile, cluster, options);
    EXPECT_FALSE(tight.feasible);
    EXPECT_NE(tight.reason.find("host RAM: no chunk size fits"), std::string::npos) << tight.reason;

    // A roomy GPU passes the layout check, but with every OS chunk on the host the replay keeps
    // 12 + 2 B/param there (plus the embedding), more than 0.8 GiB.
    auto big = makeCluster(deviceWithMemory(16LL << 30), 1);
    big.hostMemoryBytes = 1LL << 30;
    options.optimizerInMargin = false;
    const auto replayed = planChunks(graph, profile, big, options);
    EXPECT_FALSE(replayed.feasible);
    EXPECT_NE(replayed.reason.find("of evicted chunks and optimizer states"), std::string::npos) << replayed.reason;
    EXPECT_GT(replayed.hostBytes, 0.8 * (1LL << 30));
}

TEST(ChunkPlan, MoreGpusHoldLessModelDataEach)
{
    const auto graph = smallGpt(12, 768, 128);
    const auto device = deviceWithMemory(16LL << 30);
    const auto profile = mixedPrecisionProfile(graph, device);
    ChunkPlanOptions options;
    options.microBatch = 2;
    double previous = 1e30;
    for (int gpus : { 1, 2, 4 }) {
        const auto plan = planChunks(graph, profile, makeCluster(device, gpus), options);
        ASSERT_TRUE(plan.feasible) << gpus << ": " << plan.reason;
        const double modelBytes = plan.replay.gpuChunkPeakBytes + plan.replay.hostPeakBytes;
        EXPECT_LT(modelBytes, previous) << gpus << " GPUs";
        previous = modelBytes;
        EXPECT_EQ(plan.replay.allGathers > 0, gpus > 1);
    }
}

TEST(ChunkTrace, CheckpointingLowersPeakNonModelMemoryAndRecomputes)
{
    const auto graph = smallGpt(4, 256, 128);
    const auto profile = mixedPrecisionProfile(graph, deviceWithMemory(16LL << 30));
    const auto plain = traceIteration(graph, profile, { 8, false, true });
    const auto checkpointed = traceIteration(graph, profile, { 8, true, true });
    EXPECT_LT(checkpointed.peakNonModelBytes, plain.peakNonModelBytes);
    std::size_t recomputed = 0;
    std::size_t inLayers = 0;
    for (const auto& m : checkpointed.moments)
        recomputed += m.phase == ChunkPhase::Recompute ? 1 : 0;
    for (const auto& n : graph.nodes())
        inLayers += n.layer != kNoLayer ? 1 : 0;
    EXPECT_EQ(recomputed, inLayers);
    EXPECT_GT(checkpointed.flops, plain.flops);
    EXPECT_EQ(plain.moments.size(), 2 * graph.nodeCount());
}

TEST(MaxModel, LadderFollowsTable2AndGrows)
{
    const auto ladder = patrickStarModelLadder(1024);
    ASSERT_GE(ladder.size(), 8U);
    EXPECT_EQ(ladder[0].label, "1B");
    EXPECT_EQ(ladder[0].config.layers, 20);
    EXPECT_EQ(ladder[6].label, "12B");
    EXPECT_EQ(ladder[6].config.hidden, 4096);
    for (std::size_t i = 1; i < ladder.size(); ++i) {
        const auto& a = ladder[i - 1].config;
        const auto& b = ladder[i].config;
        EXPECT_LT(a.layers * a.hidden * a.hidden, b.layers * b.hidden * b.hidden) << ladder[i].label;
    }
}

TEST(MaxModel, FitsAreMonotoneAndPatrickStarReachesFurthest)
{
    MaxModelRequest request;
    request.device = deviceWithMemory(4LL << 30);
    request.hostMemoryBytes = 24LL << 30;
    request.seq = 128;
    request.microBatches = { 2 };
    for (std::int64_t layers : { 2, 8, 24, 48, 96 }) {
        auto c = patrickStarModelLadder(128)[0].config;
        c.layers = layers;
        c.hidden = 1024;
        request.ladder.push_back({ std::to_string(layers) + "L", c, false });
    }
    const auto result = findMaxModelScale(request);
    ASSERT_EQ(result.rungs.size(), 5U);
    for (const auto system : kTrainingSystems) {
        const auto i = static_cast<std::size_t>(system);
        bool failed = false;
        for (const auto& row : result.rungs) {
            EXPECT_FALSE(failed && row.systems[i].feasible) << toString(system) << " fits " << row.rung.label;
            failed = failed || !row.systems[i].feasible;
        }
    }
    const auto ddp = result.largest[static_cast<std::size_t>(TrainingSystem::PyTorchDdp)];
    const auto zero = result.largest[static_cast<std::size_t>(TrainingSystem::ZeroOffload)];
    const auto star = result.largest[static_cast<std::size_t>(TrainingSystem::PatrickStar)];
    EXPECT_LT(ddp, zero);
    EXPECT_LT(zero, star);
}

} // namespace ps
