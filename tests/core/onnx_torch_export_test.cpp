// torch.export's metadata read to tell parameters from what its ONNX optimizer folded
// (onnx/merged_parameters.h): a parameter stored twice, once transposed (a tied embedding and
// head), is one parameter read through a Transpose; a table computed from buffers only (rotary
// cos/sin) is a constant. Hand-built models carry the signature and fx_node metadata as unknown
// fields (IR 10's metadata_props, which Debian's onnx.proto predates), as real exports do.
#include "onnx/merged_parameters.h"
#include "onnx/module_scopes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <onnx/onnx_pb.h>
#include <optional>
#include <string>
#include <vector>

using namespace ps;

namespace {

void addMetadata(google::protobuf::Message& message, int field, const std::string& key, const std::string& value)
{
    onnx::StringStringEntryProto kv;
    kv.set_key(key);
    kv.set_value(value);
    message.GetReflection()->MutableUnknownFields(&message)->AddLengthDelimited(field, kv.SerializeAsString());
}

void fxNode(onnx::NodeProto& node, const std::string& call, const std::string& args)
{
    addMetadata(node, 9, "pkg.torch.onnx.fx_node",
        "%" + node.name() + " : [num_users=1] = call_function[target=" + call + "](args = (" + args
            + "), kwargs = {})");
}

onnx::TensorProto* floats(
    onnx::GraphProto& g, const std::string& name, std::vector<std::int64_t> dims, const std::vector<float>& values)
{
    auto* t = g.add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : dims)
        t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    return t;
}

// wte (3 x 2) read by a Gather as itself and, folded, as `val_9` (its 2 x 3 transpose) by the head's
// MatMul, whose call read p_wte; `unsqueeze_1` (a rotary-like table) read by a Mul whose call names
// no parameter. `extra` adds a parameter no call reads (one the exporter folded somewhere).
onnx::ModelProto tiedModel(
    const std::vector<float>& headValues, bool extra = false, const std::string& headArgs = "%h, %p_wte")
{
    onnx::ModelProto m;
    auto& g = *m.mutable_graph();
    std::string signature = "# inputs\np_wte: PARAMETER target='wte'\n";
    if (extra)
        signature += "p_pos: PARAMETER target='pos'\n";
    addMetadata(g, 16, "pkg.torch.export.ExportedProgram.graph_signature", signature);
    floats(g, "wte", { 3, 2 }, { 1, 2, 3, 4, 5, 6 });
    floats(g, "val_9", { 2, 3 }, headValues);
    floats(g, "unsqueeze_1", { 1, 2 }, { 0.5F, 0.25F });
    auto* gather = g.add_node();
    gather->set_name("embedding");
    gather->set_op_type("Gather");
    gather->add_input("wte");
    gather->add_input("ids");
    gather->add_output("x");
    addMetadata(*gather, 9, "pkg.torch.onnx.fx_node",
        "%embedding : [num_users=1] = call_function[target=torch.ops.aten.embedding.default](args = (%p_wte, %ids), "
        "kwargs = {})");
    auto* mul = g.add_node();
    mul->set_name("mul_5");
    mul->set_op_type("Mul");
    mul->add_input("x");
    mul->add_input("unsqueeze_1");
    mul->add_output("h");
    fxNode(*mul, "torch.ops.aten.mul.Tensor", "%x, %unsqueeze_1");
    auto* head = g.add_node();
    head->set_name("head");
    head->set_op_type("MatMul");
    head->add_input("h");
    head->add_input("val_9");
    head->add_output("logits");
    fxNode(*head, "torch.ops.aten.mm.default", headArgs);
    return m;
}

bool hasInitializer(const onnx::ModelProto& m, const std::string& name)
{
    const auto& inits = m.graph().initializer();
    return std::any_of(inits.begin(), inits.end(), [&](const auto& t) { return t.name() == name; });
}

} // namespace

