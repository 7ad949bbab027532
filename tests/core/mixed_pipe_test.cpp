// FTPipe's Mixed-pipe (§4.1) and dataflow plans: LPT, Eq. 1, acyclic stage graphs, direct sends
// between non-adjacent stages in the simulator, and the encoder-decoder case it exists for.
#include "graph/graph_builder.h"
#include "plan/mixed_pipe.h"
#include "plan/plan_editor.h"
#include "schedule/schedule_validate.h"
#include "sim/simulator.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>
#include <set>

using namespace ps;

namespace {

std::vector<DeviceId> devicesOf(std::initializer_list<std::uint32_t> ids)
{
    std::vector<DeviceId> out;
    for (auto d : ids)
        out.emplace_back(d);
    return out;
}

std::vector<StageId> stagesOf(std::initializer_list<std::uint32_t> ids)
{
    std::vector<StageId> out;
    for (auto s : ids)
        out.emplace_back(s);
    return out;
}

// A random DAG of 20-60 ops over (8, 64) activations: every op reads one or two earlier tensors
// picked anywhere (branches and long skips), and what no op read is summed into the loss.
Graph randomDag(std::uint32_t seed)
{
    std::mt19937 rng(seed);
    const auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    GraphBuilder b(ModelInfo { "dag-" + std::to_string(seed), "test", "{}", 8 });
    std::vector<TensorId> made { b.input("x", { 8, 64 }, DType::F32) };
    std::set<std::uint32_t> unread;
    const auto any = [&] {
        const auto t = made[static_cast<std::size_t>(pick(0, static_cast<int>(made.size()) - 1))];
        unread.erase(t.value);
        return t;
    };
    const int ops = pick(20, 60);
    for (int i = 0; i < ops; ++i) {
        const auto name = "n" + std::to_string(i);
        ScopeGuard scope(b, "block" + std::to_string(i / 4));
        TensorId out;
        switch (pick(0, 3)) {
        case 0:
            out = b.op(OpType::MatMul, name, { any(), b.parameter(name + ".w", { 64, 64 }) });
            break;
        case 1:
            out = b.op(OpType::Add, name, { any(), any() });
            break;
        case 2:
            out = b.op(OpType::Gelu, name, { any() });
            break;
        default:
            out = b.op(OpType::Relu, name, { any() });
        }
        made.push_back(out);
        unread.insert(out.value);
    }
    auto sum = made.back();
    for (auto t : unread) {
        if (t != sum.value)
            sum = b.op(OpType::Add, "sum" + std::to_string(t), { sum, TensorId(t) });
    }
    const auto logits = b.op(OpType::MatMul, "head", { sum, b.parameter("head.w", { 64, 16 }) });
    return b.finish({ b.op(OpType::CrossEntropy, "loss", { logits, b.input("labels", { 8 }, DType::I64) }) });
}

// T5's shape in miniature (FTPipe §3.3): encoder blocks over a long input, as many decoder blocks
// over a short one, each decoder block also reading the encoder's output (cross attention).
// Every block holds the same parameters; the encoder's compute is encoderTokens/decoderTokens
// times the decoder's.
Graph encoderDecoder(int layers, std::int64_t hidden, std::int64_t encoderTokens, std::int64_t decoderTokens)
{
    GraphBuilder b(ModelInfo { "enc-dec", "test", "{}", 1 });
    const auto feedForward = [&](TensorId x) {
        auto h = b.op(OpType::MatMul, "fc1", { x, b.parameter("fc1.w", { hidden, hidden }) });
        h = b.op(OpType::Relu, "relu", { h });
        h = b.op(OpType::MatMul, "fc2", { h, b.parameter("fc2.w", { hidden, hidden }) });
        return b.op(OpType::Add, "residual", { x, h });
    };
    auto enc = b.input("encoder_in", { 1, encoderTokens, hidden }, DType::F32);
    for (int l = 0; l < layers; ++l) {
        ScopeGuard scope(b, "encoder.block." + std::to_string(l));
        b.setLayer(l);
        enc = feedForward(enc);
    }
    auto dec = b.input("decoder_in", { 1, decoderTokens, hidden }, DType::F32);
    for (int l = 0; l < layers; ++l) {
        ScopeGuard scope(b, "decoder.block." + std::to_string(l));
        b.setLayer(layers + l);
        dec = feedForward(dec);
        const auto scores = b.op(OpType::MatMul, "cross.scores", { dec, enc }, { { "trans_b", std::int64_t { 1 } } });
        dec = b.op(OpType::Add, "cross.residual", { dec, b.op(OpType::MatMul, "cross.context", { scores, enc }) });
    }
    b.setLayer(kNoLayer);
    const auto logits = b.op(OpType::MatMul, "lm_head", { dec, b.parameter("lm_head.w", { hidden, 64 }) });
    const auto labels = b.input("labels", { 1, decoderTokens }, DType::I64);
    return b.finish({ b.op(OpType::CrossEntropy, "loss", { logits, labels }) });
}

const DeviceSpec& a100()
{
    return DeviceCatalog::builtin().find("a100-40gb");
}

} // namespace

