#include "graph/graph_builder.h"
#include "graph/shape_inference.h"
#include "graph/validate.h"
#include "test_graphs.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace ps;

namespace {

bool hasError(const Graph& g, const std::string& fragment)
{
    const auto issues = validateGraph(g);
    return std::any_of(issues.begin(), issues.end(), [&](const GraphIssue& i) {
        return i.severity == GraphIssue::Severity::Error && i.message.find(fragment) != std::string::npos;
    });
}

Graph rebuiltWith(const Graph& g, const std::function<void(std::vector<Tensor>&, std::vector<Node>&)>& edit)
{
    std::vector<Tensor> tensors(g.tensors().begin(), g.tensors().end());
    std::vector<Node> nodes(g.nodes().begin(), g.nodes().end());
    edit(tensors, nodes);
    Graph out(g.info());
    for (auto t : tensors) {
        t.producer = NodeId();
        out.addTensor(t);
    }
    for (auto& n : nodes)
        out.addNode(n);
    out.setOutputs(g.outputs());
    return out;
}

} // namespace

TEST(Types, NamesRoundTrip)
{
    for (const auto& info : allOpTypes())
        EXPECT_EQ(parseOpType(info.name), info.type);
    EXPECT_EQ(parseDType("bf16"), DType::BF16);
    EXPECT_EQ(parseTensorKind("parameter"), TensorKind::Parameter);
    EXPECT_FALSE(parseOpType("Conv3000").has_value());
    EXPECT_EQ(splitShape(joinShape({ 4, 1024, 768 })), (Shape { 4, 1024, 768 }));
    EXPECT_TRUE(splitShape("").empty());
    EXPECT_THROW((void)splitShape("4,x"), Error);
    EXPECT_EQ(numBytes({ 2, 3 }, DType::F16), 12);
}

TEST(ShapeInference, MatMulBroadcastAndTranspose)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto q = b.input("q", { 2, 4, 16, 8 }, DType::F32);
    const auto k = b.input("k", { 2, 4, 16, 8 }, DType::F32);
    const auto s = b.op(OpType::MatMul, "scores", { q, k }, { { "trans_b", std::int64_t { 1 } } });
    EXPECT_EQ(b.shape(s), (Shape { 2, 4, 16, 16 }));
    const auto w = b.parameter("w", { 8, 3 });
    EXPECT_EQ(b.shape(b.op(OpType::MatMul, "proj", { q, w })), (Shape { 2, 4, 16, 3 }));
    EXPECT_THROW(b.op(OpType::MatMul, "bad", { q, q }), Error);
}

