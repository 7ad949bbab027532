// Frequency tables (onnx/frequency_tables.h): a rotary or sinusoidal position table the forward
// computes from a frequency buffer through Sin/Cos is a constant, folded at import; a learned
// position table and a frequency that meets the data before its Sin stay parameters. Hand-built
// graphs with the exporters' two forms of the buffer (an initializer, a Constant node); the rotary
// models of the ONNX corpus (tests/data/make_onnx_corpus.py, gpt_rotary_*) check torch's counts.
#include "onnx/frequency_tables.h"
#include "onnx/onnx_import.h"
#include "onnx/shape_folding_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

onnx::NodeProto* addNode(
    onnx::GraphProto* g, const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs)
{
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + outputs.front());
    for (const auto& i : inputs)
        n->add_input(i);
    for (const auto& o : outputs)
        n->add_output(o);
    return n;
}

void setInt(onnx::NodeProto* n, const std::string& name, std::int64_t value)
{
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(value);
}

void fillFloats(onnx::TensorProto* t, const std::string& name, std::vector<std::int64_t> dims, float first, float step)
{
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    std::int64_t n = 1;
    for (auto d : dims) {
        t->add_dims(d);
        n *= d;
    }
    for (std::int64_t i = 0; i < n; ++i)
        t->add_float_data(first + step * static_cast<float>(i));
}

void intConstant(onnx::GraphProto* g, const std::string& name, std::int64_t value)
{
    auto* n = addNode(g, "Constant", {}, { name });
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    a->mutable_t()->add_int64_data(value);
}

// How the frequencies reach the Cos in positionModel.
enum class Freq {
    Table, // positions[:, None] * freq[None, :]: a rotary table
    MeetsData, // freq multiplied by x's first row first: data-dependent
    MeetsWeight, // freq multiplied by another float initializer of 4 elements first: a learned scale
    Angle, // Cos of freq itself (positions unused): an angle parameter
};

// x (1, 4, 8) data. positions = Cast(Range(0, Shape(x)[1], 1)). Table: Cos(Concat(positions[:, None]
// * freq[None, :], twice)), multiplied into x; a learned table `pe` (4, 8) gathered by the positions
// and added; then MatMul by `w` (8, 8). `freqAsConstant`: the frequencies are a Constant node (as
// torch folds a non-persistent buffer), else an initializer; `step`: freq holds 1, 1 + step, ...
onnx::ModelProto positionModel(bool freqAsConstant, Freq how, float step = -0.25F)
{
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("positions");
    auto* x = g->add_input();
    x->set_name("x");
    x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto d : { 1, 4, 8 })
        x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    if (freqAsConstant) {
        auto* c = addNode(g, "Constant", {}, { "freq" });
        auto* a = c->add_attribute();
        a->set_name("value");
        a->set_type(onnx::AttributeProto::TENSOR);
        fillFloats(a->mutable_t(), "freq", { 4 }, 1.0F, step);
    } else {
        fillFloats(g->add_initializer(), "freq", { 4 }, 1.0F, step);
    }
    fillFloats(g->add_initializer(), "pe", { 4, 8 }, 0.01F, 0.01F);
    fillFloats(g->add_initializer(), "w", { 8, 8 }, -0.1F, 0.003F);
    addNode(g, "Shape", { "x" }, { "shape" });
    intConstant(g, "one", 1);
    intConstant(g, "zero", 0);
    setInt(addNode(g, "Gather", { "shape", "one" }, { "t" }), "axis", 0);
    addNode(g, "Range", { "zero", "t", "one" }, { "pos" });
    setInt(addNode(g, "Cast", { "pos" }, { "posf" }), "to", onnx::TensorProto::FLOAT);
    intConstant(g, "axis1", 1);
    addNode(g, "Unsqueeze", { "posf", "axis1" }, { "pos2" }); // (4, 1)
    std::string f = "freq";
    if (how == Freq::MeetsData) {
        intConstant(g, "first", 0);
        setInt(addNode(g, "Gather", { "x", "first" }, { "x0" }), "axis", 2); // (1, 4)
        addNode(g, "Mul", { "freq", "x0" }, { "fx" });
        f = "fx";
    } else if (how == Freq::MeetsWeight) {
        fillFloats(g->add_initializer(), "scale", { 4 }, 0.5F, 0.1F);
        addNode(g, "Mul", { "freq", "scale" }, { "fs" });
        f = "fs";
    }
    intConstant(g, "axis0", 0);
    addNode(g, "Unsqueeze", { f, "axis0" }, { "f2" });
    addNode(g, "Mul", { "pos2", "f2" }, { "freqs" }); // (4, 4) or (4, 1, 4)
    if (how == Freq::Angle) {
        setInt(addNode(g, "Concat", { "freq", "freq" }, { "emb" }), "axis", 0); // (8,): cos of the tensor itself
    } else {
        setInt(addNode(g, "Concat", { "freqs", "freqs" }, { "emb" }), "axis", -1);
    }
    addNode(g, "Cos", { "emb" }, { "cos" });
    addNode(g, "Mul", { "x", "cos" }, { "y" });
    setInt(addNode(g, "Gather", { "pe", "pos" }, { "posEmb" }), "axis", 0);
    addNode(g, "Add", { "y", "posEmb" }, { "z" });
    addNode(g, "MatMul", { "z", "w" }, { "out" });
    g->add_output()->set_name("out");
    return m;
}