TEST(MixedPipe, LongestProcessingTimeFirstOnFiveBlocks)
{
    // Graham's example: LPT gives 7 where 6 ({3, 3} and {2, 2, 2}) is optimal.
    const std::vector<LptBlock> blocks { { 3, 1 }, { 3, 1 }, { 2, 1 }, { 2, 1 }, { 2, 1 } };
    const auto a = assignLongestFirst(blocks, 2, 100);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(*a, devicesOf({ 0, 1, 0, 1, 0 }));
    // Input order does not matter, only compute: the same blocks shuffled land the same way.
    const std::vector<LptBlock> shuffled { { 2, 1 }, { 3, 1 }, { 2, 1 }, { 3, 1 }, { 2, 1 } };
    EXPECT_EQ(*assignLongestFirst(shuffled, 2, 100), devicesOf({ 0, 0, 1, 1, 0 }));
}

TEST(MixedPipe, MemoryCapForcesADifferentDevice)
{
    // Block 2 would go to device 0 (tied at 3 with device 1, the lower wins), but 5 + 5 bytes
    // exceed the cap of 8 there; the blocks after it then balance the other way.
    const std::vector<LptBlock> blocks { { 3, 5 }, { 3, 1 }, { 2, 5 }, { 2, 1 }, { 2, 1 } };
    EXPECT_EQ(*assignLongestFirst(blocks, 2, 100), devicesOf({ 0, 1, 0, 1, 0 }));
    EXPECT_EQ(*assignLongestFirst(blocks, 2, 8), devicesOf({ 0, 1, 1, 0, 0 }));
    EXPECT_FALSE(assignLongestFirst(blocks, 2, 4).has_value()); // a 5-byte block fits nowhere
}

TEST(MixedPipe, StagePeriodIsEquationOne)
{
    EXPECT_DOUBLE_EQ(ftpipeStagePeriodNs(10, 4, 6), 10); // communication hidden both ways (CCO)
    EXPECT_DOUBLE_EQ(ftpipeStagePeriodNs(10, 15, 4), 15); // forward sends exceed compute by 5
    EXPECT_DOUBLE_EQ(ftpipeStagePeriodNs(10, 14, 13), 17); // 10 + 4 + 3
    EXPECT_DOUBLE_EQ(ftpipeStagePeriodNs(0, 5, 2), 7);
}

TEST(MixedPipe, CyclicStageMapsAreRejected)
{
    // x -> n0 -> n1 -> n2 -> head -> loss: n0 and n2 in one stage, n1 in another, is a cycle.
    GraphBuilder b(ModelInfo { "chain", "test", "{}", 8 });
    auto x = b.input("x", { 8, 64 }, DType::F32);
    for (int i = 0; i < 3; ++i)
        x = b.op(OpType::Relu, "n" + std::to_string(i), { x });
    const auto logits = b.op(OpType::MatMul, "head", { x, b.parameter("w", { 64, 16 }) });
    const auto g = b.finish({ b.op(OpType::CrossEntropy, "loss", { logits, b.input("labels", { 8 }, DType::I64) }) });
    EXPECT_TRUE(stageGraphIsAcyclic(g, stagesOf({ 0, 0, 1, 1, 1 })));
    EXPECT_FALSE(stageGraphIsAcyclic(g, stagesOf({ 0, 1, 0, 1, 1 })));
    const auto profile = estimateProfile(g, a100(), {});
    const auto cluster = makeCluster(a100(), 2); // the model keeps a reference
    const StageModel model(g, profile, { ScheduleKind::OneFOneB, 2, 4, 1, 1 }, cluster, 8, {});
    EXPECT_THROW((void)evaluateDataflowPlan(model, stagesOf({ 0, 1, 0, 1, 1 }), devicesOf({ 0, 1 }), "t"), Error);
    EXPECT_THROW((void)evaluateDataflowPlan(model, stagesOf({ 0, 0, 0, 0, 0 }), devicesOf({ 0, 1 }), "t"), Error);
}

