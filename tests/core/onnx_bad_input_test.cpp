// ONNX import of hand-built models and bad input. Also built with AddressSanitizer and UBSan as
// onnx_asan_tests, so a malformed file that crashes or reads out of bounds fails the test suite.
#include "onnx/onnx_import.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <random>

using namespace ps;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name)
{
    const auto dir = fs::temp_directory_path() / ("ps_onnx_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}

void writeBytes(const fs::path& p, const std::string& bytes)
{
    std::ofstream(p, std::ios::binary) << bytes;
}

// x (2, 4) -> Relu -> Relu, opset `opset`; `cycle` wires the first Relu to the second's output.
onnx::ModelProto tinyModel(int opset, bool cycle = false)
{
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    auto* g = m.mutable_graph();
    g->set_name("tiny");
    auto* in = g->add_input();
    in->set_name("x");
    in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (int d : { 2, 4 })
        in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    auto* a = g->add_node();
    a->set_name("first");
    a->set_op_type("Relu");
    a->add_input(cycle ? "b" : "x");
    a->add_output("a");
    auto* b = g->add_node();
    b->set_name("second");
    b->set_op_type("Relu");
    b->add_input("a");
    b->add_output("b");
    g->add_output()->set_name("b");
    return m;
}

void expectOneLineError(const fs::path& p, const std::string& fragment)
{
    try {
        (void)importOnnx(p);
        FAIL() << "expected an error for " << p;
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find(fragment), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
        EXPECT_NE(what.find(p.filename().string()), std::string::npos) << what;
    }
}

} // namespace

TEST(OnnxImport, ImportsAMinimalModel)
{
    const auto p = scratch("tiny.onnx");
    writeBytes(p, tinyModel(17).SerializeAsString());
    const auto imported = importOnnx(p);
    EXPECT_EQ(imported.graph.nodeCount(), 2U);
    EXPECT_EQ(imported.graph.nodes()[0].op, OpType::Relu);
    EXPECT_EQ(imported.report.opset, 17);
}

// Found by tests/fuzz (regressions/fuzz_onnx_import): libonnx 1.12's data propagation crashed
// (SIGSEGV) on Shape of the output of an op without a schema, which has no type.
TEST(OnnxImport, ShapeOfAnUnknownOpsOutputDoesNotCrash)
{
    auto m = tinyModel(17);
    auto* g = m.mutable_graph();
    g->mutable_node(1)->set_op_type("NoSuchOp");
    auto* shape = g->add_node();
    shape->set_op_type("Shape");
    shape->add_input("b");
    shape->add_output("s");
    g->add_output()->set_name("s");
    const auto p = scratch("unknown_op.onnx");
    writeBytes(p, m.SerializeAsString());
    try {
        (void)importOnnx(p);
    } catch (const Error&) { // a clean rejection is fine; a crash is not
    }
}

TEST(OnnxImport, BadInputGivesOneLineErrors)
{
    const auto good = tinyModel(17).SerializeAsString();
    writeBytes(scratch("truncated.onnx"), good.substr(0, good.size() / 2));
    expectOneLineError(scratch("truncated.onnx"), "not an ONNX model");
    std::mt19937 rng(3);
    std::string noise(2048, '\0');
    for (auto& c : noise)
        c = static_cast<char>(rng());
    writeBytes(scratch("noise.onnx"), noise);
    expectOneLineError(scratch("noise.onnx"), "not an ONNX model");
    onnx::TensorProto tensor;
    tensor.set_name("w");
    tensor.add_dims(3);
    tensor.set_data_type(onnx::TensorProto::FLOAT);
    writeBytes(scratch("tensor.onnx"), tensor.SerializeAsString());
    expectOneLineError(scratch("tensor.onnx"), "not an ONNX model");
    writeBytes(scratch("opset9.onnx"), tinyModel(9).SerializeAsString());
    expectOneLineError(scratch("opset9.onnx"), "opset 9");
    writeBytes(scratch("cycle.onnx"), tinyModel(17, true).SerializeAsString());
    expectOneLineError(scratch("cycle.onnx"), "cycle through node");
    expectOneLineError(scratch("missing.onnx"), "cannot be read");
}

// An integer initializer (a Reshape's shape) named as a parameter is refused, naming its type.
TEST(OnnxImport, AnIntegerInitializerCannotBeMadeAParameter)
{
    auto m = tinyModel(17);
    auto* g = m.mutable_graph();
    auto* shape = g->add_initializer();
    shape->set_name("shape");
    shape->set_data_type(onnx::TensorProto::INT64);
    shape->add_dims(2);
    shape->add_int64_data(4);
    shape->add_int64_data(2);
    auto* reshape = g->add_node();
    reshape->set_name("reshape");
    reshape->set_op_type("Reshape");
    reshape->add_input("b");
    reshape->add_input("shape");
    reshape->add_output("r");
    g->mutable_output(0)->set_name("r");
    const auto p = scratch("int_parameter.onnx");
    writeBytes(p, m.SerializeAsString());
    EXPECT_EQ(importOnnx(p).graph.parameterCount(), 0);
    OnnxImportOptions o;
    o.parameters = { "shape" };
    try {
        (void)importOnnx(p, o);
        ADD_FAILURE() << "an int64 initializer became a parameter";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("'shape' cannot be a parameter: its elements are i64"), std::string::npos)
            << e.what();
    }
}
