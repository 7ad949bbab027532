// The GroupNorm op and the pass that fuses the chain an ONNX import writes for it
// (graph/group_norm.h): each exporter's form becomes one node with the module's own scale and
// shift, a per-group scale stays after it, chains that are not GroupNorm stay as they are, and the
// node keeps less for backward than the chain.
#include "graph/graph_builder.h"
#include "graph/group_norm.h"
#include "graph/op_cost.h"
#include "graph/validate.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace ps;

namespace {

enum class Affine { None, TorchExport, PerChannelFlat, PerGroup };

struct ChainSpec
{
    Shape x { 2, 6, 4, 5 };
    std::int64_t groups = 3; // the (N, G, -1) view
    Affine affine = Affine::TorchExport;
    bool centeredReadElsewhere = false; // the centered values also a graph output
    std::int64_t meanAxis = 2;
};

std::size_t opsOfType(const Graph& g, OpType op)
{
    return static_cast<std::size_t>(
        std::count_if(g.nodes().begin(), g.nodes().end(), [op](const Node& n) { return n.op == op; }));
}

// The IR chain onnx/composite_lowering.h writes for torch's GroupNorm export (Reshape ->
// InstanceNormalization -> Reshape -> Mul -> Add), GroupNormalization-21 (affine over (N, C, -1))
// and GroupNormalization-18 (affine per group), followed by a Relu.
Graph chain(const ChainSpec& s)
{
    GraphBuilder b(ModelInfo { "gn", "onnx", "{}", s.x[0] });
    // x needs a gradient (as a layer's output does): a bias over the last dim first
    const auto x =
        b.op(OpType::BiasAdd, "x", { b.input("data", s.x, DType::F32), b.parameter("x_bias", { s.x.back() }) });
    const auto n = s.x[0];
    const auto c = s.x[1];
    const auto spatial = numElements(s.x) / (n * c);
    Shape channelShape(s.x.size() - 1, 1); // (C, 1, ...): torch's Unsqueeze of the module's weight
    channelShape[0] = c;
    b.pushScope("gn");
    const auto a = b.op(OpType::Reshape, "grouped", { x }, { { "shape", Shape { n, s.groups, -1 } } });
    const Attributes mean { { "axes", Shape { s.meanAxis } }, { "keepdims", std::int64_t { 1 } } };
    const auto centered = b.op(OpType::Sub, "centered", { a, b.op(OpType::ReduceMean, "mean", { a }, mean) });
    const auto variance =
        b.op(OpType::ReduceMean, "variance", { b.op(OpType::Mul, "squared", { centered, centered }) }, mean);
    const auto eps = b.constant("eps", {}, std::vector<float> { 1e-5F });
    const auto std = b.op(OpType::Sqrt, "std", { b.op(OpType::Add, "variance_eps", { variance, eps }) });
    auto y = b.op(OpType::Div, "normalized", { centered, std });
    switch (s.affine) {
    case Affine::None:
        y = b.op(OpType::Reshape, "restored", { y }, { { "shape", s.x } });
        break;
    case Affine::TorchExport:
        y = b.op(OpType::Reshape, "restored", { y }, { { "shape", s.x } });
        y = b.op(OpType::Mul, "scaled", { y, b.parameter("weight", channelShape) });
        y = b.op(OpType::Add, "shifted", { y, b.parameter("bias", channelShape) });
        break;
    case Affine::PerChannelFlat: {
        y = b.op(OpType::Reshape, "channels", { y }, { { "shape", Shape { n, c, spatial } } });
        const auto w =
            b.op(OpType::Reshape, "scale", { b.parameter("weight", { c }) }, { { "shape", Shape { c, 1 } } });
        y = b.op(OpType::Mul, "scaled", { y, w });
        const auto v = b.op(OpType::Reshape, "bias", { b.parameter("bias", { c }) }, { { "shape", Shape { c, 1 } } });
        y = b.op(OpType::Add, "shifted", { y, v });
        y = b.op(OpType::Reshape, "restored", { y }, { { "shape", s.x } });
        break;
    }
    case Affine::PerGroup:
        y = b.op(OpType::Mul, "scaled", { y, b.parameter("weight", { s.groups, 1 }) });
        y = b.op(OpType::Add, "shifted", { y, b.parameter("bias", { s.groups, 1 }) });
        y = b.op(OpType::Reshape, "restored", { y }, { { "shape", s.x } });
        break;
    }
    b.popScope();
    const auto out = b.op(OpType::Relu, "act", { y });
    std::vector<TensorId> outputs { out };
    if (s.centeredReadElsewhere)
        outputs.push_back(centered);
    return b.finish(outputs);
}

const Node& onlyGroupNorm(const Graph& g)
{
    const auto it =
        std::find_if(g.nodes().begin(), g.nodes().end(), [](const Node& n) { return n.op == OpType::GroupNorm; });
    EXPECT_NE(it, g.nodes().end());
    return *it;
}

} // namespace