TEST(MixedPipe, StageGraphStaysAcyclicOnRandomDags)
{
    int shared = 0; // plans with a device holding two or more stages
    for (std::uint32_t seed = 1; seed <= 24; ++seed) {
        const auto g = randomDag(seed);
        const auto profile = estimateProfile(g, a100(), {});
        const int devices = 2 + static_cast<int>(seed % 3);
        const auto cluster = makeCluster(a100(), devices);
        const StageModel model(g, profile, { ScheduleKind::OneFOneB, devices, 2 * devices, 1, 1 }, cluster, 8, {});
        PlannerOptions o;
        o.algorithm = PlanAlgorithm::MixedPipe;
        const auto r = planMixedPipe(model, o);
        ASSERT_TRUE(r.plan.feasible) << "seed " << seed << ": " << r.plan.reason;
        const auto& p = r.plan.partition;
        ASSERT_TRUE(p.dataflow());
        EXPECT_TRUE(stageGraphIsAcyclic(g, stageOfNodes(p, g.nodeCount()))) << "seed " << seed;
        // The node order is topological.
        EXPECT_NO_THROW((void)graphInNodeOrder(g, p.nodeOrder)) << "seed " << seed;
        ASSERT_EQ(r.plan.stageDevices.size(), static_cast<std::size_t>(p.stageCount()));
        std::vector<int> perDevice(static_cast<std::size_t>(r.plan.deviceCount()), 0);
        for (auto d : r.plan.stageDevices)
            ++perDevice[d.index()];
        EXPECT_EQ(r.plan.deviceCount(), devices) << "seed " << seed;
        shared += *std::max_element(perDevice.begin(), perDevice.end()) > 1 ? 1 : 0;
        EXPECT_TRUE(r.plan.simulation.has_value());
    }
    EXPECT_GT(shared, 0);
}