TEST(TorchExportMetadata, ATransposedCopyOfAParameterIsReadThroughATranspose)
{
    auto m = tiedModel({ 1, 3, 5, 2, 4, 6 }); // wte^T
    EXPECT_EQ(onnximport::tieFoldedCopies(m), 1);
    EXPECT_FALSE(hasInitializer(m, "val_9"));
    ASSERT_TRUE(hasInitializer(m, "wte"));
    const auto& first = m.graph().node(0); // ahead of every reader
    EXPECT_EQ(first.op_type(), "Transpose");
    ASSERT_EQ(first.input_size(), 1);
    EXPECT_EQ(first.input(0), "wte");
    EXPECT_EQ(first.output(0), "val_9");
    ASSERT_EQ(first.attribute_size(), 1);
    EXPECT_EQ(first.attribute(0).ints_size(), 2);
    EXPECT_EQ(m.graph().node(3).input(1), "val_9"); // the head reads the Transpose's output
}

TEST(TorchExportMetadata, ACopyIsTiedOnlyWhenItsValuesAreTheParameters)
{
    auto other = tiedModel({ 1, 3, 5, 2, 4, 7 }); // one value differs: a parameter of its own
    EXPECT_EQ(onnximport::tieFoldedCopies(other), 0);
    EXPECT_TRUE(hasInitializer(other, "val_9"));
    // Without values (weights left out) the metadata and the transposed shape decide.
    auto planOnly = tiedModel({ 1, 3, 5, 2, 4, 6 });
    for (auto& t : *planOnly.mutable_graph()->mutable_initializer())
        t.clear_raw_data();
    EXPECT_EQ(onnximport::tieFoldedCopies(planOnly), 1);
    // A model without torch.export's signature is left alone.
    auto plain = tiedModel({ 1, 3, 5, 2, 4, 6 });
    plain.mutable_graph()->GetReflection()->MutableUnknownFields(plain.mutable_graph())->Clear();
    EXPECT_EQ(onnximport::tieFoldedCopies(plain), 0);
}

TEST(TorchExportMetadata, ACopyReadThroughAFoldedTransposeIsTiedByItsValues)
{
    // `h @ wte.T`: the call names the folded %permute_1, not the parameter; the values decide.
    auto m = tiedModel({ 1, 3, 5, 2, 4, 6 }, false, "%h, %permute_1");
    EXPECT_EQ(onnximport::tieFoldedCopies(m), 1);
    EXPECT_FALSE(hasInitializer(m, "val_9"));
    EXPECT_EQ(onnximport::foldedBufferConstants(m).count("val_9"), 0U);
    // Other values: a tensor of its own; without values it is not taken for a constant either.
    auto other = tiedModel({ 1, 3, 5, 2, 4, 9 }, false, "%h, %permute_1");
    EXPECT_EQ(onnximport::tieFoldedCopies(other), 0);
    auto planOnly = tiedModel({ 1, 3, 5, 2, 4, 6 }, false, "%h, %permute_1");
    for (auto& t : *planOnly.mutable_graph()->mutable_initializer())
        t.clear_raw_data();
    EXPECT_EQ(onnximport::tieFoldedCopies(planOnly), 0);
    EXPECT_EQ(onnximport::foldedBufferConstants(planOnly), (std::set<std::string> { "unsqueeze_1" }));
    // Values all equal say nothing: a zeros copy is not tied to a zeros parameter.
    auto zeros = tiedModel({ 0, 0, 0, 0, 0, 0 }, false, "%h, %permute_1");
    for (auto& t : *zeros.mutable_graph()->mutable_initializer()) {
        if (t.name() == "wte") {
            const std::vector<float> z(6, 0.0F);
            t.set_raw_data(std::string(reinterpret_cast<const char*>(z.data()), z.size() * sizeof(float)));
        }
    }
    EXPECT_EQ(onnximport::tieFoldedCopies(zeros), 0);
}

TEST(TorchExportMetadata, TablesComputedFromBuffersAreConstants)
{
    const auto constants = onnximport::foldedBufferConstants(tiedModel({ 1, 3, 5, 2, 4, 6 }));
    EXPECT_EQ(constants, (std::set<std::string> { "unsqueeze_1" }));
    // With a parameter that no call reads, it may have been folded into that table: not a constant,
    // unless fx named it after a factory op.
    auto folded = tiedModel({ 1, 3, 5, 2, 4, 6 }, true);
    EXPECT_TRUE(onnximport::foldedBufferConstants(folded).empty());
    for (auto& t : *folded.mutable_graph()->mutable_initializer()) {
        if (t.name() == "unsqueeze_1")
            t.set_name("zeros_3");
    }
    for (auto& n : *folded.mutable_graph()->mutable_node()) {
        for (auto& in : *n.mutable_input())
            in = in == "unsqueeze_1" ? "zeros_3" : in;
    }
    EXPECT_EQ(onnximport::foldedBufferConstants(folded), (std::set<std::string> { "zeros_3" }));
}

