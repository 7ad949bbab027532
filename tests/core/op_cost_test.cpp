#include "graph/graph_builder.h"
#include "graph/graph_summary.h"
#include "graph/op_cost.h"
#include "test_graphs.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace ps;

TEST(OpCost, MatMulFlopsAndSavedOperands)
{
    const auto g = test::tinyMlp();
    const auto costs = computeOpCosts(g);
    // fc1: (4, 8) x (8, 16). Input x needs no grad, so backward is only dW = x^T dY and only x is
    // saved: the loader's batch, kept per micro-batch like an activation.
    EXPECT_DOUBLE_EQ(costs[0].forwardFlops, 2.0 * 4 * 8 * 16);
    EXPECT_DOUBLE_EQ(costs[0].backwardFlops, 2.0 * 4 * 8 * 16);
    ASSERT_EQ(costs[0].savedTensors.size(), 1U);
    EXPECT_EQ(costs[0].savedTensors[0], g.node(NodeId(0)).inputs[0]);
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
    // relu saves its output and fc2 saves the same tensor: counted once. Plus the input batch
    // fc1 keeps (4 x 8 fp32), CE probabilities (4 x 2 fp32) and the labels (4 x i64).
    EXPECT_EQ(savedActivationBytes(g, costs), 4 * 16 * 4 + 4 * 8 * 4 + 4 * 2 * 4 + 4 * 8);
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

namespace {

// x (2, 3, 8, 8) -> conv1 (4 filters 3x3, padded) -> relu -> conv2 (6 filters 3x3).
Graph twoConvolutions()
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 3, 8, 8 }, DType::F32);
    auto h =
        b.op(OpType::Conv, "conv1", { x, b.parameter("w1", { 4, 3, 3, 3 }) }, { { "pads", Shape { 1, 1, 1, 1 } } });
    h = b.op(OpType::Relu, "relu", { h });
    h = b.op(OpType::Conv, "conv2", { h, b.parameter("w2", { 6, 4, 3, 3 }) });
    return b.finish({ h });
}

} // namespace

TEST(OpCost, ConvFlopsAndWeightGradient)
{
    const auto g = twoConvolutions();
    const auto x = g.nodes()[0].inputs[0];
    const auto costs = computeOpCosts(g);
    // conv2: 2 x 6 x 6 x 6 outputs, each a 4 x 3 x 3 dot product.
    const double flops = 2.0 * (2 * 6 * 6 * 6) * (4 * 3 * 3);
    EXPECT_DOUBLE_EQ(costs[2].forwardFlops, flops);
    EXPECT_DOUBLE_EQ(costs[2].backwardFlops, 2 * flops);
    EXPECT_DOUBLE_EQ(costs[2].weightGradFlops, flops);
    ASSERT_EQ(costs[2].savedForWeightGrad.size(), 1U); // the relu output, kept for dW
    EXPECT_EQ(costs[2].savedForWeightGrad[0], g.node(NodeId(1)).outputs[0]);
    ASSERT_EQ(costs[0].savedTensors.size(), 1U); // conv1 keeps the image batch for its dW
    EXPECT_EQ(costs[0].savedTensors[0], x);
    EXPECT_EQ(costs[0].parameterCount, 4 * 3 * 3 * 3);
    // The CPU kernels' columns of one image: conv1 needs no dX (one matrix for dW, none in a
    // split B), conv2 both (two, one of them in B); a forward fills one.
    const std::int64_t columns1 = 4 * (3 * 3 * 3) * (8 * 8);
    const std::int64_t columns2 = 4 * (4 * 3 * 3) * (6 * 6);
    EXPECT_EQ(costs[0].fixedWorkspaceBytes, columns1);
    EXPECT_EQ(costs[0].fixedInputGradWorkspaceBytes, 0);
    EXPECT_EQ(costs[0].fixedWeightGradWorkspaceBytes, columns1);
    EXPECT_EQ(costs[2].fixedWorkspaceBytes, 2 * columns2);
    EXPECT_EQ(costs[2].fixedInputGradWorkspaceBytes, columns2);
    EXPECT_EQ(costs[2].fixedWeightGradWorkspaceBytes, columns2);
}

