// ConvTranspose's pads from an output_shape or an auto_pad (onnx/op_mapping_conv.cpp), by ONNX's
// rule (ConvTranspose-11: total = stride (in - 1) + output_padding + (k - 1) dilation + 1 - out;
// the odd pad at the end for SAME_UPPER, at the start otherwise), against values worked by hand.
#include "onnx/onnx_import.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <onnx/onnx_pb.h>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

struct TransposedCase
{
    std::string autoPad; // empty: NOTSET
    std::vector<std::int64_t> outputShape; // empty: none
    std::vector<std::int64_t> pads; // expected (begin..., end...); empty: stays opaque
    Shape output;
};

// x (1, 2, 5, 5) -> ConvTranspose(w (2, 3, 3, 3), strides 2) -> y.
Graph importTransposed(const TransposedCase& c)
{
    onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(17);
    auto* g = m.mutable_graph();
    g->set_name("deconv");
    auto* x = g->add_input();
    x->set_name("x");
    x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto d : { 1, 2, 5, 5 })
        x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : { 2, 3, 3, 3 })
        w->add_dims(d);
    for (int i = 0; i < 2 * 3 * 3 * 3; ++i)
        w->add_float_data(0.01F * static_cast<float>(i % 5));
    auto* n = g->add_node();
    n->set_op_type("ConvTranspose");
    n->set_name("deconv");
    n->add_input("x");
    n->add_input("w");
    n->add_output("y");
    const auto ints = [n](const char* name, std::vector<std::int64_t> v) {
        auto* a = n->add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (auto i : v)
            a->add_ints(i);
    };
    ints("strides", { 2, 2 });
    ints("kernel_shape", { 3, 3 });
    if (!c.outputShape.empty())
        ints("output_shape", c.outputShape);
    if (!c.autoPad.empty()) {
        auto* a = n->add_attribute();
        a->set_name("auto_pad");
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(c.autoPad);
    }
    auto* y = g->add_output();
    y->set_name("y");
    y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    const auto p = fs::temp_directory_path() / ("ps_deconv_" + std::to_string(::getpid()) + ".onnx");
    std::ofstream(p, std::ios::binary) << m.SerializeAsString();
    auto imported = importOnnx(p);
    fs::remove(p);
    return std::move(imported.graph);
}

} // namespace

TEST(OnnxConvTranspose, PadsComeFromTheOutputShapeOrAutoPadByOnnxsRule)
{
    // 5 -> stride 2, kernel 3: 11 before padding. To 10: one pad, at the start (NOTSET and
    // SAME_LOWER) or the end (SAME_UPPER, and auto_pad SAME_* alone asks for 5 x 2 = 10).
    const std::vector<TransposedCase> cases {
        { "", { 10, 10 }, { 1, 1, 0, 0 }, { 1, 3, 10, 10 } }, { "", { 9, 11 }, { 1, 0, 1, 0 }, { 1, 3, 9, 11 } },
        { "SAME_UPPER", {}, { 0, 0, 1, 1 }, { 1, 3, 10, 10 } }, { "SAME_LOWER", {}, { 1, 1, 0, 0 }, { 1, 3, 10, 10 } },
        { "VALID", {}, { 0, 0, 0, 0 }, { 1, 3, 11, 11 } },
        { "", { 12, 12 }, {}, {} }, // would need a negative pad: left opaque
    };
    for (const auto& c : cases) {
        const auto g = importTransposed(c);
        const auto what = c.autoPad + " output_shape " + formatShape(c.outputShape);
        ASSERT_EQ(g.nodeCount(), 1U) << what;
        const auto& n = g.nodes().front();
        if (c.pads.empty()) {
            EXPECT_EQ(n.op, OpType::Opaque) << what;
            continue;
        }
        ASSERT_EQ(n.op, OpType::ConvTranspose) << what;
        EXPECT_EQ(n.intsAttr("pads"), c.pads) << what;
        EXPECT_EQ(g.tensor(n.outputs[0]).shape, c.output) << what;
    }
}
