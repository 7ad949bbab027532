// ps::importModel: what `pipestudio import` and the studio's File > Import ONNX run, on a model
// written here (x [batch, seq, 8] through a Linear to [batch, seq, 4]).
#include "onnx/model_import.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

// Writes the model once per process and returns its path.
fs::path linearModel()
{
    const auto path = fs::temp_directory_path() / ("ps_model_import_" + std::to_string(::getpid()) + ".onnx");
    if (fs::exists(path))
        return path;
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("linear");
    const auto value = [](onnx::ValueInfoProto* v, const std::string& name, const std::string& last) {
        v->set_name(name);
        auto* t = v->mutable_type()->mutable_tensor_type();
        t->set_elem_type(onnx::TensorProto::FLOAT);
        t->mutable_shape()->add_dim()->set_dim_param("batch");
        t->mutable_shape()->add_dim()->set_dim_param("seq");
        t->mutable_shape()->add_dim()->set_dim_value(std::stoll(last));
    };
    value(g->add_input(), "x", "8");
    value(g->add_output(), "y", "4");
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    w->add_dims(8);
    w->add_dims(4);
    for (int i = 0; i < 32; ++i)
        w->add_float_data(0.01F * static_cast<float>(i));
    auto* n = g->add_node();
    n->set_op_type("MatMul");
    n->set_name("proj");
    n->add_input("x");
    n->add_input("w");
    n->add_output("y");
    std::ofstream out(path, std::ios::binary);
    m.SerializeToOstream(&out);
    return path;
}

const Tensor* inputNamed(const Graph& g, const std::string& name)
{
    for (const auto& t : g.tensors()) {
        if (t.kind == TensorKind::Input && t.name == name)
            return &t;
    }
    return nullptr;
}

} // namespace

// Named sizes bind the file's dynamic dimensions; a name the file does not have is refused,
// listing the names it has, rather than silently ignored.
TEST(ModelImport, NamedDimensionsMustBeTheFilesDynamicOnes)
{
    ModelImportOptions o;
    o.onnx.batch = 2;
    addDimSizes({ "seq=16" }, o.onnx);
    const auto imported = importModel(linearModel(), o);
    const auto* x = inputNamed(imported.graph, "x");
    ASSERT_NE(x, nullptr);
    EXPECT_EQ(x->shape, (Shape { 2, 16, 8 }));
    o.onnx.dims.clear();
    addDimSizes({ "sequence=16" }, o.onnx);
    try {
        (void)importModel(linearModel(), o);
        ADD_FAILURE() << "a misspelt --dim was accepted";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("'sequence'"), std::string::npos) << what;
        EXPECT_NE(what.find("batch, seq"), std::string::npos) << what;
    }
    EXPECT_THROW(addDimSizes({ "seq=0" }, o.onnx), Error);
    EXPECT_THROW(addDimSizes({ "=4" }, o.onnx), Error);
    fs::remove(linearModel());
}

// A loss makes the model trainable: a labels input of the shape asked for (or derived); an unknown
// loss or a bad shape is refused.
TEST(ModelImport, ALossAttachesLabelsOfTheShapeAsked)
{
    ModelImportOptions o;
    o.onnx.batch = 2;
    o.onnx.sequence = 3;
    o.loss = "mse";
    const auto mse = importModel(linearModel(), o);
    const auto* labels = inputNamed(mse.graph, "labels");
    ASSERT_NE(labels, nullptr);
    EXPECT_EQ(labels->shape, (Shape { 2, 3, 4 }));
    o.loss = "cross-entropy";
    o.labelsShape = parseLabelsShape("2,3");
    const auto ce = importModel(linearModel(), o);
    ASSERT_NE(inputNamed(ce.graph, "labels"), nullptr);
    EXPECT_EQ(inputNamed(ce.graph, "labels")->shape, (Shape { 2, 3 }));
    o.loss = "hinge";
    EXPECT_THROW((void)importModel(linearModel(), o), Error);
    EXPECT_THROW((void)parseLabelsShape("2,x"), Error);
    EXPECT_THROW((void)parseLabelsShape("2,0"), Error);
    fs::remove(linearModel());
}
