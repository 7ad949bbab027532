#include "graph/graph_summary.h"
#include "graph/op_cost.h"
#include "onnx/onnx_import.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <onnx/onnx_pb.h>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

class OnnxFixture : public ::testing::Test
{
protected:
    void SetUp() override
    {
        const char* dir = std::getenv("PS_ONNX_FIXTURES");
        if (!dir || !fs::exists(fs::path(dir) / "manifest.json"))
            GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
        m_dir = dir;
        std::ifstream in(m_dir / "manifest.json");
        m_manifest = nlohmann::json::parse(in);
    }
    fs::path m_dir;
    nlohmann::json m_manifest;
};

TEST_F(OnnxFixture, ParametersNodesAndOutputShapesMatchTorch)
{
    for (const auto& e : m_manifest) {
        const auto file = e["file"].get<std::string>();
        const auto input = e["input_shapes"][0];
        OnnxImportOptions o;
        o.batch = input[0].get<std::int64_t>();
        if (input.size() > 2) // a dynamic "seq" axis (fixed ones keep their exported size)
            o.dims["seq"] = input[1].get<std::int64_t>();
        const auto imported = importOnnx(m_dir / file, o);
        EXPECT_EQ(imported.graph.parameterCount(), e["parameters"].get<std::int64_t>()) << file;
        // One IR node per ONNX node, but each LayerNorm torch writes out at opset 13 (ReduceMean, Sub,
        // Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) is one LayerNorm node (graph/group_norm.h).
        const std::map<std::string, std::size_t> layerNorms { { "encoder_layer", 2 }, { "encoder", 4 },
            { "transformer", 12 }, { "resnet18", 0 }, { "vit_b_16", 25 } };
        const bool writtenOut = imported.report.opset < 17; // LayerNormalization is an operator from 17
        EXPECT_EQ(imported.report.layerNorms, writtenOut ? layerNorms.at(e["name"].get<std::string>()) : 0) << file;
        EXPECT_EQ(imported.graph.nodeCount(),
            e["onnx_nodes"].get<std::size_t>() - e["constant_nodes"].get<std::size_t>()
                - e["shape_nodes"].get<std::size_t>() - 8 * imported.report.layerNorms)
            << file;
        EXPECT_EQ(imported.report.foldedShapeNodes, e["shape_nodes"].get<std::size_t>()) << file;
        // Every op of these modules maps to an IR op the engine can train: nothing stays opaque.
        std::string opaque;
        for (const auto& [op, count] : imported.report.opaqueOps)
            opaque += op + " x" + std::to_string(count) + " ";
        EXPECT_EQ(opaque, "") << file;
        // Layers are the numbered blocks: encoder/decoder layers, ResNet BasicBlocks, ViT encoder layers.
        const std::map<std::string, std::int32_t> blocks { { "encoder_layer", 0 }, { "encoder", 2 },
            { "transformer", 4 }, { "resnet18", 8 }, { "vit_b_16", 12 } };
        EXPECT_EQ(summarizeGraph(imported.graph).layerCount, blocks.at(e["name"].get<std::string>())) << file;
        const auto& out = imported.graph.tensor(imported.graph.outputs().front());
        EXPECT_EQ(out.shape, e["output_shape"].get<Shape>()) << file;
    }
}

TEST_F(OnnxFixture, EncoderLayerFlopsMatchAHandCount)
{
    // TransformerEncoderLayer(d=32, heads=4, ff=64) on (2, 16, 32): per sample, T = 16:
    // QKV 2*T*d*3d, scores 2*T*T*d, context 2*T*T*d, out-proj 2*T*d*d, FFN 2*T*d*ff*2.
    const double T = 16, d = 32, ff = 64;
    const double matmuls = 2 * T * d * 3 * d + 2 * 2 * T * T * d + 2 * T * d * d + 2 * 2 * T * d * ff;
    for (const char* file : { "encoder_layer-op13.onnx", "encoder_layer-op17.onnx" }) {
        OnnxImportOptions o;
        o.batch = 2;
        o.sequence = 16;
        const auto imported = importOnnx(m_dir / file, o);
        const auto costs = computeOpCosts(imported.graph);
        double matmulFlops = 0;
        for (const auto& n : imported.graph.nodes()) {
            if (n.op == OpType::MatMul)
                matmulFlops += costs[n.id.index()].forwardFlops;
        }
        EXPECT_NEAR(matmulFlops / 2 / matmuls, 1.0, 0.05) << file;
    }
}

