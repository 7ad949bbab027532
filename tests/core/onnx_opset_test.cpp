// Models from today's PyTorch: opsets 18-25 lowered to opset-17 forms (onnx/opset_lowering.h).
// Real exports by torch 2.15's default exporter (tests/data/onnx_torch2, opset 20, weights in
// external data files) import with torch's parameter counts and output shapes; hand-built graphs
// check each rule and each refusal, which names the node, operator and version.
#include "graph/graph_summary.h"
#include "onnx/onnx_import.h"
#include "onnx/opset_lowering.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <onnx/onnx_pb.h>
#include <set>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

fs::path opsetScratch(const std::string& name)
{
    const auto dir = fs::temp_directory_path() / ("ps_opset_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    return dir / name;
}

onnx::ValueInfoProto* floatValue(onnx::ValueInfoProto* v, const std::string& name, std::vector<std::int64_t> dims)
{
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    for (auto d : dims)
        v->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
    return v;
}

onnx::NodeProto* node(onnx::GraphProto* g, const std::string& op, const std::string& name,
    std::vector<std::string> inputs, std::vector<std::string> outputs)
{
    auto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs)
        n->add_input(i);
    for (const auto& o : outputs)
        n->add_output(o);
    return n;
}

// An empty model at `opset` (IR 8) with one float input `x` of `dims`.
onnx::ModelProto opsetModel(const std::string& name, int opset, std::vector<std::int64_t> dims)
{
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    m.mutable_graph()->set_name(name);
    floatValue(m.mutable_graph()->add_input(), "x", std::move(dims));
    return m;
}

void intAttr(onnx::NodeProto* n, const std::string& name, std::int64_t v)
{
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
}

// x (2, 8) -> Split(num_outputs 2) -> a, b (2, 4); ReduceMean(b, axes=[1] as an input, keepdims)
// -> m (2, 1); Mul(a, m) -> y (2, 4); Gelu(y) -> z: the forms opsets 18 and 20 introduced.
onnx::ModelProto opset18Model(int opset, std::int64_t numOutputs = 2)
{
    onnx::ModelProto m;
    m.set_ir_version(10);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    auto* g = m.mutable_graph();
    g->set_name("opset18");
    floatValue(g->add_input(), "x", { 2, 8 });
    auto* axes = g->add_initializer();
    axes->set_name("axes");
    axes->set_data_type(onnx::TensorProto::INT64);
    axes->add_dims(1);
    axes->add_int64_data(1);
    auto* split = node(g, "Split", "split", { "x" }, { "a", "b" });
    intAttr(split, "axis", 1);
    intAttr(split, "num_outputs", numOutputs);
    auto* mean = node(g, "ReduceMean", "mean", { "b", "axes" }, { "m" });
    intAttr(mean, "keepdims", 1);
    intAttr(mean, "noop_with_empty_axes", 0);
    node(g, "Mul", "mul", { "a", "m" }, { "y" });
    auto* gelu = node(g, "Gelu", "gelu", { "y" }, { "z" });
    auto* approx = gelu->add_attribute();
    approx->set_name("approximate");
    approx->set_type(onnx::AttributeProto::STRING);
    approx->set_s("tanh");
    g->add_output()->set_name("z");
    return m;
}

std::string importError(const onnx::ModelProto& m, const std::string& file)
{
    const auto p = opsetScratch(file);
    std::ofstream(p, std::ios::binary) << m.SerializeAsString();
    try {
        (void)importOnnx(p);
    } catch (const Error& e) {
        return e.what();
    }
    return {};
}

