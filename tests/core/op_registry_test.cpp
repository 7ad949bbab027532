// The op registry: one entry per OpType that shape inference and the cost model read.
#include "graph/op_cost.h"
#include "graph/op_registry.h"
#include "graph/shape_inference.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <set>

using namespace ps;

TEST(OpRegistry, EveryOpHasOneEntryWithAUniqueName)
{
    std::set<std::string_view> names;
    for (std::size_t i = 0; i < opDefs().size(); ++i) {
        const auto& def = opDefs()[i];
        EXPECT_EQ(static_cast<std::size_t>(def.type), i);
        EXPECT_TRUE(names.insert(def.name).second) << def.name;
        EXPECT_EQ(parseOpType(def.name), def.type) << def.name;
        EXPECT_FALSE(def.signature.empty()) << def.name;
        EXPECT_LE(def.minInputs, def.maxInputs) << def.name;
        if (def.type != OpType::Opaque) {
            EXPECT_NE(def.shapes, nullptr) << def.name << " has no shape rule";
        }
    }
    EXPECT_EQ(opDefs().back().type, OpType::Opaque);
    EXPECT_EQ(allOpTypes().size(), opDefs().size());
}

namespace {

Tensor tensor(Shape shape, DType dtype = DType::F32)
{
    return { TensorId(), "t", std::move(shape), dtype, TensorKind::Activation, NodeId(), nullptr };
}

Shape inferOne(OpType op, Attributes attrs, const std::vector<Tensor>& inputs, std::size_t output = 0)
{
    Node n;
    n.name = "n";
    n.op = op;
    n.attrs = std::move(attrs);
    std::vector<const Tensor*> in;
    for (const auto& t : inputs)
        in.push_back(&t);
    return inferOutputShapes(n, in)->at(output);
}

} // namespace

TEST(OpRegistry, ShapesOfTheTracedModelOps)
{
    // PyTorch's ceil_mode: the last window must start inside the input (6 -> 3, not 4, for k 2 s 2 pad 1).
    EXPECT_EQ(inferOne(OpType::MaxPool,
                  { { "kernel", std::vector<std::int64_t> { 3, 3 } }, { "strides", std::vector<std::int64_t> { 2, 2 } },
                      { "ceil_mode", 1 } },
                  { tensor({ 1, 2, 6, 6 }) }),
        (Shape { 1, 2, 3, 3 }));
    EXPECT_EQ(inferOne(OpType::AvgPool,
                  { { "kernel", std::vector<std::int64_t> { 2, 2 } }, { "strides", std::vector<std::int64_t> { 2, 2 } },
                      { "pads", std::vector<std::int64_t> { 1, 1, 1, 1 } }, { "ceil_mode", 1 } },
                  { tensor({ 1, 1, 6, 6 }) }),
        (Shape { 1, 1, 4, 4 }));
    EXPECT_EQ(inferOne(OpType::Where, {}, { tensor({ 1, 1, 4, 4 }, DType::Bool), tensor({ 2, 3, 4, 4 }), tensor({}) }),
        (Shape { 2, 3, 4, 4 }));
    EXPECT_EQ(inferOne(OpType::Gather, { { "axis", 1 } }, { tensor({ 5, 7, 3 }), tensor({ 2, 4 }, DType::I64) }),
        (Shape { 5, 2, 4, 3 }));
    EXPECT_EQ(inferOne(OpType::Pad, { { "pads", std::vector<std::int64_t> { 0, 0, 1, 2, 0, 0, 3, -1 } } },
                  { tensor({ 1, 2, 5, 5 }) }),
        (Shape { 1, 2, 9, 6 }));
    EXPECT_EQ(inferOne(OpType::TopK, { { "k", 2 } }, { tensor({ 3, 8 }) }, 1), (Shape { 3, 2 }));
    EXPECT_EQ(inferOne(OpType::Einsum, { { "equation", std::string("bhid,bhjd->bhij") } },
                  { tensor({ 2, 4, 5, 8 }), tensor({ 2, 4, 6, 8 }) }),
        (Shape { 2, 4, 5, 6 }));
    EXPECT_EQ(inferOne(OpType::ReduceSum, { { "axes", std::vector<std::int64_t> { -1 } }, { "keepdims", 0 } },
                  { tensor({ 3, 4 }) }),
        (Shape { 3 }));
    EXPECT_THROW((void)inferOne(OpType::Cast, { { "to", std::string("complex") } }, { tensor({ 3 }) }), Error);
    EXPECT_THROW((void)inferOne(OpType::Einsum, { { "equation", std::string("ii->i") } }, { tensor({ 3, 3 }) }), Error);
}