TEST(MixedPipe, SendsGoDirectlyToNonAdjacentStages)
{
    // a = x Wa; b = gelu(a); c = a + b; loss(c W). Stage 0 {a}, 1 {b}, 2 {c, head, loss}:
    // a goes from stage 0 to stages 1 and 2 directly, not relayed by stage 1.
    GraphBuilder builder(ModelInfo { "skip", "test", "{}", 8 });
    const auto x = builder.input("x", { 8, 1024 }, DType::F32);
    const auto a = builder.op(OpType::MatMul, "a", { x, builder.parameter("wa", { 1024, 1024 }) });
    const auto b = builder.op(OpType::Gelu, "b", { a });
    const auto c = builder.op(OpType::Add, "c", { a, b });
    const auto logits = builder.op(OpType::MatMul, "head", { c, builder.parameter("w", { 1024, 16 }) });
    const auto g =
        builder.finish({ builder.op(OpType::CrossEntropy, "loss", { logits, builder.input("l", { 8 }, DType::I64) }) });
    const double bytes = 8 * 1024 * 4; // a or b, fp32
    const auto profile = estimateProfile(g, a100(), {});
    auto cluster = makeCluster(a100(), 3, 2); // devices 0, 1 on node 0; device 2 on node 1
    const ScheduleSpec spec { ScheduleKind::OneFOneB, 3, 2, 1, 1 };
    const StageModel model(g, profile, spec, cluster, 8, {});
    const auto plan = evaluateDataflowPlan(model, stagesOf({ 0, 1, 2, 2, 2 }), devicesOf({ 0, 1, 2 }), "hand");
    ASSERT_TRUE(plan.feasible) << plan.reason;
    const auto costs = computeStageCosts(g, profile, plan.partition, 8);
    EXPECT_EQ(costs[0].forwardSends, (std::vector<StageSend> { { StageId(1), bytes }, { StageId(2), bytes } }));
    EXPECT_EQ(costs[1].forwardSends, (std::vector<StageSend> { { StageId(2), bytes } }));
    EXPECT_EQ(costs[2].backwardSends, (std::vector<StageSend> { { StageId(0), bytes }, { StageId(1), bytes } }));
    EXPECT_DOUBLE_EQ(costs[0].sendForwardBytes, 2 * bytes);
    // Along the chain the same stages relay a through stage 1.
    const auto chain = computeStageCosts(g, profile, Partition { { 0, 1, 2 } }, 8);
    EXPECT_DOUBLE_EQ(chain[1].sendForwardBytes, 2 * bytes);
    EXPECT_TRUE(chain[1].forwardSends.empty());

    const auto schedule = planSchedule(plan);
    const auto sim = simulate({ schedule, costs, cluster, profile.setup, 8, plan.memoryPlans(), {} });
    int direct = 0;
    for (const auto& e : sim.events) {
        if (e.stream != Stream::Send || e.action != ActionType::SendForward)
            continue;
        EXPECT_DOUBLE_EQ(e.bytes, bytes) << "device " << e.device.value << " to " << e.peer.value;
        if (e.device.value == 0 && e.peer.value == 2) { // across the nodes: the inter-node link
            ++direct;
            const auto& link = cluster.interNode;
            EXPECT_NEAR(e.endNs - e.startNs, 1e9 * (link.latencySeconds + bytes / link.bandwidth), 1e-3);
        }
    }
    EXPECT_EQ(direct, spec.microBatches);

    // Stages 0 and 2 on one device: that send costs nothing, the other two still do.
    const auto together = evaluateDataflowPlan(model, stagesOf({ 0, 1, 2, 2, 2 }), devicesOf({ 0, 1, 0 }), "hand");
    const auto cluster2 = makeCluster(a100(), 2);
    const auto sim2 =
        simulate({ planSchedule(together), costs, cluster2, profile.setup, 8, together.memoryPlans(), {} });
    for (const auto& e : sim2.events) {
        if (e.stream != Stream::Send)
            continue;
        if (e.device == e.peer) {
            EXPECT_DOUBLE_EQ(e.endNs, e.startNs);
        } else {
            EXPECT_GT(e.endNs, e.startNs);
        }
    }
}

TEST(MixedPipe, BeatsTheBestContiguousPlanOnAnEncoderDecoder)
{
    // Four encoder blocks carry nearly all compute, four decoder blocks as many parameters; a
    // device holds 4.6 blocks (4.5 and the in-flight copies of the encoder's input batch, which
    // its first block keeps). Contiguous stages must put the encoder on one device and the
    // decoder on the other (FTPipe §3.3); Mixed-pipe gives each device half of both.
    const auto g = encoderDecoder(4, 2048, 256, 8);
    const auto profile = estimateProfile(g, a100(), {});
    SearchRequest request;
    request.schedules = { { ScheduleKind::OneFOneB, 2, 16, 1, 1 } };
    for (auto a : allPlanAlgorithms())
        request.algorithms.push_back(a);
    request.microBatch = 1;
    request.device = a100();
    const double blockBytes = 2.0 * 2048 * 2048 * 16; // two 2048x2048 fp32 matmuls with Adam
    request.limits.memoryLimitBytes = 4.6 * blockBytes;
    const auto plans = searchPlans(g, profile, request);
    const Plan* mixed = nullptr;
    const Plan* contiguous = nullptr;
    for (const auto& p : plans) {
        if (!p.feasible || !p.simulation)
            continue;
        auto& slot = p.algorithm == "mixed-pipe" ? mixed : contiguous;
        if (!slot || p.simulation->samplesPerSecond > slot->simulation->samplesPerSecond)
            slot = &p;
    }
    ASSERT_NE(mixed, nullptr);
    ASSERT_NE(contiguous, nullptr);
    EXPECT_FALSE(mixed->simulation->outOfMemory);
    EXPECT_GT(mixed->simulation->samplesPerSecond, 1.3 * contiguous->simulation->samplesPerSecond)
        << "best contiguous: " << contiguous->algorithm << " cuts " << contiguous->partition.cutsText();
    EXPECT_GT(mixed->partition.stageCount(), 2);
    EXPECT_EQ(mixed->deviceCount(), 2);
    EXPECT_EQ(plans.front().algorithm, "mixed-pipe"); // ranked first by the same search
}

