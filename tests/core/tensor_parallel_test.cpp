// Tensor parallelism on the op graph (issue P17, deliverable 2): Megatron's column/row rule over the
// zoo's GPT, the profile of one GPU of the group, and models the rule refuses.
#include "cost/profile.h"
#include "plan/planner.h"
#include "plan/stage_model.h"
#include "scale/collectives.h"
#include "scale/tensor_parallel.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

using namespace ps;

namespace {
Graph gpt(int layers)
{
    auto c = zooPreset("gpt2-small");
    c.layers = layers;
    return buildZooModel(c);
}
} // namespace

// Each block: QKV and MLP-up column-parallel, the output projection and MLP-down row-parallel, the
// attention core and GELU split with them; the tied LM head column-parallel (vocabulary-parallel
// logits and cross-entropy); the token embedding vocabulary-parallel; LayerNorms replicated.
TEST(TensorParallel, GptBlocksSplitAsMegatronSplitsThem)
{
    const auto g = gpt(4);
    const auto plan = shardTensorParallel(g, 4);
    EXPECT_EQ(plan.count(Shard::Column), 2 * 4 + 1);
    EXPECT_EQ(plan.count(Shard::Row), 2 * 4);
    EXPECT_GE(plan.count(Shard::Vocabulary), 1);
    EXPECT_GT(plan.count(Shard::Split), 0);
    for (const auto& n : g.nodes()) {
        const auto s = plan.nodes[n.id.index()];
        if (n.op == OpType::LayerNorm) {
            EXPECT_EQ(s, Shard::Replicated) << n.name;
        }
        if (n.op == OpType::Softmax || n.op == OpType::Gelu || n.op == OpType::CrossEntropy) {
            EXPECT_EQ(s, Shard::Split) << n.name;
        }
    }
    EXPECT_NE(plan.text().find("tensor parallel 4: 9 column, 8 row"), std::string::npos) << plan.text();
    // 12 heads of 64: t = 5 does not divide the QKV columns, named.
    try {
        (void)shardTensorParallel(g, 5);
        FAIL() << "t = 5 accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not divisible by 5"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("node '"), std::string::npos) << e.what();
    }
    // 12 heads do not split over 8 GPUs although every weight dimension does: refused at the heads.
    try {
        (void)shardTensorParallel(g, 8);
        FAIL() << "12 heads split over 8";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("12 attention heads, not divisible by 8"), std::string::npos) << e.what();
    }
    // One GPU's graph: the weights split where the rule splits them, the vocabulary rounded up.
    const auto perGpu = tensorParallelGraph(g, plan);
    for (const auto& t : perGpu.tensors()) {
        if (t.name == "h.0.attn.c_attn.weight") {
            EXPECT_EQ(t.shape, (Shape { 768, 2304 / 4 }));
        }
        if (t.name == "h.0.attn.c_proj.weight") {
            EXPECT_EQ(t.shape, (Shape { 768 / 4, 768 }));
        }
        if (t.name == "wte.weight") {
            EXPECT_EQ(t.shape, (Shape { (50257 + 3) / 4, 768 }));
        }
        if (t.name == "h.0.ln_1.weight" || t.name == "h.0.attn.c_proj.bias" || t.name == "wpe.weight") {
            EXPECT_EQ(t.shape, g.tensor(t.id).shape) << t.name; // replicated
        }
        if (t.name == "h.0.attn.c_attn.bias") {
            EXPECT_EQ(t.shape, (Shape { 2304 / 4 })); // column-parallel: split with its output
        }
    }
    // A convolutional network keeps its convolutions whole; its classifier splits by columns.
    const auto cnn = buildZooModel(zooPreset("resnet-tiny"));
    const auto cnnPlan = shardTensorParallel(cnn, 2);
    EXPECT_EQ(cnnPlan.count(Shard::Column), 1);
    EXPECT_EQ(cnnPlan.count(Shard::Row), 0);
    for (const auto& n : cnn.nodes()) {
        if (n.op == OpType::Conv) {
            EXPECT_EQ(cnnPlan.nodes[n.id.index()], Shard::Replicated) << n.name;
        }
    }
}

