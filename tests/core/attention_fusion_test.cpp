// The Attention op and the pass that fuses attention chains (graph/attention_fusion.h): which
// chains become one node, what the node keeps for backward (no probabilities), and its costs.
#include "cluster/device_catalog.h"
#include "cost/profile.h"
#include "graph/attention_fusion.h"
#include "graph/graph_builder.h"
#include "graph/op_cost.h"
#include "graph/validate.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

using namespace ps;

namespace {

ModelConfig small(std::string_view preset)
{
    auto c = zooPreset(preset);
    c.layers = 2;
    c.hidden = 64;
    c.heads = 4;
    c.seq = 24;
    c.maxPositions = 32;
    c.vocab = 96;
    c.microBatch = 3;
    c.dropout = 0;
    if (c.family == ModelFamily::T5)
        c.decoderLayers = 2;
    return c;
}

std::size_t countOps(const Graph& g, OpType op)
{
    return static_cast<std::size_t>(
        std::count_if(g.nodes().begin(), g.nodes().end(), [op](const Node& n) { return n.op == op; }));
}

} // namespace

// GPT-2 (causal) and BERT (padding mask): one Attention node per layer in place of the scores
// MatMul, Scale, Mask, Softmax and context MatMul; the graph stays valid; the node's inputs are
// the chain's q, k, v (and padding), its attributes the chain's scale and mask.
TEST(AttentionFusion, EachZooAttentionBecomesOneNode)
{
    for (const auto* preset : { "gpt2-tiny", "bert-base" }) {
        const auto c = small(preset);
        const auto plain = buildZooModel(c);
        std::size_t fused = 0;
        const auto graph = fuseAttention(plain, &fused);
        EXPECT_EQ(fused, 2U) << preset;
        EXPECT_TRUE(validateGraph(graph).empty()) << preset;
        EXPECT_EQ(graph.nodeCount(), plain.nodeCount() - 4 * fused) << preset;
        EXPECT_EQ(countOps(graph, OpType::Attention), 2U);
        EXPECT_EQ(countOps(graph, OpType::Softmax), 0U) << preset;
        EXPECT_EQ(graph.parameterCount(), plain.parameterCount());
        for (const auto& n : graph.nodes()) {
            if (n.op != OpType::Attention)
                continue;
            const bool gpt = c.family == ModelFamily::Gpt2;
            EXPECT_EQ(n.inputs.size(), gpt ? 3U : 4U) << n.name;
            EXPECT_EQ(n.intAttr("causal", -1), gpt ? 1 : 0) << n.name;
            EXPECT_NEAR(n.floatAttr("scale", 0), 1 / std::sqrt(16.0), 1e-12) << n.name;
            EXPECT_EQ(graph.tensor(n.inputs[0]).shape, (Shape { 3, 4, 24, 16 })) << n.name;
            EXPECT_EQ(graph.tensor(n.outputs[0]).shape, (Shape { 3, 4, 24, 16 })) << n.name;
            EXPECT_NE(n.name.find(".attention"), std::string::npos) << n.name;
        }
        // The zoo's option gives the same graph.
        auto withOption = c;
        withOption.fusedAttention = true;
        EXPECT_EQ(buildZooModel(withOption).nodeCount(), graph.nodeCount()) << preset;
    }
    // A dropout on the probabilities joins the node, which then keeps its one-byte keep mask in
    // place of the probabilities and the dropped probabilities (8 bytes a score).
    auto dropped = small("gpt2-tiny");
    dropped.dropout = 0.1;
    const auto plain = buildZooModel(dropped);
    std::size_t fused = 0;
    const auto graph = fuseAttention(plain, &fused);
    EXPECT_EQ(fused, 2U);
    EXPECT_EQ(graph.nodeCount(), plain.nodeCount() - 5 * fused);
    const std::int64_t scores = 3 * 4 * 24 * 24;
    for (const auto& n : graph.nodes()) {
        if (n.op == OpType::Attention) {
            EXPECT_DOUBLE_EQ(n.floatAttr("dropout", 0), 0.1) << n.name;
            EXPECT_EQ(computeOpCosts(graph)[n.id.index()].savedExtraBytes, scores) << n.name;
        }
    }
    EXPECT_EQ(savedActivationBytes(plain, computeOpCosts(plain)) - savedActivationBytes(graph, computeOpCosts(graph)),
        2 * 8 * scores);
    // T5's self-attention scores get a position bias: those stay chains; the decoder's
    // cross-attentions (no bias) fuse.
    auto t5 = small("t5-small");
    t5.fusedAttention = true;
    EXPECT_EQ(countOps(buildZooModel(t5), OpType::Attention), 2U);
    auto resnet = zooPreset("resnet-tiny");
    resnet.fusedAttention = true;
    EXPECT_THROW((void)buildZooModel(resnet), Error);
}