fs::path frequencyScratch(const std::string& name)
{
    const auto dir = fs::temp_directory_path() / ("ps_freq_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}

} // namespace

TEST(FrequencyTables, AFrequencyReachingCosThroughPositionsOnlyIsATable)
{
    for (bool asConstant : { false, true }) {
        EXPECT_EQ(
            onnximport::frequencyTables(positionModel(asConstant, Freq::Table)), (std::set<std::string> { "freq" }))
            << "as a Constant node: " << asConstant;
        // Not tables: multiplied by the data or by another weight first, an angle, values of both signs.
        for (auto how : { Freq::MeetsData, Freq::MeetsWeight, Freq::Angle })
            EXPECT_TRUE(onnximport::frequencyTables(positionModel(asConstant, how)).empty()) << static_cast<int>(how);
        EXPECT_TRUE(onnximport::frequencyTables(positionModel(asConstant, Freq::Table, -0.6F)).empty());
        // Rising values (divisors) are frequencies too.
        EXPECT_EQ(onnximport::frequencyTables(positionModel(asConstant, Freq::Table, 2.0F)).size(), 1U);
    }
}

namespace {

int opCount(const Graph& graph, OpType op)
{
    return static_cast<int>(
        std::count_if(graph.nodes().begin(), graph.nodes().end(), [op](const Node& n) { return n.op == op; }));
}

} // namespace

TEST(FrequencyTables, ATableIsFoldedAndNotTrainedWhileTheLearnedTableIs)
{
    for (bool asConstant : { false, true }) {
        const auto p = frequencyScratch(asConstant ? "constant.onnx" : "initializer.onnx");
        std::ofstream(p, std::ios::binary) << positionModel(asConstant, Freq::Table).SerializeAsString();
        const auto imported = importOnnx(p);
        const auto& graph = imported.graph;
        EXPECT_EQ(graph.parameterCount(), 4 * 8 + 8 * 8) << "pe and w only, as a Constant node: " << asConstant;
        EXPECT_EQ(opCount(graph, OpType::Cos), 0) << "the table is folded";
        EXPECT_EQ(imported.report.frequencyTables, (std::vector<std::string> { "freq" }));
        if (!asConstant) {
            bool found = false;
            for (const auto& r : imported.report.initializerRules) {
                if (r.name == "freq") {
                    found = true;
                    EXPECT_FALSE(r.parameter);
                    EXPECT_NE(r.rule.find("frequency table"), std::string::npos) << r.rule;
                }
                if (r.name == "pe") {
                    EXPECT_TRUE(r.parameter) << "a learned position table stays a parameter";
                }
            }
            EXPECT_TRUE(found);
        }
        // The folded table holds cos(position * frequency) for every position and frequency twice.
        bool checked = false;
        for (const auto& n : graph.nodes()) {
            if (n.op != OpType::Mul || graph.tensor(n.inputs[1]).kind != TensorKind::Constant)
                continue;
            const auto& table = graph.tensor(n.inputs[1]);
            ASSERT_EQ(table.shape, (Shape { 4, 8 }));
            ASSERT_TRUE(table.data);
            const auto* v = reinterpret_cast<const float*>(table.data->data());
            for (int t = 0; t < 4; ++t) {
                for (int j = 0; j < 8; ++j) {
                    const float freq = 1.0F - 0.25F * static_cast<float>(j % 4);
                    EXPECT_NEAR(v[t * 8 + j], std::cos(static_cast<float>(t) * freq), 1e-6) << t << "," << j;
                }
            }
            checked = true;
        }
        EXPECT_TRUE(checked) << "x is multiplied by a constant table";
        // The user's word wins: the frequencies train, so their Cos stays an op reading them.
        OnnxImportOptions options;
        options.parameters = { "freq" };
        const auto trained = importOnnx(p, options);
        EXPECT_EQ(trained.graph.parameterCount(), 4 + 4 * 8 + 8 * 8);
        EXPECT_EQ(opCount(trained.graph, OpType::Cos), 1);
        EXPECT_TRUE(trained.report.frequencyTables.empty());
    }
    // Data-dependent frequencies and an angle train, as any parameter, and keep their Cos.
    for (auto how : { Freq::MeetsData, Freq::Angle }) {
        const auto p = frequencyScratch("trained.onnx");
        std::ofstream(p, std::ios::binary) << positionModel(false, how).SerializeAsString();
        const auto imported = importOnnx(p);
        EXPECT_EQ(imported.graph.parameterCount(), 4 + 4 * 8 + 8 * 8) << static_cast<int>(how);
        EXPECT_EQ(opCount(imported.graph, OpType::Cos), 1);
    }
}

// The folder's MatMul (shape_folding_support.h) follows NumPy: 1-D operands promoted and dropped,
// batch dimensions broadcast (a 1 also against a 0), inner sizes checked.
TEST(FrequencyTables, FoldedMatMulFollowsNumpy)
{
    using onnximport::FoldedTensor;
    const auto identity = [](double v) { return v; };
    const auto f = [](std::vector<std::int64_t> shape, std::vector<double> v) {
        return FoldedTensor { std::move(shape), onnx::TensorProto::FLOAT, std::move(v) };
    };
    // (2, 1, 1, 2) @ (3, 2, 1) -> (2, 3, 1, 1): batches (2, 1) and (3) broadcast.
    const auto a = f({ 2, 1, 1, 2 }, { 1, 2, 3, 4 });
    const auto b = f({ 3, 2, 1 }, { 1, 0, 0, 1, 1, 1 });
    const auto c = onnximport::folding::matmul(a, b, identity);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->shape, (std::vector<std::int64_t> { 2, 3, 1, 1 }));
    EXPECT_EQ(c->values, (std::vector<double> { 1, 2, 3, 3, 4, 7 }));
    // 1-D on either side: (2,) @ (2, 3) -> (3,); (2, 3) @ (3,) -> (2,); outer product (4, 1) @ (1, 2).
    const auto row = onnximport::folding::matmul(f({ 2 }, { 1, 2 }), f({ 2, 3 }, { 1, 2, 3, 4, 5, 6 }), identity);
    ASSERT_TRUE(row);
    EXPECT_EQ(row->shape, (std::vector<std::int64_t> { 3 }));
    EXPECT_EQ(row->values, (std::vector<double> { 9, 12, 15 }));
    const auto col = onnximport::folding::matmul(f({ 2, 3 }, { 1, 2, 3, 4, 5, 6 }), f({ 3 }, { 1, 0, 1 }), identity);
    ASSERT_TRUE(col);
    EXPECT_EQ(col->shape, (std::vector<std::int64_t> { 2 }));
    EXPECT_EQ(col->values, (std::vector<double> { 4, 10 }));
    const auto outer = onnximport::folding::matmul(f({ 4, 1 }, { 0, 1, 2, 3 }), f({ 1, 2 }, { 1, 0.5 }), identity);
    ASSERT_TRUE(outer);
    EXPECT_EQ(outer->values, (std::vector<double> { 0, 0, 1, 0.5, 2, 1, 3, 1.5 }));
    // A batch of 0 against 1: an empty result, as NumPy gives; inner sizes that differ: no value.
    const auto empty = onnximport::folding::matmul(f({ 0, 2, 3 }, {}), f({ 1, 3, 2 }, { 1, 2, 3, 4, 5, 6 }), identity);
    ASSERT_TRUE(empty);
    EXPECT_EQ(empty->shape, (std::vector<std::int64_t> { 0, 2, 2 }));
    EXPECT_TRUE(empty->values.empty());
    EXPECT_FALSE(
        onnximport::folding::matmul(f({ 2, 3 }, { 1, 2, 3, 4, 5, 6 }), f({ 2, 3 }, { 1, 2, 3, 4, 5, 6 }), identity));
}