// Each exporter's form: one GroupNorm node reading x, the module's scale and shift, with the
// chain's groups and epsilon; the graph stays valid, trains the same parameters, and the output
// keeps its name (what reads it is unchanged).
TEST(GroupNormFusion, EachExportedFormBecomesOneNode)
{
    for (const auto affine : { Affine::TorchExport, Affine::PerChannelFlat, Affine::None }) {
        ChainSpec s;
        s.affine = affine;
        const auto plain = chain(s);
        std::size_t fused = 0;
        const auto g = fuseGroupNorm(plain, &fused);
        const auto what = "form " + std::to_string(static_cast<int>(affine));
        EXPECT_EQ(fused, 1U) << what;
        EXPECT_TRUE(validateGraph(g).empty()) << what;
        EXPECT_EQ(g.nodeCount(), 3U) << what; // BiasAdd, GroupNorm, Relu
        EXPECT_EQ(g.parameterCount(), plain.parameterCount()) << what;
        const auto& n = onlyGroupNorm(g);
        EXPECT_EQ(n.intAttr("groups", 0), 3) << what;
        EXPECT_NEAR(n.floatAttr("epsilon", 0), 1e-5, 1e-12) << what;
        EXPECT_EQ(n.name, "gn.group_norm") << what;
        EXPECT_EQ(n.scope, "gn") << what;
        ASSERT_EQ(n.inputs.size(), affine == Affine::None ? 1U : 3U) << what;
        EXPECT_EQ(g.tensor(n.inputs[0]).name, "x") << what;
        if (affine != Affine::None) {
            EXPECT_EQ(g.tensor(n.inputs[1]).name, "gn.weight") << what;
            EXPECT_EQ(g.tensor(n.inputs[2]).name, "gn.bias") << what;
        }
        EXPECT_EQ(g.tensor(n.outputs[0]).shape, s.x) << what;
        EXPECT_EQ(std::count_if(g.tensors().begin(), g.tensors().end(),
                      [](const Tensor& t) { return t.kind == TensorKind::Constant; }),
            0)
            << what; // the epsilon went with the chain
    }
    // InstanceNorm (groups = channels) over a 1-D signal, and GroupNorm over (N, C).
    for (const auto& x : { Shape { 2, 6, 7 }, Shape { 4, 6 } }) {
        ChainSpec s;
        s.x = x;
        s.groups = x.size() == 3 ? 6 : 2;
        const auto g = fuseGroupNorm(chain(s));
        EXPECT_EQ(onlyGroupNorm(g).intAttr("groups", 0), s.groups) << formatShape(x);
        EXPECT_EQ(g.nodeCount(), 3U) << formatShape(x);
    }
}

// GroupNormalization-18's scale and shift are per group: the node normalizes, a Reshape gives the
// grouped view back, and the Mul, Add and Reshape stay.
TEST(GroupNormFusion, APerGroupScaleStaysAfterTheNode)
{
    ChainSpec s;
    s.affine = Affine::PerGroup;
    const auto g = fuseGroupNorm(chain(s));
    EXPECT_TRUE(validateGraph(g).empty());
    const auto& n = onlyGroupNorm(g);
    EXPECT_EQ(n.inputs.size(), 1U);
    EXPECT_EQ(opsOfType(g, OpType::Reshape), 2U);
    EXPECT_EQ(opsOfType(g, OpType::Mul), 1U);
    EXPECT_EQ(opsOfType(g, OpType::Add), 1U);
    EXPECT_EQ(g.nodeCount(), 7U);
}

// Not GroupNorm, or not only: groups that cut through channels (6 channels into 4 rows), a mean over
// another axis, centered values something else reads: left as they are.
TEST(GroupNormFusion, OtherChainsStayAsTheyAre)
{
    ChainSpec cut;
    cut.x = { 2, 6, 4 };
    cut.groups = 4;
    ChainSpec otherAxis;
    otherAxis.meanAxis = 1;
    ChainSpec shared;
    shared.centeredReadElsewhere = true;
    for (const auto& s : { cut, otherAxis, shared }) {
        const auto plain = chain(s);
        std::size_t fused = 7;
        const auto g = fuseGroupNorm(plain, &fused);
        EXPECT_EQ(fused, 0U) << formatShape(s.x);
        EXPECT_EQ(g, plain);
    }
}

