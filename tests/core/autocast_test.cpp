// torch.autocast's tensor types (cost/autocast.h) and the mixed-precision step they price, held
// against a step PyTorch measured on an H100 (tests/data/measured, tests/gpu/torch_on_gpu.py sweep).
#include "cluster/cluster.h"
#include "cluster/device_catalog.h"
#include "cost/autocast.h"
#include "cost/profile.h"
#include "graph/graph_builder.h"
#include "plan/partition.h"
#include "plan/stage_model.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

using namespace ps;

namespace {

ModelConfig gpt(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t microBatch)
{
    auto c = zooPreset("gpt2-small");
    c.layers = layers;
    c.hidden = hidden;
    c.heads = heads;
    c.seq = 1024;
    c.maxPositions = 1024;
    c.vocab = 50257;
    c.dropout = 0;
    c.microBatch = microBatch;
    return c;
}

const Node& named(const Graph& g, const std::string& suffix)
{
    for (const auto& n : g.nodes()) {
        if (n.name.size() >= suffix.size() && n.name.compare(n.name.size() - suffix.size(), suffix.size(), suffix) == 0
            && n.layer == 0)
            return n;
    }
    throw std::runtime_error("no node of layer 0 ending in " + suffix);
}

} // namespace

TEST(Autocast, GptTensorsFollowTorchAutocastsOpLists)
{
    const auto g = buildZooModel(gpt(2, 256, 4, 2));
    const auto plan = planAutocast(g, true);
    std::map<OpType, int> halfOutputs;
    std::map<OpType, int> fp32Outputs;
    for (const auto& n : g.nodes()) {
        for (const auto out : n.outputs) {
            if (g.tensor(out).dtype == DType::F32)
                ++(plan.half[out.index()] ? halfOutputs : fp32Outputs)[n.op];
        }
    }
    // GEMMs write half; so does the layer bias added in the GEMM, and what reads only half
    // tensors (GELU of the MLP's first layer, the head split, the masked scores).
    EXPECT_GT(halfOutputs[OpType::MatMul], 0);
    EXPECT_EQ(fp32Outputs[OpType::MatMul], 0);
    EXPECT_EQ(fp32Outputs[OpType::BiasAdd], 0);
    EXPECT_EQ(fp32Outputs[OpType::Gelu], 0);
    EXPECT_EQ(fp32Outputs[OpType::Mask], 0);
    // fp32 ops and what follows them: norms, softmax, the residual stream (fp32 embeddings plus
    // half projections promote to fp32), the loss.
    EXPECT_EQ(halfOutputs[OpType::LayerNorm], 0);
    EXPECT_EQ(halfOutputs[OpType::Softmax], 0);
    EXPECT_EQ(halfOutputs[OpType::Embedding], 0);
    EXPECT_EQ(halfOutputs[OpType::Add], 0);
    EXPECT_EQ(halfOutputs[OpType::CrossEntropy], 0);
    // Casts: a projection casts its fp32 LayerNorm input and its weight; the scores' product reads
    // half Q and K and casts nothing; softmax casts its half input up; the product of the fp32
    // probabilities with V casts them down.
    const auto casts = [&](const std::string& suffix) { return plan.castKernels[named(g, suffix).id.index()]; };
    const auto& qkv = named(g, "attn.c_attn.matmul");
    EXPECT_EQ(plan.castKernels[qkv.id.index()], 2);
    EXPECT_GT(plan.castParameterBytes[qkv.id.index()], 0);
    EXPECT_GT(plan.castActivationBytes[qkv.id.index()], 0);
    EXPECT_EQ(casts("attn.scores"), 0);
    EXPECT_EQ(casts("attn.softmax"), 1);
    EXPECT_EQ(casts("attn.context"), 1);
    // fp32 and tf32: nothing half, nothing cast.
    const auto none = planAutocast(g, false);
    for (std::size_t t = 0; t < g.tensorCount(); ++t)
        ASSERT_FALSE(none.half[t]);
    for (const int k : none.castKernels)
        ASSERT_EQ(k, 0);
}