// The node keeps q, k and v: the saved activations drop by one probabilities array per layer,
// B x H x T x T floats; its FLOPs are the chain's forward GEMMs and softmax, its backward the
// chain's plus the recomputed scores GEMM and softmax; its backward workspace is stated.
TEST(AttentionFusion, TheNodeKeepsNoProbabilities)
{
    const auto c = small("gpt2-tiny");
    const auto plain = buildZooModel(c);
    const auto graph = fuseAttention(plain);
    const auto plainCosts = computeOpCosts(plain);
    const auto costs = computeOpCosts(graph);
    const std::int64_t probabilities = 3 * 4 * 24 * 24 * 4;
    EXPECT_EQ(savedActivationBytes(plain, plainCosts) - savedActivationBytes(graph, costs), 2 * probabilities);
    double plainChain = 0;
    double plainBackward = 0;
    for (const auto& n : plain.nodes()) {
        const bool chain = n.op == OpType::Softmax || n.op == OpType::Mask || n.op == OpType::Scale
            || (n.op == OpType::MatMul && n.inputs.size() == 2
                && plain.tensor(n.inputs[1]).kind != TensorKind::Parameter);
        if (chain && n.layer == 0) {
            plainChain += plainCosts[n.id.index()].forwardFlops;
            plainBackward += plainCosts[n.id.index()].backwardFlops;
        }
    }
    const auto it = std::find_if(graph.nodes().begin(), graph.nodes().end(),
        [](const Node& n) { return n.op == OpType::Attention && n.layer == 0; });
    ASSERT_NE(it, graph.nodes().end());
    const auto& cost = costs[it->id.index()];
    EXPECT_EQ(cost.savedTensors, (std::vector<TensorId>(it->inputs.begin(), it->inputs.end())));
    EXPECT_EQ(cost.savedExtraBytes, 0);
    EXPECT_GT(cost.forwardFlops, 0.9 * plainChain);
    EXPECT_LT(cost.forwardFlops, 1.1 * plainChain);
    EXPECT_GT(cost.backwardFlops, plainBackward); // the recomputation
    EXPECT_EQ(cost.workspaceBytes, 2 * probabilities);
    EXPECT_GT(cost.backwardWorkspaceBytes, 0);
    // Its backward working set holds that workspace: the gradients walk of the fused graph is at
    // least it, and the whole backward's saved bytes fall by the probabilities.
    EXPECT_GE(backwardWorkingBytes(graph, 0, graph.nodeCount()), cost.backwardWorkspaceBytes);
}

// The op's shape rule: leading dims shared, head sizes matched, a padding mask of (B, Tk).
TEST(AttentionFusion, ShapeRuleChecksItsOperands)
{
    GraphBuilder b(ModelInfo { "attention", "test", "{}", 2 });
    const auto q = b.input("q", { 2, 3, 5, 8 }, DType::F32);
    const auto k = b.input("k", { 2, 3, 7, 8 }, DType::F32);
    const auto v = b.input("v", { 2, 3, 7, 6 }, DType::F32);
    const auto pad = b.input("pad", { 2, 7 }, DType::I64);
    const auto y =
        b.op(OpType::Attention, "attn", { q, k, v, pad }, { { "scale", 0.5 }, { "causal", std::int64_t { 1 } } });
    EXPECT_EQ(b.shape(y), (Shape { 2, 3, 5, 6 }));
    const auto badK = b.input("bad_k", { 2, 3, 7, 9 }, DType::F32);
    EXPECT_THROW((void)b.op(OpType::Attention, "bad_head", { q, badK, v }), Error);
    const auto badPad = b.input("bad_pad", { 2, 5 }, DType::I64);
    EXPECT_THROW((void)b.op(OpType::Attention, "bad_pad", { q, k, v, badPad }), Error);
}

