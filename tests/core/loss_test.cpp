// attachLoss: an imported model's first output gets a cross-entropy or mse loss and a labels input.
#include "graph/loss.h"
#include "graph/validate.h"
#include "util/error.h"

#include <gtest/gtest.h>

using namespace ps;

namespace {

// x (4, 8) -> MatMul w (8, 3) -> logits (4, 3), as an imported classifier.
Graph classifier()
{
    Graph g(ModelInfo { "clf", "onnx", "{}", 4 });
    const auto x = g.addTensor({ TensorId(), "x", { 4, 8 }, DType::F32, TensorKind::Input, NodeId(), nullptr });
    const auto w = g.addTensor({ TensorId(), "w", { 8, 3 }, DType::F32, TensorKind::Parameter, NodeId(), nullptr });
    const auto y =
        g.addTensor({ TensorId(), "logits", { 4, 3 }, DType::F32, TensorKind::Activation, NodeId(), nullptr });
    Node n;
    n.name = "fc";
    n.op = OpType::MatMul;
    n.inputs = { x, w };
    n.outputs = { y };
    g.addNode(n);
    g.setOutputs({ y });
    return g;
}

const Tensor* input(const Graph& g, const std::string& name)
{
    for (const auto& t : g.tensors()) {
        if (t.kind == TensorKind::Input && t.name == name)
            return &t;
    }
    return nullptr;
}

} // namespace

TEST(AttachLoss, CrossEntropyTakesClassLabelsOverTheLastDimension)
{
    const auto g = attachLoss(classifier(), { LossKind::CrossEntropy, std::nullopt });
    ASSERT_EQ(g.outputs().size(), 1U);
    const auto& loss = g.tensor(g.outputs().front());
    EXPECT_TRUE(loss.shape.empty());
    EXPECT_EQ(g.node(loss.producer).op, OpType::CrossEntropy);
    const auto* labels = input(g, "labels");
    ASSERT_NE(labels, nullptr);
    EXPECT_EQ(labels->shape, (Shape { 4 }));
    EXPECT_EQ(labels->dtype, DType::I64);
    EXPECT_TRUE(validateGraph(g).empty());
}

TEST(AttachLoss, MseIsTheMeanOfSquaredDifferencesAgainstFloatTargets)
{
    const auto g = attachLoss(classifier(), { LossKind::MeanSquaredError, Shape { 4, 3 } });
    const auto& loss = g.tensor(g.outputs().front());
    EXPECT_TRUE(loss.shape.empty());
    std::vector<OpType> ops;
    for (const auto& n : g.nodes())
        ops.push_back(n.op);
    EXPECT_EQ(ops, (std::vector<OpType> { OpType::MatMul, OpType::Sub, OpType::Pow, OpType::ReduceMean }));
    const auto* labels = input(g, "labels");
    ASSERT_NE(labels, nullptr);
    EXPECT_EQ(labels->shape, (Shape { 4, 3 }));
    EXPECT_EQ(labels->dtype, DType::F32);
    EXPECT_TRUE(validateGraph(g).empty());
}

TEST(AttachLoss, RefusesWhatItCannotTrainWithTheReason)
{
    const auto message = [](const Graph& g, LossSpec spec) {
        try {
            (void)attachLoss(g, spec);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_NE(
        message(classifier(), { LossKind::CrossEntropy, Shape { 4, 3 } }).find("needs labels (4)"), std::string::npos);
    const auto once = attachLoss(classifier(), { LossKind::CrossEntropy, std::nullopt });
    EXPECT_NE(message(once, { LossKind::MeanSquaredError, std::nullopt }).find("already ends in a scalar"),
        std::string::npos);
    EXPECT_EQ(parseLossKind("hinge"), std::nullopt);
    EXPECT_EQ(parseLossKind("mse"), LossKind::MeanSquaredError);
}