// Module paths and classes from a node's metadata (onnx/module_scopes.h): torch's name_scopes with
// class_hierarchy, or onnxscript's namespace; the op's own entry left out; nothing usable is as if
// the node had no metadata.
TEST(TorchExportMetadata, ModuleLevelsFromNameScopesOrNamespace)
{
    using onnximport::torchModuleLevels;
    const auto paths = [](const std::optional<std::vector<onnximport::ModuleLevel>>& levels) {
        std::string out;
        for (const auto& l : *levels)
            out += "[" + l.path + ":" + l.className + "]";
        return out;
    };
    onnx::NodeProto torchNode;
    addMetadata(torchNode, 9, "pkg.torch.onnx.name_scopes", "['', 'h', 'h.0', 'h.0.fc', 'addmm']");
    addMetadata(torchNode, 9, "pkg.torch.onnx.class_hierarchy",
        "['__main__.Net', 'torch.nn.modules.container.ModuleList', '__main__.Block', "
        "'torch.nn.modules.linear.Linear', 'aten.addmm.default']");
    ASSERT_TRUE(torchModuleLevels(torchNode));
    EXPECT_EQ(paths(torchModuleLevels(torchNode)), "[:Net][h:ModuleList][h.0:Block][h.0.fc:Linear]");

    onnx::NodeProto quoted; // repr() quotes a string holding a quote with double quotes
    addMetadata(quoted, 9, "pkg.torch.onnx.name_scopes", R"(['', "enc", 'mm'])");
    addMetadata(quoted, 9, "pkg.torch.onnx.class_hierarchy", R"(['m.Net', "m.Enc", 'aten.mm.default'])");
    EXPECT_EQ(paths(torchModuleLevels(quoted)), "[:Net][enc:Enc]");

    onnx::NodeProto mismatched; // lists of different lengths: not torch's form
    addMetadata(mismatched, 9, "pkg.torch.onnx.name_scopes", "['', 'h', 'addmm']");
    addMetadata(mismatched, 9, "pkg.torch.onnx.class_hierarchy", "['__main__.Net', 'aten.addmm.default']");
    EXPECT_FALSE(torchModuleLevels(mismatched));

    onnx::NodeProto onnxscript;
    addMetadata(onnxscript, 9, "namespace", ": __main__.Net/h.0: __main__.Block/relu: aten.relu.default");
    EXPECT_EQ(paths(torchModuleLevels(onnxscript)), "[:Net][h.0:Block]");
    onnx::NodeProto lone; // only the op: in no module
    addMetadata(lone, 9, "namespace", "relu: aten.relu.default");
    ASSERT_TRUE(torchModuleLevels(lone));
    EXPECT_TRUE(torchModuleLevels(lone)->empty());
    onnx::NodeProto broken;
    addMetadata(broken, 9, "namespace", "no separator here");
    EXPECT_FALSE(torchModuleLevels(broken));
    EXPECT_FALSE(torchModuleLevels(onnx::NodeProto {}));

    using onnximport::blockOfModulePath;
    EXPECT_EQ(blockOfModulePath("h.0.attn.c_attn"), "h.0");
    EXPECT_EQ(blockOfModulePath("model.encoder.layers.3.fc1"), "model.encoder.layers.3");
    EXPECT_EQ(blockOfModulePath("0.layers.3.fc"), "0.layers.3"); // an nn.Sequential root's index is no block
    EXPECT_EQ(blockOfModulePath("blocks.layer_2.fc"), "blocks.layer_2");
    EXPECT_EQ(blockOfModulePath("layer_1"), "layer_1");
    EXPECT_EQ(blockOfModulePath("head"), "");
    EXPECT_EQ(blockOfModulePath("0"), "");
    EXPECT_EQ(blockOfModulePath(""), "");
}