// Pairs of 2-D parameters of which one holds the other's transpose, "a~b " each.
std::string transposedCopies(const Graph& graph)
{
    std::vector<const Tensor*> params;
    for (const auto& t : graph.tensors()) {
        if (t.kind == TensorKind::Parameter && t.shape.size() == 2 && t.data && t.dtype == DType::F32)
            params.push_back(&t);
    }
    std::string out;
    for (const auto* a : params) {
        for (const auto* b : params) {
            if (a >= b || a->shape[0] != b->shape[1] || a->shape[1] != b->shape[0])
                continue;
            const auto rows = static_cast<std::size_t>(a->shape[0]);
            const auto cols = static_cast<std::size_t>(a->shape[1]);
            bool same = true;
            for (std::size_t i = 0; same && i < rows * cols; ++i) {
                const auto j = (i % cols) * rows + i / cols;
                same = std::memcmp(a->data->data() + 4 * i, b->data->data() + 4 * j, 4) == 0;
            }
            if (same)
                out += a->name + "~" + b->name + " ";
        }
    }
    return out;
}

} // namespace

TEST(OnnxOpset, Torch2DefaultExportsImportWithTorchsParametersAndShapes)
{
    const fs::path dir = fs::path(PS_TEST_DATA_DIR) / "onnx_torch2";
    const auto manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
    std::set<std::string> architectures;
    std::set<std::string> fromTransformers;
    int torchScript = 0;
    int withFunctions = 0;
    for (const auto& e : manifest) {
        const auto file = e["file"].get<std::string>();
        SCOPED_TRACE(file);
        const auto exporter = e["exporter"].get<std::string>();
        const bool dynamo = exporter.starts_with("dynamo"); // "dynamo-opset23": an opset asked for
        if (exporter == "dynamo") {
            architectures.insert(e["name"].get<std::string>());
            if (file.starts_with("hf_"))
                fromTransformers.insert(e["name"].get<std::string>());
        }
        if (dynamo) { // torch 2.x's default exporter writes the weights beside the model
            ASSERT_TRUE(fs::exists(dir / (file + ".data")));
        } else {
            ++torchScript;
            withFunctions += e["functions"].get<int>() > 0 ? 1 : 0; // inlined: no opaque calls below
            EXPECT_EQ(e["opset"].get<int>(), 17); // the TorchScript exporter, opset_version=17
        }
        const auto imported = importOnnx(dir / file);
        if (exporter == "dynamo") {
            EXPECT_GE(imported.report.opset, 18); // the exporter's default, not a chosen one
        }
        EXPECT_EQ(imported.report.opset, e["opset"].get<int>());
        // Both exporters fold an eval-mode BatchNorm into the convolution before it (its scale and
        // shift become that convolution's weight and bias).
        const auto torchCount =
            e["parameters"].get<std::int64_t>() - e["batchnorm_parameters_folded"].get<std::int64_t>();
        // The transformers models' default exports fold computations on weights into initializers.
        // Told apart now (onnx/merged_parameters.h): a tied head stored as a transposed copy is the
        // embedding read through a Transpose, and rotary tables computed from buffers are constants,
        // so the rotary models (every parameter still in the file) import with torch's count. What
        // no importer can recover stays different: parameters no output reads (BERT's pooler),
        // rows the trace did not gather (GPT-2's position table keeps 16 of 32), zero biases the
        // optimizer dropped with their adds, T5's relative bias folded per layer.
        const bool rotary = file.starts_with("hf_llama") || file.starts_with("hf_mixtral");
        if (!file.starts_with("hf_") || (rotary && dynamo)) {
            EXPECT_EQ(imported.graph.parameterCount(), torchCount);
        } else {
            std::cout << "[ NOTE ] " << file << ": " << imported.graph.parameterCount() << " parameters, torch "
                      << torchCount << "\n";
        }
        if (dynamo) {
            EXPECT_EQ(transposedCopies(imported.graph), "") << "a parameter stored twice is one parameter";
        }
        std::string opaque;
        for (const auto& [op, count] : imported.report.opaqueOps)
            opaque += op + " x" + std::to_string(count) + " ";
        EXPECT_EQ(opaque, "");
        EXPECT_EQ(imported.graph.tensor(imported.graph.outputs().front()).shape, e["output_shape"].get<Shape>());
    }
    // 6 torch modules and 10 transformers architectures (decoders, encoders, encoder-decoders,
    // vision, speech, mixture of experts), 6 of them also through the TorchScript exporter, one of
    // those also with its blocks as ONNX local functions.
    EXPECT_GE(architectures.size(), 16U);
    EXPECT_GE(fromTransformers.size(), 10U);
    EXPECT_GE(torchScript, 7);
    EXPECT_GE(withFunctions, 1);
}