TEST(MixedPipe, LastStageDoesNotRecomputeAndTheProfileIsIterated)
{
    const auto g = encoderDecoder(2, 256, 64, 8);
    const auto profile = estimateProfile(g, a100(), {});
    const auto cluster = makeCluster(a100(), 2);
    PlannerLimits limits; // asking for per-stage checkpoints leaves only FTPipe's way (§4.2.1)
    limits.checkpointStages = true;
    const StageModel model(g, profile, { ScheduleKind::OneFOneB, 2, 4, 1, 1 }, cluster, 1, limits);
    PlannerOptions o;
    o.algorithm = PlanAlgorithm::MixedPipe;
    const auto r = planMixedPipe(model, o);
    ASSERT_TRUE(r.plan.feasible) << r.plan.reason;
    const auto& stages = r.plan.stages;
    EXPECT_EQ(stages.back().overheadNs, 0); // the last stage keeps its activations
    EXPECT_GT(stages.front().overheadNs, 0); // the others re-run their forward
    EXPECT_DOUBLE_EQ(stages.front().overheadNs, stages.front().cost.forwardNs);
    bool second = false; // round 0 guesses no last stage, so a second round always runs
    bool chosenListed = false; // the plan returned is the fastest candidate, its sends listed with it
    double fastest = 0;
    for (const auto& c : r.candidates) {
        second = second || c.round == 1;
        EXPECT_TRUE(c.checkpointing);
        fastest = std::max(fastest, c.feasible ? c.samplesPerSecond : 0);
    }
    for (const auto& c : r.candidates) {
        chosenListed = chosenListed
            || (c.feasible && c.samplesPerSecond == fastest && c.interDeviceBytes == interDeviceBytesPerSample(r.plan));
    }
    EXPECT_TRUE(second);
    EXPECT_DOUBLE_EQ(fastest, r.plan.simulation->samplesPerSecond);
    EXPECT_TRUE(chosenListed);
    EXPECT_GT(interDeviceBytesPerSample(r.plan), 0) << "two devices exchange activations";
    EXPECT_FALSE(r.plan.seed.empty());
}

TEST(MixedPipe, IsAPlanningAlgorithmWithItsMapInTheJson)
{
    EXPECT_EQ(parsePlanAlgorithm("mixed-pipe"), PlanAlgorithm::MixedPipe);
    EXPECT_EQ(toString(PlanAlgorithm::MixedPipe), "mixed-pipe");
    const auto& all = allPlanAlgorithms();
    EXPECT_NE(std::find(all.begin(), all.end(), PlanAlgorithm::MixedPipe), all.end());
    const auto g = encoderDecoder(2, 256, 64, 8);
    const auto profile = estimateProfile(g, a100(), {});
    const auto cluster = makeCluster(a100(), 2);
    const StageModel model(g, profile, { ScheduleKind::GPipe, 2, 4, 1, 1 }, cluster, 1, {});
    PlannerOptions o;
    o.algorithm = PlanAlgorithm::MixedPipe;
    const auto plan = findPlan(model, o);
    ASSERT_TRUE(plan.feasible) << plan.reason;
    EXPECT_EQ(plan.algorithm, "mixed-pipe");
    EXPECT_EQ(static_cast<int>(plan.stageDevices.size()), plan.schedule.stages);
    const auto j = nlohmann::json::parse(planToJson(plan));
    EXPECT_EQ(j["stage_devices"].size(), plan.stageDevices.size());
    EXPECT_EQ(j["node_order"].size(), g.nodeCount());
    EXPECT_EQ(j["devices"], 2);
    std::atomic<bool> cancel { true };
    o.cancel = &cancel;
    EXPECT_EQ(findPlan(model, o).reason, "cancelled");
}

