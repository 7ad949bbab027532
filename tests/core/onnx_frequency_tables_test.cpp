// Frequency tables (onnx/frequency_tables.h): a rotary or sinusoidal position table the forward
// computes from a frequency buffer through Sin/Cos is a constant, folded at import; a learned
// position table and a frequency that meets the data before its Sin stay parameters. Hand-built
// graphs with the exporters' two forms of the buffer (an initializer, a Constant node); the rotary
// models of the ONNX corpus (tests/data/make_onnx_corpus.py, gpt_rotary_*) check torch's counts.
#include "onnx/frequency_tables.h"
#include "onnx/onnx_import.h"

#include <gtest/gtest.h>

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

// x (1, 4, 8) data. positions = Cast(Range(0, Shape(x)[1], 1)). Table: Cos(Concat(positions[:, None]
// * freq[None, :], twice)), multiplied into x; a learned table `pe` (4, 8) gathered by the positions
// and added; then MatMul by `w` (8, 8). `freqAsConstant`: the frequencies are a Constant node (as
// torch folds a non-persistent buffer), else an initializer. `freqMeetsData`: the frequencies are
// multiplied by x's first row before the Cos (data-dependent: a parameter).
onnx::ModelProto positionModel(bool freqAsConstant, bool freqMeetsData)
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
        fillFloats(a->mutable_t(), "freq", { 4 }, 1.0F, -0.25F);
    } else {
        fillFloats(g->add_initializer(), "freq", { 4 }, 1.0F, -0.25F);
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
    if (freqMeetsData) {
        intConstant(g, "first", 0);
        setInt(addNode(g, "Gather", { "x", "first" }, { "x0" }), "axis", 2); // (1, 4)
        addNode(g, "Mul", { "freq", "x0" }, { "fx" });
        f = "fx";
    }
    intConstant(g, "axis0", 0);
    addNode(g, "Unsqueeze", { f, "axis0" }, { "f2" });
    addNode(g, "Mul", { "pos2", "f2" }, { "freqs" }); // (4, 4) or (4, 1, 4)
    setInt(addNode(g, "Concat", { "freqs", "freqs" }, { "emb" }), "axis", -1);
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
        EXPECT_EQ(onnximport::frequencyTables(positionModel(asConstant, false)), (std::set<std::string> { "freq" }))
            << "as a Constant node: " << asConstant;
        // Multiplied by the data before its Cos: data-dependent, not a table.
        EXPECT_TRUE(onnximport::frequencyTables(positionModel(asConstant, true)).empty());
    }
}

TEST(FrequencyTables, ATableIsFoldedAndNotTrainedWhileTheLearnedTableIs)
{
    for (bool asConstant : { false, true }) {
        const auto p = frequencyScratch(asConstant ? "constant.onnx" : "initializer.onnx");
        std::ofstream(p, std::ios::binary) << positionModel(asConstant, false).SerializeAsString();
        const auto imported = importOnnx(p);
        const auto& graph = imported.graph;
        EXPECT_EQ(graph.parameterCount(), 4 * 8 + 8 * 8) << "pe and w only, as a Constant node: " << asConstant;
        for (const auto& n : graph.nodes())
            EXPECT_NE(n.op, OpType::Cos) << "the table is folded: " << n.name;
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
        // The user's word still wins.
        OnnxImportOptions options;
        options.parameters = { "freq" };
        if (!asConstant) {
            EXPECT_EQ(importOnnx(p, options).graph.parameterCount(), 4 + 4 * 8 + 8 * 8);
        }
    }
    // Data-dependent frequencies train, as any parameter.
    const auto p = frequencyScratch("data.onnx");
    std::ofstream(p, std::ios::binary) << positionModel(false, true).SerializeAsString();
    EXPECT_EQ(importOnnx(p).graph.parameterCount(), 4 + 4 * 8 + 8 * 8);
}