TEST(OnnxOpset, AMissingExternalDataFileIsAnErrorNamingIt)
{
    const fs::path dir = fs::path(PS_TEST_DATA_DIR) / "onnx_torch2";
    const auto alone = opsetScratch("gelu_amax.onnx"); // the model without its .onnx.data beside it
    fs::copy_file(dir / "gelu_amax.onnx", alone, fs::copy_options::overwrite_existing);
    fs::remove(opsetScratch("gelu_amax.onnx.data"));
    try {
        (void)importOnnx(alone);
        FAIL() << "imported without its weights file";
    } catch (const Error& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("gelu_amax.onnx.data', which is missing"), std::string::npos) << what;
        EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    // A location leading out of the model's folder is refused before anything is read.
    onnx::ModelProto m;
    {
        std::ifstream in(dir / "gelu_amax.onnx", std::ios::binary);
        ASSERT_TRUE(m.ParseFromIstream(&in));
    }
    for (auto& t : *m.mutable_graph()->mutable_initializer()) {
        for (auto& kv : *t.mutable_external_data()) {
            if (kv.key() == "location")
                kv.set_value("../../etc/passwd");
        }
    }
    const auto escaping = importError(m, "escaping.onnx");
    EXPECT_NE(escaping.find("not a file beside the model"), std::string::npos) << escaping;
    fs::copy_file(dir / "gelu_amax.onnx.data", opsetScratch("gelu_amax.onnx.data"));
    fs::resize_file(opsetScratch("gelu_amax.onnx.data"), 100); // truncated
    try {
        (void)importOnnx(alone);
        FAIL() << "imported a truncated weights file";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("which is shorter"), std::string::npos) << e.what();
    }
}

TEST(OnnxOpset, Opset18FormsLowerToTheirOpset17Meaning)
{
    for (const int opset : { 18, 20, 25 }) {
        const auto p = opsetScratch("opset" + std::to_string(opset) + ".onnx");
        std::ofstream(p, std::ios::binary) << opset18Model(opset).SerializeAsString();
        const auto imported = importOnnx(p);
        EXPECT_EQ(imported.report.opset, opset);
        const auto& g = imported.graph;
        EXPECT_EQ(g.tensor(g.outputs().front()).shape, (Shape { 2, 4 })) << opset;
        std::map<std::string, std::int64_t> counts;
        for (const auto& [op, count] : summarizeGraph(g).opHistogram)
            counts[op] = count;
        EXPECT_EQ(counts["Split"], 1) << opset;
        EXPECT_EQ(counts["ReduceMean"], 1) << opset;
        EXPECT_EQ(counts["Gelu"], 1) << opset; // one IR node, the tanh form
        for (const auto& n : g.nodes()) {
            if (n.op == OpType::Gelu) {
                EXPECT_EQ(std::get<std::string>(n.attrs.at("approximate")), "tanh");
            }
            if (n.op == OpType::ReduceMean) {
                EXPECT_EQ(g.tensor(n.outputs[0]).shape, (Shape { 2, 1 })); // axes [1] from the input
            }
        }
    }
    // Gelu changed at 20: an opset-18 model has no Gelu, and a Split at 17 never names num_outputs.
    EXPECT_EQ(onnximport::versionAfter17("Gelu", 19), 0);
    EXPECT_EQ(onnximport::versionAfter17("Gelu", 22), 20);
    EXPECT_EQ(onnximport::versionAfter17("ReduceMax", 19), 18);
    EXPECT_EQ(onnximport::versionAfter17("ReduceMax", 20), 20);
    EXPECT_EQ(onnximport::versionAfter17("MatMul", 25), 0);
}