TEST(MixedPipe, SimulatesT5WithItsTiedEmbeddingAcrossDevices)
{
    // T5 ties the encoder's and decoder's embeddings and the LM head: a synchronous optimizer step
    // waits for every holder, so a device must finish all its stages' passes before its first
    // step, or the stages sharing devices wait on each other for ever.
    auto config = zooPreset("t5-small");
    config.seq = 64;
    config.decoderSeq = 16;
    const auto g = buildZooModel(config);
    const auto profile = estimateProfile(g, a100(), {});
    const auto cluster = makeCluster(a100(), 4);
    for (const auto kind : { ScheduleKind::GPipe, ScheduleKind::OneFOneB }) {
        const StageModel model(g, profile, { kind, 4, 8, 1, 1 }, cluster, 1, {});
        PlannerOptions o;
        o.algorithm = PlanAlgorithm::MixedPipe;
        const auto plan = findPlan(model, o);
        ASSERT_TRUE(plan.feasible) << plan.reason;
        ASSERT_TRUE(plan.simulation.has_value());
        EXPECT_GT(plan.partition.stageCount(), plan.deviceCount());
        bool tied = false;
        for (const auto& s : plan.stages)
            tied = tied || !s.cost.tiedParameters.empty();
        EXPECT_TRUE(tied);
        const auto schedule = planSchedule(plan);
        for (const auto& device : schedule.devices) { // each device's optimizer steps come last
            auto firstStep = std::find_if(
                device.begin(), device.end(), [](const Action& a) { return a.type == ActionType::OptimizerStep; });
            EXPECT_TRUE(std::all_of(
                firstStep, device.end(), [](const Action& a) { return a.type == ActionType::OptimizerStep; }));
        }
    }
}

namespace {

std::string actionsOf(const std::vector<Action>& list)
{
    std::string out;
    for (const auto& a : list)
        out += (out.empty() ? "" : " ") + formatAction(a);
    return out;
}

} // namespace

TEST(FtpipeAsync, FillsDepthPlusOneThenAlternatesAndStepsEveryA)
{
    const auto spec = parseScheduleSpec("ftpipe-async:2", 3, 5);
    EXPECT_EQ(scheduleName(spec), "ftpipe-async:2");
    EXPECT_EQ(parseScheduleSpec("ftpipe-async", 3, 5).groupSize, 5); // one step per iteration
    EXPECT_THROW((void)parseScheduleSpec("ftpipe-async:6", 3, 5), Error);
    const auto s = generateSchedule(spec);
    EXPECT_TRUE(s.asyncWeights());
    EXPECT_TRUE(validateSchedule(s).empty());
    // Depth 2: three forwards fill the pipeline; an update after every second backward and after
    // the last.
    EXPECT_EQ(actionsOf(s.devices[0]), "0F0 0F1 0F2 0B0 0F3 0B1 0OPT_STEP1 0F4 0B2 0B3 0OPT_STEP3 0B4 0OPT_STEP4");
    EXPECT_EQ(actionsOf(s.devices[2]), "2F0 2B0 2F1 2B1 2OPT_STEP1 2F2 2B2 2F3 2B3 2OPT_STEP3 2F4 2B4 2OPT_STEP4");
}

TEST(FtpipeAsync, RecomputesInsideBackwardExceptTheLastStageAndKeepsOneWeightVersion)
{
    const auto g = encoderDecoder(3, 512, 64, 8);
    const auto profile = estimateProfile(g, a100(), {});
    const auto cluster = makeCluster(a100(), 3);
    const auto partition = computeBalancedPartition(std::vector<double>(g.nodeCount(), 1.0), 3);
    const auto run = [&](const std::string& name) {
        const auto spec = parseScheduleSpec(name, 3, 6);
        const StageModel model(g, profile, spec, cluster, 1, {});
        const auto plan = evaluatePlan(model, partition, "even");
        const auto costs = computeStageCosts(g, profile, partition, 1);
        return std::make_pair(
            plan, simulate({ generateSchedule(spec), costs, cluster, profile.setup, 1, plan.memoryPlans(), {} }));
    };
    const auto [ftpipe, sim] = run("ftpipe-async:3");
    EXPECT_DOUBLE_EQ(ftpipe.stages[0].overheadNs, ftpipe.stages[0].cost.forwardNs);
    EXPECT_DOUBLE_EQ(ftpipe.stages[1].overheadNs, ftpipe.stages[1].cost.forwardNs);
    EXPECT_EQ(ftpipe.stages[2].overheadNs, 0);
    std::set<std::uint32_t> recomputing;
    int steps = 0;
    for (const auto& e : sim.events) {
        if (e.action == ActionType::Recompute)
            recomputing.insert(e.stage.value);
        steps += e.action == ActionType::OptimizerStep ? 1 : 0;
    }
    EXPECT_EQ(recomputing, (std::set<std::uint32_t> { 0, 1 }));
    EXPECT_EQ(steps, 3 * 2); // every 3 of 6 micro-batches, on each stage
    EXPECT_LT(sim.steadyIterationNs, sim.iterationNs); // no flush: the steady state is faster
    // PipeDream stashes a weight version per micro-batch in flight and keeps every activation.
    const auto [pipedream, stashed] = run("pipedream");
    EXPECT_LT(sim.devices[0].peakBytes, stashed.devices[0].peakBytes);
    EXPECT_EQ(sim.devices[0].memory.stashedWeights, 0);
    EXPECT_GT(stashed.devices[0].memory.stashedWeights, 0);
}