// One GPU of the group: the split nodes' work divided by t, the row-parallel MatMuls' forward and
// the column-parallel ones' backward plus a ring all-reduce; parameters divided where split.
TEST(TensorParallel, OneGpuOfTheGroupDoesATthOfTheSplitWorkPlusTheAllReduces)
{
    const auto g = gpt(2);
    const auto& a100 = DeviceCatalog::builtin().find("a100-80gb");
    const auto whole = estimateProfile(g, a100, {});
    const LinkSpec nvlink { "nvlink3", 300e9, 5e-6 };
    const auto plan = shardTensorParallel(g, 2);
    const auto half = tensorParallelProfile(g, whole, plan, nvlink);
    EXPECT_NE(half.note.find("tensor parallel 2"), std::string::npos);
    const double b = 4;
    std::int64_t paramsWhole = 0;
    std::int64_t paramsHalf = 0;
    for (const auto& n : g.nodes()) {
        const auto i = n.id.index();
        const auto& w = whole.nodes[i];
        const auto& h = half.nodes[i];
        paramsWhole += w.parameterCount;
        paramsHalf += h.parameterCount;
        switch (plan.nodes[i]) {
        case Shard::Replicated:
            EXPECT_EQ(h.forwardNs.at(b), w.forwardNs.at(b)) << n.name;
            break;
        case Shard::Split:
            EXPECT_DOUBLE_EQ(h.forwardNs.at(b), w.forwardNs.at(b) / 2) << n.name;
            EXPECT_DOUBLE_EQ(h.savedBytes.at(b), w.savedBytes.at(b) / 2) << n.name;
            break;
        case Shard::Row:
            EXPECT_NEAR(h.forwardNs.at(b),
                w.forwardNs.at(b) / 2 + 1e9 * ringAllReduceSeconds(2, w.outputBytes.at(b), nvlink), 1e-3)
                << n.name;
            EXPECT_DOUBLE_EQ(h.backwardNs.at(b), w.backwardNs.at(b) / 2) << n.name;
            break;
        case Shard::Column:
            EXPECT_DOUBLE_EQ(h.forwardNs.at(b), w.forwardNs.at(b) / 2) << n.name;
            EXPECT_GT(h.backwardNs.at(b), w.backwardNs.at(b) / 2) << n.name;
            EXPECT_DOUBLE_EQ(h.outputBytes.at(b), w.outputBytes.at(b) / 2) << n.name;
            break;
        case Shard::Vocabulary:
            EXPECT_GT(h.forwardNs.at(b), w.forwardNs.at(b) / 2) << n.name;
            break;
        }
    }
    EXPECT_LT(paramsHalf, paramsWhole * 0.6);
    EXPECT_GT(paramsHalf, paramsWhole * 0.45); // LayerNorms and biases of row MatMuls stay whole
    // A 2-stage plan on the profile of one GPU of a 2-GPU group: a stage's time and memory shrink.
    const auto spec = parseScheduleSpec("1f1b", 2, 4);
    const auto cluster = makeCluster(a100, 2);
    PlannerOptions o;
    o.algorithm = PlanAlgorithm::GPipe;
    const auto one = findPlan(StageModel(g, whole, spec, cluster, b, {}), o);
    const auto perGpu = tensorParallelGraph(g, plan);
    ASSERT_EQ(perGpu.nodeCount(), g.nodeCount());
    const auto two = findPlan(StageModel(perGpu, half, spec, cluster, b, {}), o);
    ASSERT_TRUE(one.feasible && two.feasible);
    EXPECT_LT(two.slowestStageNs, one.slowestStageNs * 0.75);
    const auto peak = [](const Plan& p) {
        double most = 0;
        for (const auto& st : p.stages)
            most = std::max(most, st.peakBytes);
        return most;
    };
    EXPECT_LT(peak(two), peak(one) * 0.75);
    // t = 1 changes nothing.
    const auto same = tensorParallelProfile(g, whole, shardTensorParallel(g, 1), nvlink);
    EXPECT_EQ(same.nodes[3].forwardNs, whole.nodes[3].forwardNs);
}

// A normalization never reads a split tensor: BERT's MLM head transform (dense, GELU, LayerNorm)
// stays whole and its decoder is the vocabulary-parallel column; the pooler splits then joins.
TEST(TensorParallel, NormalizationsReadWholeTensors)
{
    auto c = zooPreset("bert-large");
    c.layers = 2;
    const auto g = buildZooModel(c);
    const auto plan = shardTensorParallel(g, 2);
    const auto shardOf = [&](const std::string& name) {
        for (const auto& n : g.nodes()) {
            if (n.name == name)
                return plan.nodes[n.id.index()];
        }
        ADD_FAILURE() << "no node " << name;
        return Shard::Replicated;
    };
    EXPECT_EQ(shardOf("cls.predictions.transform.dense.matmul"), Shard::Replicated);
    EXPECT_EQ(shardOf("cls.predictions.decoder"), Shard::Column);
    EXPECT_EQ(shardOf("pooler.dense.matmul"), Shard::Column);
    EXPECT_EQ(shardOf("cls.seq_relationship.linear.matmul"), Shard::Row);
    for (const auto& n : g.nodes()) {
        if (n.op == OpType::LayerNorm || n.op == OpType::RMSNorm) {
            EXPECT_EQ(plan.nodes[n.id.index()], Shard::Replicated) << n.name;
        }
    }
    EXPECT_EQ(plan.count(Shard::Column), 3 * 2 + 2 + 2); // Q, K, V and MLP-up per block, pooler, decoder
}