// The user's word over the parameter rules (import --parameters/--constants, the import dialog):
// a position table kept constant loses its parameters, a buffer trained gains its own; a misspelt
// name or one named both ways fails naming it.
TEST_F(OnnxFixture, ParameterAndConstantOverridesTakeTheUsersWord)
{
    const auto model = m_dir / "fixed_shapes" / "tiny_lm_v200-dynamic.onnx";
    if (!fs::exists(model))
        GTEST_SKIP() << "no fixed_shapes/ fixtures";
    OnnxImportOptions o;
    o.sequence = 16; // its position table has 64 rows
    const auto byRules = importOnnx(model, o).graph.parameterCount();
    o.constants = { "wpe.weight" }; // nn.Embedding(64, 32)
    const auto kept = importOnnx(model, o).graph;
    EXPECT_EQ(kept.parameterCount(), byRules - 64 * 32);
    o.constants.clear();
    o.parameters = { "mask" }; // the registered causal mask, 1 x 1 x 64 x 64: a constant by the rules
    EXPECT_EQ(importOnnx(model, o).graph.parameterCount(), byRules + 64 * 64);
    const auto fails = [&](const OnnxImportOptions& bad, const std::string& fragment) {
        try {
            (void)importOnnx(model, bad);
            ADD_FAILURE() << "imported with " << fragment;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
        }
    };
    o.parameters = { "wpe.weigth" };
    fails(o, "'wpe.weigth' (named as a parameter) is not an initializer or constant of the model");
    o.parameters = { "wpe.weight" };
    o.constants = { "wpe.weight" };
    fails(o, "'wpe.weight' is named both a parameter and a constant");
}

namespace {

// `model` rewritten without PipeStudio's tracer metadata, or with `value` in its place.
fs::path withTracerMetadata(const fs::path& model, const fs::path& out, const std::string* value)
{
    onnx::ModelProto proto;
    std::ifstream in(model, std::ios::binary);
    EXPECT_TRUE(proto.ParseFromIstream(&in)) << model;
    auto* props = proto.mutable_metadata_props();
    props->erase(std::remove_if(props->begin(), props->end(),
                     [](const onnx::StringStringEntryProto& kv) { return kv.key() == "pipestudio.module"; }),
        props->end());
    if (value) {
        auto* kv = proto.add_metadata_props();
        kv->set_key("pipestudio.module");
        kv->set_value(*value);
    }
    std::ofstream o(out, std::ios::binary);
    EXPECT_TRUE(proto.SerializeToOstream(&o)) << out;
    return out;
}

} // namespace

// A model exported by PipeStudio's tracer imports with torch's trainable parameters: the buffer the
// forward multiplies by, the frozen projection (and the exporter's transposed copy of its weight)
// stay constants, the head's transposed copy of the tied embedding is read from the embedding.
// Without the metadata the same file imports all nine initializers as parameters.
TEST_F(OnnxFixture, TracerMetadataDecidesParametersAsTorchDoes)
{
    const auto dir = m_dir / "traced";
    if (!fs::exists(dir / "manifest.json"))
        GTEST_SKIP() << "no traced/ fixtures: rebuild them";
    const auto e = nlohmann::json::parse(std::ifstream(dir / "manifest.json")).at(0);
    OnnxImportOptions o;
    o.batch = 2;
    o.sequence = 8;
    const auto model = dir / e["file"].get<std::string>();
    const auto traced = importOnnx(model, o);
    EXPECT_EQ(traced.graph.parameterCount(), e["trainable"].get<std::int64_t>());
    EXPECT_EQ(traced.report.tracedTrainableElements, e["trainable"].get<std::int64_t>());
    std::map<std::string, std::string> rules;
    for (const auto& r : traced.report.initializerRules)
        rules[r.name] = r.rule;
    EXPECT_EQ(rules.size() + 1, e["initializers"].get<std::size_t>()) << "the tied head's copy is read from wte";
    EXPECT_EQ(rules["gain"], "constant: the tracer names it a buffer");
    EXPECT_EQ(rules["frozen.bias"], "constant: the tracer names it a frozen parameter (requires_grad=False)");
    EXPECT_EQ(rules["wte.weight"], "parameter: the tracer names it a trainable parameter");
    int copies = 0;
    for (const auto& [name, rule] : rules)
        copies += rule.find("(the exporter's copy)") != std::string::npos ? 1 : 0;
    EXPECT_EQ(copies, 2) << "the fc and frozen weights, stored transposed under new names";
    // The user's word still wins over the tracer's.
    o.parameters = { "gain" };
    EXPECT_EQ(importOnnx(model, o).graph.parameterCount(), e["trainable"].get<std::int64_t>() + 16);
    o.parameters.clear();

    const auto scratch = fs::temp_directory_path() / ("ps-traced-" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    const auto plain = importOnnx(withTracerMetadata(model, scratch / "plain.onnx", nullptr), o);
    EXPECT_FALSE(plain.report.tracedTrainableElements.has_value());
    EXPECT_GT(plain.graph.parameterCount(), traced.graph.parameterCount());
    const std::string broken = R"({"tensors": [{"kind": "parameter"}]})";
    try {
        (void)importOnnx(withTracerMetadata(model, scratch / "broken.onnx", &broken), o);
        ADD_FAILURE() << "a malformed tracer record imported";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("'pipestudio.module'"), std::string::npos) << err.what();
    }
    fs::remove_all(scratch);
}