TEST(OpRegistry, EinsumEquations)
{
    const auto implicit = parseEinsum("ij,jk", 2);
    EXPECT_EQ(implicit.output, "ik");
    EXPECT_EQ(parseEinsum("b i d , b j d -> b i j", 2).operands.at(1), "bjd");
    EXPECT_THROW((void)parseEinsum("...ij->ij", 1), Error);
    EXPECT_THROW((void)parseEinsum("ij,jk->il", 2), Error);
    EXPECT_THROW((void)parseEinsum("ij->ij", 2), Error);
    // An ellipsis in letters the equation leaves free, right-aligned across operands; an implicit
    // output lists its dims first; a dim of size 1 against a larger one gets a letter of its own.
    EXPECT_EQ(explicitEinsumEquation("...d,de->...e", { { 2, 5, 3 }, { 3, 4 } }), "ABd,de->ABe");
    EXPECT_EQ(explicitEinsumEquation("...ij, ...jk", { { 2, 5, 3, 4 }, { 5, 4, 6 } }), "ABij,Bjk->ABik");
    EXPECT_EQ(explicitEinsumEquation("...ij,...jk", { { 2, 5, 3, 4 }, { 1, 4, 6 } }), "ABij,Cjk->ABik");
    EXPECT_EQ(explicitEinsumEquation("bt...->b...", { { 2, 3, 4, 5 } }), "btAB->bAB");
    EXPECT_EQ(explicitEinsumEquation("i...->i", { { 2, 3, 4 } }), "iAB->i"); // summed out
    EXPECT_EQ(explicitEinsumEquation("...->...", { {} }), "->");
    EXPECT_EQ(explicitEinsumEquation("ij,ij", { { 3, 4 }, { 1, 4 } }), "ij,Aj->"); // implicit, then broadcast
    EXPECT_EQ(explicitEinsumEquation("i j,j k", { { 2, 3 }, { 3, 4 } }), "ij,jk");
    EXPECT_THROW((void)explicitEinsumEquation("ijk...->i", { { 2, 3 } }), Error);
    EXPECT_THROW((void)explicitEinsumEquation("...i,i", { { 2 } }), Error);
}

// Bool and integer values never need a gradient, so nothing is saved for them.
TEST(OpRegistry, ComparisonsAndIndicesCarryNoGradient)
{
    Graph g(ModelInfo { "m", "onnx", "{}", 1 });
    const auto w = g.addTensor({ TensorId(), "w", { 4 }, DType::F32, TensorKind::Parameter, NodeId(), nullptr });
    const auto x = g.addTensor({ TensorId(), "x", { 4 }, DType::F32, TensorKind::Input, NodeId(), nullptr });
    const auto s = g.addTensor({ TensorId(), "s", { 4 }, DType::F32, TensorKind::Activation, NodeId(), nullptr });
    const auto b = g.addTensor({ TensorId(), "b", { 4 }, DType::Bool, TensorKind::Activation, NodeId(), nullptr });
    const auto y = g.addTensor({ TensorId(), "y", { 4 }, DType::F32, TensorKind::Activation, NodeId(), nullptr });
    const auto node = [](std::string name, OpType op, std::vector<TensorId> in, TensorId out) {
        Node n;
        n.name = std::move(name);
        n.op = op;
        n.inputs = std::move(in);
        n.outputs = { out };
        return n;
    };
    const auto sig = node("sig", OpType::Sigmoid, { w }, s);
    const auto cmp = node("cmp", OpType::Greater, { s, x }, b);
    const auto sel = node("sel", OpType::Where, { b, s, x }, y);
    g.addNode(sig);
    g.addNode(cmp);
    g.addNode(sel);
    g.setOutputs({ y });
    const auto grad = tensorsRequiringGrad(g);
    EXPECT_TRUE(grad[s.index()]);
    EXPECT_FALSE(grad[b.index()]);
    EXPECT_TRUE(grad[y.index()]);
    const auto costs = computeOpCosts(g);
    EXPECT_EQ(costs[0].savedTensors, (std::vector<TensorId> { s })); // Sigmoid keeps its output
    EXPECT_TRUE(costs[1].savedTensors.empty());
    EXPECT_EQ(costs[2].savedTensors, (std::vector<TensorId> { b })); // Where keeps its condition
}