TEST(OnnxOpset, WhatCannotBeLoweredIsRefusedNamingNodeOperatorAndVersion)
{
    auto m = opset18Model(18, 3); // num_outputs 3 for 2 outputs
    auto e = importError(m, "split.onnx");
    EXPECT_NE(e.find("node 'split' (Split, version 18) names num_outputs 3 for 2 outputs"), std::string::npos) << e;
    EXPECT_NE(e.find("split.onnx"), std::string::npos) << e;

    m = opset18Model(23);
    node(m.mutable_graph(), "Attention", "attn", { "z", "z", "z" }, { "n" });
    e = importError(m, "attention.onnx");
    EXPECT_NE(e.find("node 'attn' (Attention, version 23) is not read by PipeStudio yet"), std::string::npos) << e;
    EXPECT_NE(e.find("at opset 23"), std::string::npos) << e;

    m = opset18Model(18);
    m.mutable_graph()->mutable_node(1)->set_input(1, "x"); // axes from an activation
    e = importError(m, "axes.onnx");
    EXPECT_NE(e.find("takes its axes from 'x', which is not a constant"), std::string::npos) << e;

    e = importError(opset18Model(26), "opset26.onnx");
    EXPECT_NE(e.find("uses ONNX opset 26; PipeStudio imports opsets 13-25"), std::string::npos) << e;
    EXPECT_NE(e.find("opset_version=20"), std::string::npos) << e; // the export call that gives one
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// The Attention forms onnx/attention_lowering.h does not write out are refused, naming the node,
// the operator and its version: the scores as an output (qk_matmul_output) and a sliding window.
TEST(OnnxOpset, AttentionFormsNotWrittenOutAreRefusedNamingTheNode)
{
    const fs::path dir = fs::path(PS_TEST_DATA_DIR) / "onnx_ops23";
    onnx::ModelProto base;
    std::ifstream in(dir / "attention_3d_gqa.onnx", std::ios::binary);
    ASSERT_TRUE(base.ParseFromIstream(&in));
    const auto attention = [](onnx::ModelProto& m) -> onnx::NodeProto& {
        for (auto& n : *m.mutable_graph()->mutable_node()) {
            if (n.op_type() == "Attention")
                return n;
        }
        throw Error("no Attention");
    };
    EXPECT_EQ(importError(base, "attention.onnx"), "");
    auto m = base;
    attention(m).add_output("");
    attention(m).add_output("");
    attention(m).add_output("scores");
    auto e = importError(m, "scores.onnx");
    EXPECT_NE(e.find("node 'attn_node' (Attention, version 23) is not read by PipeStudio yet"), std::string::npos) << e;
    m = base;
    intAttr(&attention(m), "left_window_size", 2);
    e = importError(m, "window.onnx");
    EXPECT_NE(e.find("node 'attn_node' (Attention, version 23)"), std::string::npos) << e;
}

// Conv1d and 1-D pools become the 2-D ones between an Unsqueeze and a Squeeze: the window gets a
// height of 1 (pads [b, e] -> [0, b, 0, e]), a weight shared by two convolutions is widened once, and
// the graph's shapes are the 1-D operator's.
TEST(OnnxOpset, OneDimensionalConvolutionsAndPoolsBecomeTwoDimensionalOnes)
{
    auto m = opsetModel("conv1d", 17, { 2, 4, 20 });
    auto* g = m.mutable_graph();
    auto* w = g->add_initializer();
    w->set_name("w");
    w->set_data_type(onnx::TensorProto::FLOAT);
    for (auto d : { 4, 4, 3 })
        w->add_dims(d);
    for (int i = 0; i < 4 * 4 * 3; ++i)
        w->add_float_data(0.01F * static_cast<float>(i % 7));
    auto* c1 = node(g, "Conv", "c1", { "x", "w" }, { "h" }); // no kernel_shape: told by the weight's rank
    auto* pads = c1->add_attribute();
    pads->set_name("pads");
    pads->set_type(onnx::AttributeProto::INTS);
    pads->add_ints(2);
    pads->add_ints(1);
    auto* c2 = node(g, "Conv", "c2", { "h", "w" }, { "h2" }); // the same weight again
    auto* strides = c2->add_attribute();
    strides->set_name("strides");
    strides->set_type(onnx::AttributeProto::INTS);
    strides->add_ints(2);
    auto* pool = node(g, "MaxPool", "pool", { "h2" }, { "y" });
    auto* k = pool->add_attribute();
    k->set_name("kernel_shape");
    k->set_type(onnx::AttributeProto::INTS);
    k->add_ints(2);
    floatValue(g->add_output(), "y", {});
    const auto p = opsetScratch("conv1d.onnx");
    std::ofstream(p, std::ios::binary) << m.SerializeAsString();
    const auto imported = importOnnx(p);
    EXPECT_TRUE(imported.report.opaqueOps.empty());
    const auto& graph = imported.graph;
    // (2, 4, 20) -> pads 2 + 1, k 3: 21 -> stride 2: 10 -> pool 2, stride 1: 9.
    EXPECT_EQ(graph.tensor(graph.outputs().front()).shape, (Shape { 2, 4, 9 }));
    int convs = 0;
    for (const auto& n : graph.nodes()) {
        if (n.op != OpType::Conv)
            continue;
        ++convs;
        EXPECT_EQ(graph.tensor(n.inputs[0]).shape.size(), 4U) << n.name;
        EXPECT_EQ(graph.tensor(n.inputs[1]).shape, (Shape { 4, 4, 1, 3 })) << n.name;
        if (n.name == "c1") {
            EXPECT_EQ(n.intsAttr("pads"), (std::vector<std::int64_t> { 0, 2, 0, 1 }));
        }
    }
    EXPECT_EQ(convs, 2);
    EXPECT_EQ(graph.parameterCount(), 4 * 4 * 3); // the shared weight is one parameter
}

// Local functions are inlined: a referenced attribute takes the call's value or is left out (the
// operator's default), names inside the body are prefixed by the call, and a function that calls
// itself is refused naming it.
TEST(OnnxOpset, LocalFunctionsAreInlinedWithTheCallsAttributes)
{
    const auto model = [](bool recursive) {
        onnx::ModelProto m;
        m.set_ir_version(8);
        for (const auto& [domain, version] : { std::pair<std::string, int> { "", 17 }, { "mine", 1 } }) {
            auto* op = m.add_opset_import();
            op->set_domain(domain);
            op->set_version(version);
        }
        auto* f = m.add_functions();
        f->set_name("Leaky");
        f->set_domain("mine");
        f->add_input("a");
        f->add_output("b");
        f->add_attribute("slope");
        auto* fop = f->add_opset_import();
        fop->set_domain("");
        fop->set_version(17);
        auto* body = f->add_node();
        body->set_op_type(recursive ? "Leaky" : "LeakyRelu");
        body->set_domain(recursive ? "mine" : "");
        body->set_name("act");
        body->add_input("a");
        body->add_output("b");
        auto* ref = body->add_attribute();
        ref->set_name("alpha");
        ref->set_type(onnx::AttributeProto::FLOAT);
        ref->set_ref_attr_name("slope");
        auto* g = m.mutable_graph();
        g->set_name("functions");
        floatValue(g->add_input(), "x", { 2, 3 });
        auto* first = node(g, "Leaky", "first", { "x" }, { "h" });
        first->set_domain("mine");
        auto* slope = first->add_attribute();
        slope->set_name("slope");
        slope->set_type(onnx::AttributeProto::FLOAT);
        slope->set_f(0.5F);
        node(g, "Leaky", "second", { "h" }, { "h2" })->set_domain("mine");
        node(g, "Leaky", "second", { "h2" }, { "y" })->set_domain("mine"); // a name used twice
        floatValue(g->add_output(), "y", { 2, 3 });
        return m;
    };
    const auto p = opsetScratch("functions.onnx");
    std::ofstream(p, std::ios::binary) << model(false).SerializeAsString();
    const auto imported = importOnnx(p);
    EXPECT_TRUE(imported.report.opaqueOps.empty());
    std::map<std::string, double> alphas;
    for (const auto& n : imported.graph.nodes()) {
        ASSERT_EQ(n.op, OpType::LeakyRelu) << n.name;
        alphas[n.name] = n.attrs.contains("alpha") ? std::get<double>(n.attrs.at("alpha")) : 0.01;
    }
    ASSERT_EQ(alphas.size(), 3U);
    EXPECT_NEAR(alphas["first/act"], 0.5, 1e-7); // the call's slope
    EXPECT_NEAR(alphas["second/act"], 0.01, 1e-7); // none given: LeakyRelu's default
    EXPECT_NEAR(alphas["second#2/act"], 0.01, 1e-7); // the second call of that name: its own values
    const auto error = importError(model(true), "recursive.onnx");
    EXPECT_NE(error.find("local function 'Leaky'"), std::string::npos) << error;
    EXPECT_NE(error.find("recursion"), std::string::npos) << error;
}

// torch.export's node names ("node_addmm_2") carry no module path; its node metadata does
// (onnx/module_scopes.h): scopes, layers and each module's class come from there, also for the
// nodes a lowering writes in a node's place, and the nodes keep the order the exporter wrote.
TEST(OnnxOpset, Torch2ExportsTakeModulePathsAndLayersFromNodeMetadata)
{
    const fs::path dir = fs::path(PS_TEST_DATA_DIR) / "onnx_torch2";
    // T5: every node in a module; blocks are layers in the order they ran, the encoder's first
    // (the topological order keeps the file's, where the old one went depth first into the decoder).
    const auto t5 = importOnnx(dir / "hf_t5.onnx").graph;
    std::map<std::string, std::int32_t> layerOf;
    for (const auto& n : t5.nodes()) {
        EXPECT_FALSE(n.scope.empty()) << n.name;
        for (const char* block :
            { "model.encoder.block.0", "model.encoder.block.1", "model.decoder.block.0", "model.decoder.block.1" }) {
            if (n.scope == block || n.scope.starts_with(std::string(block) + ".")) {
                const auto [it, added] = layerOf.emplace(block, n.layer);
                EXPECT_EQ(it->second, n.layer) << n.name << " in " << block;
            }
        }
    }
    EXPECT_EQ(layerOf,
        (std::map<std::string, std::int32_t> { { "model.decoder.block.0", 2 }, { "model.decoder.block.1", 3 },
            { "model.encoder.block.0", 0 }, { "model.encoder.block.1", 1 } }));

    // GPT-2: each module's class is kept; a node the exporter's optimizer wrote (no metadata)
    // takes the module of what it reads.
    const auto gpt2 = importOnnx(dir / "hf_gpt2.onnx").graph;
    const auto classes = moduleClassesFromJson(gpt2.info().configJson);
    EXPECT_EQ(classes.at("model.transformer.h.1"), "GPT2Block");
    EXPECT_EQ(classes.at("model.transformer.h.1.attn.c_attn"), "Conv1D");
    EXPECT_EQ(classes.at("model.transformer.h.1.ln_2"), "LayerNorm");
    int splits = 0;
    for (const auto& n : gpt2.nodes()) {
        if (n.op == OpType::Split) {
            ++splits;
            EXPECT_TRUE(n.scope.ends_with(".attn.c_attn")) << n.name << ": " << n.scope;
            EXPECT_GE(n.layer, 0);
        }
    }
    EXPECT_GT(splits, 0);

    // LLaMA at opset 23: the nodes RMSNormalization and Attention were written out in keep the
    // module of the node they replace.
    const auto llama = importOnnx(dir / "hf_llama_gqa_opset23.onnx").graph;
    int lowered = 0;
    for (const auto& n : llama.nodes()) {
        if (n.name.find('/') == std::string::npos)
            continue;
        ++lowered;
        EXPECT_TRUE(n.scope.ends_with("layernorm") || n.scope.ends_with("norm") || n.scope.ends_with("self_attn"))
            << n.name << ": " << n.scope;
    }
    EXPECT_GT(lowered, 10);

    // A functional call in the root module's own forward is in no module.
    const auto cnn = importOnnx(dir / "cnn_bn_pool.onnx").graph;
    for (const auto& n : cnn.nodes()) {
        if (n.op == OpType::Relu || n.op == OpType::MaxPool) {
            EXPECT_EQ(n.scope, "") << n.name;
        }
    }
    EXPECT_FALSE(moduleClassesFromJson(cnn.info().configJson).empty());
}

// Sin and Cos: of a static value (a rotary table: positions times a frequency buffer) they fold to
// a constant; of data they are ops of their own, forward as std::sin/std::cos.
TEST(OnnxOpset, SinAndCosFoldWhenStaticAndAreOpsOnData)
{
    auto m = opsetModel("rotary", 17, { 2, 4 });
    auto* g = m.mutable_graph();
    // Integer positions cast to float, times a scalar frequency: what the folding knows to be
    // static (a float constant of several elements may be a folded slice of a weight).
    const auto constant = [g](const std::string& name, int type, const std::vector<std::int64_t>& dims,
                              const std::vector<double>& values) {
        auto* c = node(g, "Constant", name, {}, { name });
        auto* a = c->add_attribute();
        a->set_name("value");
        a->set_type(onnx::AttributeProto::TENSOR);
        auto* t = a->mutable_t();
        t->set_data_type(type);
        for (const auto d : dims)
            t->add_dims(d);
        for (const double v : values) {
            if (type == onnx::TensorProto::INT64)
                t->add_int64_data(static_cast<std::int64_t>(v));
            else
                t->add_float_data(static_cast<float>(v));
        }
    };
    constant("steps", onnx::TensorProto::INT64, { 4 }, { 0, 1, 2, 3 });
    intAttr(node(g, "Cast", "to_float", { "steps" }, { "positions" }), "to", onnx::TensorProto::FLOAT);
    constant("inv_freq", onnx::TensorProto::FLOAT, {}, { 0.5 });
    node(g, "Mul", "angles", { "positions", "inv_freq" }, { "theta" });
    node(g, "Cos", "cos_table", { "theta" }, { "c" });
    node(g, "Sin", "sin_x", { "x" }, { "s" });
    node(g, "Mul", "rotate", { "s", "c" }, { "y" });
    g->add_output()->set_name("y");
    const auto p = opsetScratch("rotary.onnx");
    std::ofstream(p, std::ios::binary) << m.SerializeAsString();
    const auto imported = importOnnx(p);
    std::map<OpType, int> ops;
    for (const auto& n : imported.graph.nodes())
        ++ops[n.op];
    EXPECT_EQ(ops[OpType::Sin], 1); // on the data
    EXPECT_EQ(ops[OpType::Cos], 0); // folded: cos(0.5 * position)
    EXPECT_EQ(ops[OpType::Mul], 1);
    EXPECT_TRUE(imported.report.opaqueOps.empty());
    const Tensor* table = nullptr;
    for (const auto& n : imported.graph.nodes()) {
        if (n.op == OpType::Mul) {
            for (const auto in : n.inputs) {
                if (imported.graph.tensor(in).kind == TensorKind::Constant)
                    table = &imported.graph.tensor(in);
            }
        }
    }
    ASSERT_NE(table, nullptr);
    ASSERT_TRUE(table->data);
    ASSERT_EQ(table->data->size(), 4 * sizeof(float));
    std::vector<float> values(4);
    std::memcpy(values.data(), table->data->data(), table->data->size());
    for (int i = 0; i < 4; ++i)
        EXPECT_NEAR(values[static_cast<std::size_t>(i)], std::cos(0.5 * i), 1e-6) << i;
}