TEST(ShapeInference, ConvolutionalAndReductionOps)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 3, 64, 64 }, DType::F32);
    // resnet18's stem: 7x7 stride 2 pad 3 -> 32x32; max pool 3x3 stride 2 pad 1 -> 16x16.
    const auto c = b.op(OpType::Conv, "conv", { x, b.parameter("w", { 64, 3, 7, 7 }) },
        { { "strides", Shape { 2, 2 } }, { "pads", Shape { 3, 3, 3, 3 } } });
    EXPECT_EQ(b.shape(c), (Shape { 2, 64, 32, 32 }));
    const auto bn = b.op(OpType::BatchNorm, "bn",
        { c, b.parameter("g", { 64 }), b.parameter("b", { 64 }), b.constant("m", { 64 }, DType::F32),
            b.constant("v", { 64 }, DType::F32) });
    const auto p = b.op(OpType::MaxPool, "pool", { bn },
        { { "kernel", Shape { 3, 3 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } });
    EXPECT_EQ(b.shape(p), (Shape { 2, 64, 16, 16 }));
    // Grouped conv: 64 channels in 4 groups of 16.
    const auto g = b.op(OpType::Conv, "grouped", { p, b.parameter("wg", { 32, 16, 3, 3 }) },
        { { "group", std::int64_t { 4 } }, { "pads", Shape { 1, 1, 1, 1 } } });
    EXPECT_EQ(b.shape(g), (Shape { 2, 32, 16, 16 }));
    EXPECT_EQ(b.shape(b.op(OpType::GlobalAvgPool, "gap", { g })), (Shape { 2, 32, 1, 1 }));
    EXPECT_THROW(b.op(OpType::Conv, "bad", { p, b.parameter("wb", { 8, 3, 3, 3 }) }), Error);
    EXPECT_THROW(b.op(OpType::MaxPool, "nokernel", { p }), Error);

    // Over (N, C, D, H, W): pads all begins, then all ends; a 2-entry kernel on a volume is refused.
    const auto clip = b.input("clip", { 2, 3, 8, 32, 32 }, DType::F32);
    const auto c3 = b.op(OpType::Conv, "conv3d", { clip, b.parameter("w3", { 16, 3, 3, 7, 7 }) },
        { { "strides", Shape { 1, 2, 2 } }, { "pads", Shape { 1, 3, 3, 1, 3, 3 } } });
    EXPECT_EQ(b.shape(c3), (Shape { 2, 16, 8, 16, 16 }));
    const auto p3 = b.op(OpType::MaxPool, "pool3d", { c3 },
        { { "kernel", Shape { 2, 3, 3 } }, { "strides", Shape { 2, 2, 2 } }, { "pads", Shape { 0, 1, 1, 0, 1, 1 } } });
    EXPECT_EQ(b.shape(p3), (Shape { 2, 16, 4, 8, 8 }));
    EXPECT_EQ(b.shape(b.op(OpType::ConvTranspose, "up3d", { p3, b.parameter("wt", { 16, 4, 2, 2, 2 }) },
                  { { "strides", Shape { 2, 2, 2 } } })),
        (Shape { 2, 4, 8, 16, 16 }));
    EXPECT_EQ(b.shape(b.op(OpType::GlobalAvgPool, "gap3d", { p3 })), (Shape { 2, 16, 1, 1, 1 }));
    EXPECT_EQ(b.shape(b.op(OpType::GlobalAvgPool, "gap1d", { b.input("seq", { 2, 5, 9 }, DType::F32) })),
        (Shape { 2, 5, 1 }));
    EXPECT_THROW(b.op(OpType::MaxPool, "flatkernel", { c3 }, { { "kernel", Shape { 3, 3 } } }), Error);
    EXPECT_THROW(b.op(OpType::Conv, "mixedranks", { clip, b.parameter("w2", { 16, 3, 3, 3 }) }), Error);

    const auto t = b.input("t", { 2, 5, 8 }, DType::F32);
    EXPECT_EQ(b.shape(b.op(OpType::ReduceMean, "mean", { t }, { { "axes", Shape { -1 } } })), (Shape { 2, 5, 1 }));
    EXPECT_EQ(
        b.shape(b.op(OpType::ReduceMean, "all", { t }, { { "axes", Shape {} }, { "keepdims", std::int64_t { 0 } } })),
        Shape {});
    EXPECT_EQ(b.shape(b.op(
                  OpType::Select, "cls", { t }, { { "axis", std::int64_t { 1 } }, { "index", std::int64_t { 0 } } })),
        (Shape { 2, 8 }));
    EXPECT_THROW(
        b.op(OpType::Select, "far", { t }, { { "axis", std::int64_t { 1 } }, { "index", std::int64_t { 5 } } }), Error);
    const auto token = b.parameter("token", { 1, 1, 8 });
    EXPECT_EQ(
        b.shape(b.op(OpType::Expand, "expand", { token }, { { "shape", Shape { 2, 1, 8 } } })), (Shape { 2, 1, 8 }));
    EXPECT_EQ(b.shape(b.op(OpType::Div, "div", { t, b.op(OpType::Sqrt, "sqrt", { t }) })), (Shape { 2, 5, 8 }));
}

