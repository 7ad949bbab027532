#include "graph/graph_builder.h"
#include "graph/graph_summary.h"
#include "graph/op_cost.h"
#include "test_graphs.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

using namespace ps;

TEST(OpCost, MatMulFlopsAndSavedOperands)
{
    const auto g = test::tinyMlp();
    const auto costs = computeOpCosts(g);
    // fc1: (4, 8) x (8, 16). Input x needs no grad, so backward is only dW = x^T dY and only x is saved.
    EXPECT_DOUBLE_EQ(costs[0].forwardFlops, 2.0 * 4 * 8 * 16);
    EXPECT_DOUBLE_EQ(costs[0].backwardFlops, 2.0 * 4 * 8 * 16);
    EXPECT_TRUE(costs[0].savedTensors.empty()); // x is an input, not an activation
    EXPECT_EQ(costs[0].parameterCount, 8 * 16);
    // fc2: both operands need grad: two matmuls backward; saves the relu output (weights are resident).
    EXPECT_DOUBLE_EQ(costs[3].backwardFlops, 2 * 2.0 * 4 * 16 * 2);
    ASSERT_EQ(costs[3].savedTensors.size(), 1U);
    EXPECT_EQ(costs[3].savedTensors[0], g.node(NodeId(2)).outputs[0]);
}

TEST(OpCost, ReluOutputSavedOnceAcrossConsumers)
{
    const auto g = test::tinyMlp();
    const auto costs = computeOpCosts(g);
    // relu saves its output and fc2 saves the same tensor: counted once. Plus CE probabilities
    // (4 x 2 fp32) and the labels (4 x i64).
    EXPECT_EQ(savedActivationBytes(g, costs), 4 * 16 * 4 + 4 * 2 * 4 + 4 * 8);
}

TEST(OpCost, LayerNormAndDropoutState)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 5, 8 }, DType::F32);
    const auto w = b.parameter("w", { 8, 8 });
    auto h = b.op(OpType::MatMul, "proj", { x, w });
    h = b.op(OpType::LayerNorm, "ln", { h, b.parameter("g", { 8 }), b.parameter("b", { 8 }) });
    h = b.op(OpType::Dropout, "drop", { h }, { { "p", 0.1 } });
    const auto g = b.finish({ h });
    const auto costs = computeOpCosts(g);
    EXPECT_EQ(costs[1].savedBytes, 2 * 5 * 8 * 4 + 2 * (2 * 5) * 4); // input + mean/rstd
    EXPECT_EQ(costs[2].savedBytes, 2 * 5 * 8); // one-byte mask
    EXPECT_EQ(costs[1].parameterCount, 16);
}

TEST(OpCost, ConvFlopsAndWeightGradient)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 3, 8, 8 }, DType::F32);
    auto h =
        b.op(OpType::Conv, "conv1", { x, b.parameter("w1", { 4, 3, 3, 3 }) }, { { "pads", Shape { 1, 1, 1, 1 } } });
    h = b.op(OpType::Relu, "relu", { h });
    h = b.op(OpType::Conv, "conv2", { h, b.parameter("w2", { 6, 4, 3, 3 }) });
    const auto g = b.finish({ h });
    const auto costs = computeOpCosts(g);
    // conv2: 2 x 6 x 6 x 6 outputs, each a 4 x 3 x 3 dot product.
    const double flops = 2.0 * (2 * 6 * 6 * 6) * (4 * 3 * 3);
    EXPECT_DOUBLE_EQ(costs[2].forwardFlops, flops);
    EXPECT_DOUBLE_EQ(costs[2].backwardFlops, 2 * flops);
    EXPECT_DOUBLE_EQ(costs[2].weightGradFlops, flops);
    ASSERT_EQ(costs[2].savedForWeightGrad.size(), 1U); // the relu output, kept for dW
    EXPECT_EQ(costs[2].savedForWeightGrad[0], g.node(NodeId(1)).outputs[0]);
    EXPECT_TRUE(costs[0].savedTensors.empty()); // conv1 reads the data input: nothing to keep
    EXPECT_EQ(costs[0].parameterCount, 4 * 3 * 3 * 3);
}

TEST(OpCost, ViewsWriteNothing)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 6 }, DType::F32);
    const auto r = b.op(OpType::Reshape, "r", { x }, { { "shape", Shape { 3, 4 } } });
    const auto g = b.finish({ r });
    const auto costs = computeOpCosts(g);
    EXPECT_EQ(costs[0].outputBytes, 0);
    EXPECT_EQ(storageRoot(g, r), x);
}

TEST(Summary, Gpt2SmallFlopsMatchTheStandardEstimate)
{
    auto c = zooPreset("gpt2-small");
    c.seq = 128;
    c.microBatch = 2;
    const auto s = summarizeGraph(buildZooModel(c));
    // Kaplan et al.: forward ~ 2 * N_params_nonembedding * T + attention 2 * L * T^2 * C (x2 for QK and AV)
    // + the lm_head 2 * T * C * V. The op count adds elementwise work on top, a few percent.
    const double nonEmbedding = 12.0 * 12 * 768 * 768;
    const double matmuls = 2 * nonEmbedding * 128 + 2.0 * 12 * 128 * 128 * 768 * 2 + 2.0 * 128 * 768 * 50257;
    EXPECT_GT(s.forwardFlopsPerSample, matmuls);
    EXPECT_LT(s.forwardFlopsPerSample, matmuls * 1.05);
    // Backward is about twice forward for a model dominated by matmuls.
    EXPECT_NEAR(s.backwardFlopsPerSample / s.forwardFlopsPerSample, 2.0, 0.1);
    EXPECT_EQ(s.layerCount, 12);
}

TEST(Summary, FormatsUnits)
{
    EXPECT_EQ(formatCount(124439808), "124.44M");
    EXPECT_EQ(formatBytes(1536), "1.50 KiB");
    EXPECT_EQ(formatFlops(999), "999 FLOP");
}