TEST(MixedPipe, TheEditorMovesCutsOfADataflowPlanAndKeepsItsDevices)
{
    const auto g = encoderDecoder(4, 2048, 256, 8);
    const auto profile = estimateProfile(g, a100(), {});
    const ScheduleSpec spec { ScheduleKind::OneFOneB, 2, 16, 1, 1 };
    const auto cluster = makeCluster(a100(), 2);
    PlannerLimits limits;
    limits.memoryLimitBytes = 4.5 * 2.0 * 2048 * 2048 * 16;
    const StageModel model(g, profile, spec, cluster, 1, limits);
    PlannerOptions options;
    options.algorithm = PlanAlgorithm::MixedPipe;
    const auto plan = planMixedPipe(model, options).plan;
    ASSERT_TRUE(plan.feasible) << plan.reason;
    ASSERT_GT(plan.partition.stageCount(), 2);

    PlanEditor editor(g, profile, cluster, spec, 1, limits);
    editor.setPlacement({ plan.partition, plan.stageDevices });
    EXPECT_TRUE(editor.dataflow());
    EXPECT_EQ(editor.placement().stageDevices, plan.stageDevices);
    EXPECT_EQ(editor.partition(), plan.partition);
    EXPECT_EQ(editor.snapshot().simulation.devices.size(), 2U); // stages share the two devices
    EXPECT_NEAR(editor.snapshot().simulation.iterationNs, simulatePlan(plan, g, profile, cluster).iterationNs, 1e-3);
    EXPECT_NEAR(editor.snapshot().plan.slowestStageNs, plan.slowestStageNs, 1e-3);

    // A cut moves along the plan's own order: still acyclic, every stage on its device.
    const auto [lo, hi] = editor.legalRange(1);
    ASSERT_LT(lo, hi);
    editor.moveBoundary(1, lo);
    EXPECT_EQ(editor.partition().stageCount(), plan.partition.stageCount());
    EXPECT_EQ(editor.placement().stageDevices, plan.stageDevices);
    EXPECT_TRUE(stageGraphIsAcyclic(g, stageOfNodes(editor.partition(), g.nodeCount())));
    EXPECT_NE(editor.partition(), plan.partition);

    // A split stage's new half stays on its device; merging gives the stage before's device.
    editor.addStage();
    EXPECT_EQ(editor.partition().stageCount(), plan.partition.stageCount() + 1);
    EXPECT_EQ(editor.snapshot().simulation.devices.size(), 2U);
    editor.removeStage(1);
    EXPECT_EQ(editor.partition().stageCount(), plan.partition.stageCount());

    // A map missing a stage's device is refused and the editor keeps what it showed.
    const auto shown = editor.placement();
    auto broken = shown;
    broken.stageDevices.pop_back();
    EXPECT_THROW(editor.setPlacement(broken), Error);
    EXPECT_EQ(editor.placement(), shown);
    // Back to a plain partition: one stage per device again.
    editor.setPartition(computeBalancedPartition(std::vector<double>(g.nodeCount(), 1.0), 2));
    EXPECT_FALSE(editor.dataflow());
    EXPECT_TRUE(editor.placement().stageDevices.empty());
}