TEST(ShapeInference, ErrorsNameTheProblem)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 6 }, DType::F32);
    try {
        b.op(OpType::Reshape, "r", { x }, { { "shape", Shape { 5, -1 } } });
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("node 'r'"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("Reshape"), std::string::npos) << e.what();
    }
    EXPECT_EQ(broadcastShapes({ 4, 1, 3 }, { 5, 1 }), (Shape { 4, 5, 3 }));
    EXPECT_THROW((void)broadcastShapes({ 4, 2 }, { 3 }), Error);
    EXPECT_THROW(b.op(OpType::LayerNorm, "ln", { x, b.parameter("g", { 5 }), b.parameter("b", { 6 }) }), Error);
}

TEST(Validate, TinyGraphIsClean)
{
    const auto g = test::tinyMlp();
    EXPECT_TRUE(validateGraph(g).empty());
    EXPECT_EQ(g.parameterCount(), 8 * 16 + 16 + 16 * 2);
}

TEST(Validate, DetectsCycle)
{
    // fc1 reads relu's output: fc1 -> bias -> relu -> fc1.
    const auto g = rebuiltWith(test::tinyMlp(), [](auto& tensors, auto& nodes) {
        const auto relu = std::find_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.name == "relu"; });
        (void)tensors;
        nodes[0].inputs[0] = relu->outputs[0];
    });
    EXPECT_TRUE(hasError(g, "cycle")) << validateGraph(g).front().message;
    EXPECT_THROW(validateGraphOrThrow(g), Error);
}

TEST(Validate, DetectsDanglingTensorAndReference)
{
    auto dangling = rebuiltWith(test::tinyMlp(), [](auto& tensors, auto&) {
        tensors.push_back({ TensorId(), "orphan", { 4, 16 }, DType::F32, TensorKind::Activation, NodeId(), {} });
    });
    EXPECT_TRUE(hasError(dangling, "'orphan' has no producing node"));

    auto missing = rebuiltWith(test::tinyMlp(), [](auto&, auto& nodes) { nodes[2].inputs[0] = TensorId(999); });
    EXPECT_TRUE(hasError(missing, "tensor #999, which does not exist"));
}

TEST(Validate, DetectsShapeMismatch)
{
    const auto g = rebuiltWith(test::tinyMlp(), [](auto& tensors, auto& nodes) {
        tensors[nodes[0].outputs[0].index()].shape = { 4, 17 };
    });
    EXPECT_TRUE(hasError(g, "node 'fc1' (MatMul): output 'fc1' is stored as (4, 17) but the op computes (4, 16)"));
}

TEST(Validate, DetectsOutOfOrderNodes)
{
    const auto g = rebuiltWith(test::tinyMlp(), [](auto&, auto& nodes) { std::swap(nodes[0], nodes[1]); });
    EXPECT_TRUE(hasError(g, "before its producer"));
}

TEST(Validate, WarnsAboutUnusedActivation)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 6 }, DType::F32);
    const auto parts =
        b.opMulti(OpType::Split, "split", { x }, { { "axis", std::int64_t { 1 } }, { "sizes", Shape { 3, 3 } } });
    const auto g = b.finish({ parts[0] });
    const auto issues = validateGraph(g);
    ASSERT_EQ(issues.size(), 1U);
    EXPECT_EQ(issues[0].severity, GraphIssue::Severity::Warning);
    EXPECT_NE(issues[0].message.find("split:1"), std::string::npos);
}

TEST(Graph, ParameterValuesMustFitTheParameter)
{
    GraphBuilder b(ModelInfo { "t", "test", "{}", 2 });
    const auto x = b.input("x", { 2, 4 }, DType::F32);
    const auto w = b.parameter("w", { 4, 3 });
    auto g = b.finish({ b.op(OpType::MatMul, "proj", { x, w }) });
    g.setParameterValues(w, std::make_shared<const std::vector<std::byte>>(4 * 3 * 4));
    EXPECT_EQ(g.tensor(w).data->size(), 48U);
    EXPECT_THROW(g.setParameterValues(w, std::make_shared<const std::vector<std::byte>>(8)), Error);
    EXPECT_THROW(g.setParameterValues(x, std::make_shared<const std::vector<std::byte>>(32)), Error);
}
