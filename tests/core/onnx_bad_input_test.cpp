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

namespace {

// x (1, 3, 8, ...) of rank `xRank` -> `op`(x, w) with w an initializer of rank `wRank` (dims 3).
onnx::ModelProto convolutionModel(const std::string& op, int xRank, int wRank, bool samePad, bool kernelAttr)
{
    auto m = tinyModel(17);
    auto* g = m.mutable_graph();
    g->clear_node();
    g->clear_output();
    auto* shape = g->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int d = 0; d < xRank; ++d)
        shape->add_dim()->set_dim_value(d == 0 ? 1 : (d == 1 ? 3 : 8));
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    std::int64_t count = 1;
    for (int d = 0; d < wRank; ++d) {
        w->add_dims(3);
        count *= 3;
    }
    for (std::int64_t i = 0; i < count; ++i)
        w->add_float_data(0.5F);
    auto* conv = g->add_node();
    conv->set_name("conv");
    conv->set_op_type(op);
    conv->add_input("x");
    conv->add_input("w");
    conv->add_output("y");
    if (samePad) {
        auto* a = conv->add_attribute();
        a->set_name("auto_pad");
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s("SAME_UPPER");
    }
    if (kernelAttr) {
        auto* a = conv->add_attribute();
        a->set_name("kernel_shape");
        a->set_type(onnx::AttributeProto::INTS);
        for (int d = 2; d < xRank; ++d)
            a->add_ints(3);
    }
    g->add_output()->set_name("y");
    return m;
}

} // namespace

// Found by tests/fuzz: libonnx 1.12's convolution inference indexed the input's dims by the
// weight's rank, and crashed (SIGSEGV) on a weight of another rank than the input (or of rank
// below 3). Every pairing of ranks is imported or refused with an Error, and a well-formed
// convolution still gets its output shape from libonnx.
TEST(OnnxImport, ConvolutionsWithWeightsOfAnyRankDoNotCrash)
{
    const auto p = scratch("conv_ranks.onnx");
    int imported = 0;
    for (const std::string op : { "Conv", "ConvTranspose", "ConvInteger" }) {
        for (int xRank = 3; xRank <= 5; ++xRank) {
            for (int wRank = 0; wRank <= 6; ++wRank) {
                for (int variant = 0; variant < 4; ++variant) {
                    SCOPED_TRACE(op + " x rank " + std::to_string(xRank) + " w rank " + std::to_string(wRank)
                        + " variant " + std::to_string(variant));
                    writeBytes(p,
                        convolutionModel(op, xRank, wRank, (variant & 1) != 0, (variant & 2) != 0).SerializeAsString());
                    try {
                        const auto result = importOnnx(p);
                        ++imported;
                        if (op == "Conv" && wRank == xRank && variant == 0) {
                            const auto& y = result.graph.tensor(result.graph.outputs().front());
                            EXPECT_EQ(y.shape.size(), static_cast<std::size_t>(xRank));
                            EXPECT_EQ(y.shape.back(), 6); // 8 - 3 + 1
                        }
                    } catch (const Error& e) { // a clean rejection names the file
                        EXPECT_NE(std::string(e.what()).find("conv_ranks.onnx"), std::string::npos) << e.what();
                    }
                }
            }
        }
    }
    EXPECT_GT(imported, 0);
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