// Two chains sharing a MatMul (the first's context is the second's scores, through a Transpose of
// the second's keys): the first fuses, the second stays a chain, and the graph stays valid.
TEST(AttentionFusion, OverlappingChainsFuseOnce)
{
    GraphBuilder b(ModelInfo { "overlap", "test", "{}", 2 });
    const auto q = b.input("q", { 2, 3, 5, 8 }, DType::F32);
    const auto k = b.input("k", { 2, 3, 5, 8 }, DType::F32);
    const auto k2 = b.input("k2", { 2, 3, 6, 5 }, DType::F32);
    const auto v2 = b.input("v2", { 2, 3, 6, 4 }, DType::F32);
    const auto p1 =
        b.op(OpType::Softmax, "p1", { b.op(OpType::MatMul, "s1", { q, k }, { { "trans_b", std::int64_t { 1 } } }) });
    const auto kt = b.op(OpType::Transpose, "kt", { k2 }, { { "perm", Shape { 0, 1, 3, 2 } } });
    const auto shared = b.op(OpType::MatMul, "shared", { p1, kt }); // the first's context, the second's scores
    const auto out = b.op(OpType::MatMul, "out", { b.op(OpType::Softmax, "p2", { shared }), v2 });
    const auto graph = b.finish({ out });
    std::size_t fused = 0;
    const auto result = fuseAttention(graph, &fused);
    EXPECT_EQ(fused, 1U);
    EXPECT_TRUE(validateGraph(result).empty());
    EXPECT_EQ(countOps(result, OpType::Attention), 1U);
    EXPECT_EQ(countOps(result, OpType::Softmax), 1U);
    EXPECT_EQ(result.tensor(result.outputs().front()).shape, (Shape { 2, 3, 5, 4 }));
}

// The node's analytical time (cost/analytical_profile.cpp) prices the passes over the scores the
// engine makes: a dropout in training adds the keep mask's pass forward and its two uses backward,
// and under bf16 those passes move bf16 scores, (2 x 2 + 1) / (2 x 4 + 1) of the fp32 bytes where
// memory bound (long sequences on an A100).
TEST(AttentionFusion, DropoutPassesArePricedAtTheScoresType)
{
    auto c = zooPreset("gpt2-small");
    c.layers = 1;
    c.seq = 1024;
    c.microBatch = 8;
    c.fusedAttention = true;
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    const auto attentionNs = [&](double dropout, Precision precision) {
        auto config = c;
        config.dropout = dropout;
        const auto graph = buildZooModel(config);
        CostModelOptions options;
        options.setup.precision = precision;
        const auto profile = estimateProfile(graph, a100, options);
        const auto it = std::find_if(
            graph.nodes().begin(), graph.nodes().end(), [](const Node& n) { return n.op == OpType::Attention; });
        EXPECT_NE(it, graph.nodes().end());
        const auto& node = profile.nodes[it->id.index()];
        return std::pair { node.forwardNs.at(8), node.backwardNs.at(8) };
    };
    for (const auto precision : { Precision::Fp32, Precision::Bf16 }) {
        const auto [forward, backward] = attentionNs(0.0, precision);
        const auto [droppedForward, droppedBackward] = attentionNs(0.1, precision);
        EXPECT_GT(droppedForward, forward * 1.02);
        EXPECT_GT(droppedBackward, backward * 1.01);
    }
    const auto fp32 = attentionNs(0.1, Precision::Fp32).first - attentionNs(0.0, Precision::Fp32).first;
    const auto bf16 = attentionNs(0.1, Precision::Bf16).first - attentionNs(0.0, Precision::Bf16).first;
    EXPECT_NEAR(bf16 / fp32, 5.0 / 9.0, 0.03);
}