// PyTorch 2.11 on an H100 80GB HBM3 trained GPT-2 shapes written like Hugging Face's GPT2Model
// (addmm projections with their biases; simplified: tanh GELU as one op, unfused attention) in
// bf16 autocast and TF32 (tests/gpu/torch_on_gpu.py sweep): GPT-2 medium's (24 x 1024, seq 1024)
// at micro-batches 1 to 8, and, held out (measured after the model was written, to check it, not
// to tune it), GPT-2 large's (36 x 1280) and GPT-2 small's at seq 2048, micro-batches 2 and 4.
// The analytical model on the catalog's h100-80gb predicts each step (one device, one
// micro-batch, the optimizer step included) and its peak (torch.cuda.max_memory_allocated over
// the measured steps). GPT-2 medium at micro-batches 1 and 2 is left out: eager PyTorch is bound
// by its host there (a 24-layer step launches about 2,000 kernels), which the model does not price.
TEST(Autocast, MixedPrecisionStepsMatchPyTorchOnAnH100)
{
    struct Sweep
    {
        const char* file;
        std::int64_t layers, hidden, heads, seq, smallestMicroBatch;
    };
    const Sweep sweeps[] = { { "h100_gpt345m_microbatch_sweep.json", 24, 1024, 16, 1024, 4 },
        { "h100_gpt774m_microbatch_sweep.json", 36, 1280, 20, 1024, 2 },
        { "h100_gpt124m_seq2048_microbatch_sweep.json", 12, 768, 12, 2048, 2 } };
    const auto& h100 = DeviceCatalog::builtin().find("h100-80gb");
    const auto cluster = makeCluster(h100, 1);
    int checked = 0;
    for (const auto& w : sweeps) {
        const auto path = std::filesystem::path(PS_TEST_DATA_DIR) / "measured" / w.file;
        std::ifstream in(path);
        ASSERT_TRUE(in) << path;
        const auto sweep = nlohmann::json::parse(in);
        ASSERT_EQ(sweep.at("device"), "NVIDIA H100 80GB HBM3");
        for (const auto& row : sweep.at("rows")) {
            const auto mb = row.at("micro_batch").get<std::int64_t>();
            if (mb < w.smallestMicroBatch)
                continue;
            auto config = gpt(w.layers, w.hidden, w.heads, mb);
            config.seq = config.maxPositions = w.seq;
            const auto graph = buildZooModel(config);
            CostModelOptions options;
            options.setup.precision = parsePrecision(row.at("precision").get<std::string>());
            const auto profile = estimateProfile(graph, h100, options);
            const auto stages = computeStageCosts(graph, profile, Partition { { 0 } }, static_cast<double>(mb));
            const auto schedule = generateSchedule(parseScheduleSpec("1f1b", 1, 1));
            const SimulationInput sim { schedule, stages, cluster, options.setup, static_cast<double>(mb), {}, {} };
            const auto result = simulate(sim);
            const double predictedMs = result.iterationNs / 1e6;
            const double measuredMs = row.at("step_ms").get<double>();
            const double predictedPeak = result.devices.at(0).peakBytes;
            const auto measuredPeak = row.at("peak_allocated_bytes").get<double>();
            const auto what = std::string(w.file) + " " + row.at("precision").get<std::string>() + " micro-batch "
                + std::to_string(mb);
            std::cout << what << ": predicted " << predictedMs << " ms, measured " << measuredMs << " ms; peak "
                      << predictedPeak / (1 << 30) << " GiB, measured " << measuredPeak / (1 << 30) << " GiB\n";
            // The old rule (every activation half in bf16) predicted GPT-2 medium's bf16 steps 40%
            // and peaks 48% short at micro-batch 8.
            EXPECT_NEAR(predictedMs / measuredMs, 1.0, 0.15) << what;
            EXPECT_NEAR(predictedPeak / measuredPeak, 1.0, 0.15) << what;
            ++checked;
        }
    }
    EXPECT_EQ(checked, 12);
}

// Binary ops write the wider of their inputs whichever comes first; a 0-d constant takes no part;
// a Cast writes fp32; a scalar over a tensor computes in fp32.
TEST(Autocast, BinaryOpsPromoteWhicheverOperandIsHalf)
{
    GraphBuilder b(ModelInfo { "promote", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 8 }, DType::F32);
    const auto half = b.op(OpType::MatMul, "gemm", { x, b.parameter("w", { 8, 8 }) });
    const auto fp32 = b.op(OpType::Softmax, "softmax", { half });
    const auto halfFirst = b.op(OpType::Add, "half_first", { half, fp32 });
    const auto fp32First = b.op(OpType::Add, "fp32_first", { fp32, half });
    const auto both = b.op(OpType::Mul, "both_half", { half, half });
    const auto scalar = b.op(OpType::Mul, "by_scalar", { half, b.constant("two", Shape {}, DType::F32) });
    const auto cast = b.op(OpType::Cast, "to_float", { half }, { { "to", std::string("f32") } });
    const auto over = b.op(OpType::Div, "one_over", { b.constant("one", Shape {}, DType::F32), half });
    const auto g = b.finish({ halfFirst, fp32First, both, scalar, cast, over });
    const auto plan = planAutocast(g, true);
    const auto node = [&g](const std::string& name) -> const Node& {
        for (const auto& n : g.nodes()) {
            if (n.name == name)
                return n;
        }
        throw std::runtime_error("no node " + name);
    };
    const auto isHalf = [&](const std::string& name) { return plan.half[node(name).outputs[0].index()]; };
    EXPECT_TRUE(isHalf("gemm"));
    EXPECT_FALSE(isHalf("softmax"));
    EXPECT_FALSE(isHalf("half_first"));
    EXPECT_FALSE(isHalf("fp32_first"));
    EXPECT_TRUE(isHalf("both_half"));
    EXPECT_TRUE(isHalf("by_scalar"));
    EXPECT_FALSE(isHalf("to_float"));
    EXPECT_FALSE(isHalf("one_over"));
    EXPECT_EQ(plan.castKernels[node("one_over").id.index()], 1); // its half input cast up
    EXPECT_EQ(plan.castKernels[node("to_float").id.index()], 0); // the Cast is the kernel
}

// What recomputation frees under mixed precision is what the stage holds: each storage at its
// type plus the half copies GEMMs cast from it, never more than the stage's activations.
TEST(Autocast, RecomputedBytesAreTheStagesOwn)
{
    auto c = gpt(2, 256, 4, 2);
    c.dropout = 0.1;
    const auto graph = buildZooModel(c);
    CostModelOptions options;
    options.setup.precision = Precision::Bf16;
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = estimateProfile(graph, a100, options);
    PlannerLimits limits;
    limits.checkpointStages = true;
    const StageModel model(graph, profile, { ScheduleKind::OneFOneB, 2, 4, 1, 1 }, makeCluster(a100, 2), 2, limits);
    const auto half = graph.nodeCount() / 2;
    for (const auto& [begin, end, stage] :
        { std::tuple { std::size_t { 0 }, half, 0 }, { half, graph.nodeCount(), 1 } }) {
        const auto e = model.evaluate(begin, end, stage);
        EXPECT_GT(e.memoryPlan.recomputedBytes, 0) << "stage " << stage;
        EXPECT_LE(e.memoryPlan.recomputedBytes, e.cost.activationBytes) << "stage " << stage;
    }
}