// The working sets the memory model adds at each node: what a forward's scratch comes on top of,
// and a backward's columns and (first backward after a step) gradients allocated as it goes.
TEST(OpCost, WorkingProfilesCountColumnsAndGrowingGradientsAtTheirNode)
{
    const auto g = twoConvolutions();
    const auto flow = gradientFlow(g);
    // Kept: x (there before the forward) and relu's output, made by node 1.
    const std::int64_t reluOut = 2 * 4 * 8 * 8 * 4;
    EXPECT_EQ(forwardPendingKept(g, flow, 0, 3), (std::vector<std::int64_t> { reluOut, 0, 0 }));
    EXPECT_EQ(forwardPendingKept(g, flow, 2, 3), (std::vector<std::int64_t> { 0 })); // relu's output came in
    const auto plain = backwardWorkingProfile(g, flow, 0, 3);
    EXPECT_TRUE(plain.withoutScratch.empty());
    EXPECT_EQ(plain.peak(1, false), static_cast<double>(plain.bytes));
    const std::int64_t columns2 = 4 * (4 * 3 * 3) * (6 * 6);
    EXPECT_GE(plain.peak(1, true), static_cast<double>(2 * columns2)); // conv2's two column matrices
    EXPECT_GT(plain.peak(1, true), plain.peak(1, false));
    // A batch 100 times larger: the columns do not grow.
    EXPECT_LT(plain.peak(100, true) - plain.peak(100, false), static_cast<double>(2 * columns2 + 1));
    const auto growing = backwardWorkingProfile(g, flow, 0, 3, BackwardPass::Full, true);
    const std::int64_t gradients = (4 * 3 * 3 * 3 + 6 * 4 * 3 * 3) * 4;
    ASSERT_FALSE(growing.withoutScratch.empty());
    std::int64_t most = 0;
    for (const auto& p : growing.withoutScratch)
        most = std::max(most, p.fixed);
    EXPECT_EQ(most, gradients); // at conv1 both parameters have their gradient
    EXPECT_GE(growing.peak(1, false), plain.peak(1, false));
    EXPECT_EQ(weightPassWorkingBytes(flow, 0, 3, false), 6 * 4 * 3 * 3 * 4); // conv2's dW
    const std::int64_t columns1 = 4 * (3 * 3 * 3) * (8 * 8);
    EXPECT_EQ(weightPassWorkingBytes(flow, 0, 3, true), 4 * 3 * 3 * 3 * 4 + columns1); // conv1's dW and columns
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

// Zero-bubble's W runs its training nodes last first; each frees, once done, the inputs and held
// output gradients no node W has still to run reads. Worked by hand on x -> MatMul(W0) -> Relu ->
// MatMul(W1): W1's gradient (1,024 B) comes with everything kept; W0's (2,048 B) after W1 freed
// the Relu output it read (512 B) and its output's gradient (32 B).
TEST(OpCost, WeightPassFreesWhatItsEarlierNodesRead)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 8 }, DType::F32);
    auto h = b.op(OpType::MatMul, "mm0", { x, b.parameter("w0", { 8, 64 }) });
    h = b.op(OpType::Relu, "relu", { h });
    h = b.op(OpType::MatMul, "mm1", { h, b.parameter("w1", { 64, 4 }) });
    const auto g = b.finish({ h });
    const auto flow = gradientFlow(g);
    EXPECT_EQ(weightGradHeldBytes(g, flow, 0, 3), 2 * 64 * 4 + 2 * 4 * 4); // mm0's and mm1's output gradients
    const auto profile = weightPassProfile(g, flow, 0, 3);
    EXPECT_DOUBLE_EQ(profile.peak(1, false), 2048.0 - 544.0);
    EXPECT_DOUBLE_EQ(profile.peak(10, false), 1024.0); // at ten times the batch, W1's moment is the most
    EXPECT_DOUBLE_EQ(profile.peak(0, false), 2048.0); // nothing freed: the old bound, the largest gradient
    EXPECT_EQ(weightPassWorkingBytes(flow, 0, 3, false), 2048);
}