// What the backward keeps per micro-batch: x and two floats per (sample, group), where the chain
// kept the grouped input, the centered values, the deviation and the normalized output; FLOPs are
// the normalization's. Shape rule refusals name the problem.
TEST(GroupNormFusion, TheNodeKeepsLessThanTheChainAndChecksItsShapes)
{
    const auto plain = chain(ChainSpec {});
    const auto g = fuseGroupNorm(plain);
    const auto fusedSaved = savedActivationBytes(g, computeOpCosts(g));
    const auto chainSaved = savedActivationBytes(plain, computeOpCosts(plain));
    const std::int64_t x = 2 * 6 * 4 * 5 * 4;
    // x, mean and rstd of 2 samples x 3 groups; the Relu's output in both
    EXPECT_EQ(fusedSaved, x + 2 * 2 * 3 * 4 + x);
    EXPECT_GE(chainSaved - x, 2 * x) << chainSaved; // the centered and the normalized values at least
    const auto costs = computeOpCosts(g);
    const auto& n = onlyGroupNorm(g);
    EXPECT_DOUBLE_EQ(costs[n.id.index()].forwardFlops, 8.0 * 240);

    Node node;
    node.op = OpType::GroupNorm;
    node.attrs = { { "groups", std::int64_t { 4 } } };
    Tensor xt;
    xt.name = "x";
    xt.shape = { 2, 6, 3 };
    Tensor gamma;
    gamma.name = "gamma";
    gamma.shape = { 6 };
    EXPECT_THROW((void)groupNormShape(node, { &xt, &gamma }), Error); // 4 groups of 6 channels
    node.attrs["groups"] = std::int64_t { 3 };
    EXPECT_EQ(groupNormShape(node, { &xt, &gamma }).front(), xt.shape);
    gamma.shape = { 6, 1, 1 };
    EXPECT_NO_THROW((void)groupNormShape(node, { &xt, &gamma }));
    gamma.shape = { 2, 3 };
    EXPECT_THROW((void)groupNormShape(node, { &xt, &gamma }), Error);
}

// LayerNorm as torch writes it below opset 17 (Pow, and a BiasAdd for the shift) and RMSNorm as
// LLaMA's and Qwen's exports write it (x * Reciprocal(Sqrt(mean(x * x) + eps)), the weight first):
// one LayerNorm / RMSNorm node each, the residual that reads x again kept; a LayerNorm without a
// scale stays as it is.
TEST(GroupNormFusion, LayerNormAndRmsNormChainsBecomeTheirNodes)
{
    const auto build = [](bool rms, bool scaled) {
        GraphBuilder b(ModelInfo { "ln", "onnx", "{}", 2 });
        const auto x =
            b.op(OpType::BiasAdd, "x", { b.input("data", { 2, 5, 8 }, DType::F32), b.parameter("x_bias", { 8 }) });
        const Attributes last { { "axes", Shape { -1 } }, { "keepdims", std::int64_t { 1 } } };
        const auto eps = b.constant("eps", {}, std::vector<float> { 1e-6F });
        TensorId y;
        if (rms) {
            const auto ms = b.op(OpType::ReduceMean, "ms", { b.op(OpType::Mul, "sq", { x, x }) }, last);
            const auto inv = b.op(
                OpType::Reciprocal, "inv", { b.op(OpType::Sqrt, "rms", { b.op(OpType::Add, "mse", { ms, eps }) }) });
            y = b.op(OpType::Mul, "scaled", { b.parameter("weight", { 8 }), b.op(OpType::Mul, "normed", { x, inv }) });
        } else {
            const auto c = b.op(OpType::Sub, "centered", { x, b.op(OpType::ReduceMean, "mean", { x }, last) });
            const auto v =
                b.op(OpType::ReduceMean, "var", { b.op(OpType::Pow, "sq", { c }, { { "exponent", 2.0 } }) }, last);
            y = b.op(
                OpType::Div, "normed", { c, b.op(OpType::Sqrt, "std", { b.op(OpType::Add, "var_eps", { v, eps }) }) });
            if (scaled) {
                y = b.op(OpType::Mul, "scaled", { y, b.parameter("weight", { 8 }) });
                y = b.op(OpType::BiasAdd, "shifted", { y, b.parameter("bias", { 8 }) });
            }
        }
        return b.finish({ b.op(OpType::Add, "residual", { x, y }) });
    };
    for (const bool rms : { false, true }) {
        const auto plain = build(rms, true);
        NormalizationsFused fused;
        const auto g = fuseNormalizations(plain, &fused);
        EXPECT_EQ(rms ? fused.rmsNorms : fused.layerNorms, 1U) << rms;
        EXPECT_EQ(fused.groupNorms + (rms ? fused.layerNorms : fused.rmsNorms), 0U) << rms;
        EXPECT_TRUE(validateGraph(g).empty()) << rms;
        EXPECT_EQ(g.nodeCount(), 3U) << rms; // BiasAdd, the norm, the residual Add
        EXPECT_EQ(g.parameterCount(), plain.parameterCount()) << rms;
        const auto& n = g.nodes()[1];
        EXPECT_EQ(n.op, rms ? OpType::RMSNorm : OpType::LayerNorm);
        EXPECT_NEAR(n.floatAttr("epsilon", 0), 1e-6, 1e-12);
        ASSERT_EQ(n.inputs.size(), rms ? 2U : 3U);
        EXPECT_EQ(g.tensor(n.inputs[0]).name, "x");
        EXPECT_EQ(g.tensor(n.inputs[1]).name, "weight");
        EXPECT_EQ(fuseGroupNorm(plain).nodeCount(), plain.nodeCount()) << rms; // group norms only
    }
    NormalizationsFused none;
    const auto unscaled = build(false, false);
    EXPECT_EQ(fuseNormalizations(unscaled, &none), unscaled);
    EXPECT_EQ(none.layerNorms, 0U);
}
