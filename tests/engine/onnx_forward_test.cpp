// Imported ONNX models run forward on the CPU engine with their own weights and give torch's output:
// the decomposed ops (LayerNorm pieces, Erf GELU, in-projection slices, Conv/BatchNorm/pools) mean
// what ONNX means.
#include "executor.h"
#include "onnx/onnx_import.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace ps;
using namespace ps::engine;
namespace fs = std::filesystem;

namespace {

// The largest absolute difference between `out` and the float32 values in `file`, and the
// largest absolute expected value (the scale the difference is held against).
std::pair<double, double> differenceFrom(const NdArray& out, const fs::path& file)
{
    std::vector<float> expected(static_cast<std::size_t>(out.numel()));
    std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(expected.data()), out.bytes());
    double diff = 0;
    double scale = 0;
    for (std::int64_t i = 0; i < out.numel(); ++i) {
        diff = std::max(diff, static_cast<double>(std::abs(out.f32()[i] - expected[static_cast<std::size_t>(i)])));
        scale = std::max(scale, static_cast<double>(std::abs(expected[static_cast<std::size_t>(i)])));
    }
    return { diff, scale };
}

// Imports the manifest entry `e` of `dir`, runs its forward on its recorded input and returns its
// first output's largest difference from the recorded output, relative to that output's scale.
double relativeForwardError(const fs::path& dir, const nlohmann::json& e)
{
    const auto name = e["name"].get<std::string>();
    auto imported = importOnnx(dir / e["file"].get<std::string>());
    GraphExecutor ex(std::move(imported.graph), ExecutorOptions { 0, 0, false });
    const auto shape = e["input_shape"].get<Shape>();
    const bool ids = e["input_dtype"] == "int64";
    std::ifstream in(dir / (name + ".in.bin"), std::ios::binary);
    std::vector<std::byte> bytes(static_cast<std::size_t>(numElements(shape)) * (ids ? 8 : 4));
    in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!in)
        throw Error(name + ": input file too short");
    ex.setInput(e["input"].get<std::string>(),
        ex.backend().fromHost(ex.allocator(), shape, ids ? DType::I64 : DType::F32, bytes));
    (void)ex.forward();
    const auto& out = ex.value(ex.graph().outputs().front());
    if (out.shape() != e["output_shape"].get<Shape>())
        throw Error(name + ": output shape " + formatShape(out.shape()));
    const auto [diff, scale] = differenceFrom(out, dir / (name + ".out.bin"));
    return diff / scale;
}

} // namespace

TEST(OnnxForward, ImportedModulesMatchTorchOutputs)
{
    const char* dir = std::getenv("PS_ONNX_FIXTURES");
    if (!dir || !fs::exists(fs::path(dir) / "manifest.json"))
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    const auto manifest = nlohmann::json::parse(std::ifstream(fs::path(dir) / "manifest.json"));
    int checked = 0;
    for (const auto& e : manifest) {
        const auto name = e["name"].get<std::string>();
        if (name == "vit_b_16")
            continue; // 86M parameters at 224x224: the import test covers its structure
        const auto stem = fs::path(dir) / (name + "-op" + std::to_string(e["opset"].get<int>()));
        if (!fs::exists(stem.string() + ".in.bin"))
            GTEST_SKIP() << "fixtures from an older script: rebuild them";
        const auto input = e["input_shapes"][0];
        OnnxImportOptions o;
        o.batch = input[0].get<std::int64_t>();
        if (input.size() > 2) // a dynamic "seq" axis (fixed ones keep their exported size)
            o.dims["seq"] = input[1].get<std::int64_t>();
        auto imported = importOnnx(fs::path(dir) / e["file"].get<std::string>(), o);
        GraphExecutor ex(std::move(imported.graph), ExecutorOptions { 0, 0, false });
        std::ifstream in(stem.string() + ".in.bin", std::ios::binary);
        const std::vector<std::string> names { "input", "input2" };
        for (std::size_t i = 0; i < e["input_shapes"].size(); ++i) {
            const auto shape = e["input_shapes"][i].get<Shape>();
            auto a = NdArray::empty(ex.allocator(), shape);
            in.read(reinterpret_cast<char*>(a.f32()), a.bytes());
            ex.setInput(names[i], a);
        }
        (void)ex.forward();
        const auto [diff, scale] = differenceFrom(ex.value(ex.graph().outputs().front()), stem.string() + ".out.bin");
        EXPECT_LT(diff / scale, 1e-4) << stem.filename() << ": max difference " << diff << " at output scale " << scale;
        ++checked;
    }
    EXPECT_EQ(checked, 8);
}

// The tracer's export (profiler/python/pipestudio_trace.py) runs forward to torch's output with the
// head's transposed copy of the embedding read from the embedding and the frozen weights constant.
TEST(OnnxForward, ATracedModelWithATiedHeadMatchesTorch)
{
    const char* dir = std::getenv("PS_ONNX_FIXTURES");
    if (!dir || !fs::exists(fs::path(dir) / "traced" / "manifest.json"))
        GTEST_SKIP() << "no traced/ ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    const auto sub = fs::path(dir) / "traced";
    const auto e = nlohmann::json::parse(std::ifstream(sub / "manifest.json")).at(0);
    OnnxImportOptions o;
    o.batch = 2;
    o.sequence = 8;
    auto imported = importOnnx(sub / e["file"].get<std::string>(), o);
    ASSERT_EQ(imported.graph.parameterCount(), e["trainable"].get<std::int64_t>());
    GraphExecutor ex(std::move(imported.graph), ExecutorOptions { 0, 0, false });
    const Shape shape { 2, 8 };
    std::vector<std::byte> ids(16 * sizeof(std::int64_t));
    std::ifstream(sub / "tied_lm.in.bin", std::ios::binary)
        .read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(ids.size()));
    ex.setInput("input", ex.backend().fromHost(ex.allocator(), shape, DType::I64, ids));
    (void)ex.forward();
    const auto& out = ex.value(ex.graph().outputs().front());
    ASSERT_EQ(out.shape(), e["output_shape"].get<Shape>());
    const auto [diff, scale] = differenceFrom(out, sub / "tied_lm.out.bin");
    EXPECT_LT(diff / scale, 1e-5) << "max difference " << diff << " at output scale " << scale;
}

// torch 2.15's exports (the default exporter at opset 20 with weights in external data files, and
// the TorchScript one at opset 17) run forward on the engine to onnxruntime's output
// (tests/data/make_torch2_onnx.py recorded it): the lowered opset-18 forms (Split's num_outputs,
// ReduceMean/ReduceMax axes inputs), Gelu (exact and tanh), 1-D convolutions and pools as 2-D ones,
// GatherElements and GatherND mean what ONNX means; local functions are inlined.
TEST(OnnxForward, Torch2DefaultExportsMatchOnnxRuntime)
{
    const fs::path dir = fs::path(PS_SOURCE_DIR) / "tests/data/onnx_torch2";
    const auto manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
    int checked = 0;
    for (const auto& e : manifest) {
        EXPECT_LT(relativeForwardError(dir, e), 1e-4) << e["name"];
        ++checked;
    }
    EXPECT_GE(checked, 27); // 16 architectures, 6 through both exporters, local functions, 4 at opset 23
}

// ONNX's Attention (23, 24) and RotaryEmbedding (23) in the forms other exporters write
// (tests/data/make_onnx_attention_ops.py: 3-D inputs with head counts, grouped heads, a past cache
// with bottom-right causal masking, softcap, bool and float masks, rotary at position ids,
// interleaved, partial): written out (onnx/attention_lowering.h), each model's forward is ONNX's
// reference implementation's within 1e-4, no opaque op stays, and the cache's present key and
// value are outputs of their shapes. The same files hold two ConvTransposes whose pads come from an
// output_shape and from auto_pad SAME_UPPER, against onnxruntime's output.
TEST(OnnxForward, AttentionAndRotaryEmbeddingOperatorsMatchOnnxsReference)
{
    const fs::path dir = fs::path(PS_SOURCE_DIR) / "tests/data/onnx_ops23";
    const auto manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
    int checked = 0;
    for (const auto& e : manifest) {
        const auto name = e["name"].get<std::string>();
        const auto imported = importOnnx(dir / e["file"].get<std::string>());
        EXPECT_EQ(imported.report.opset, e["opset"].get<int>()) << name;
        EXPECT_TRUE(imported.report.opaqueOps.empty()) << name;
        // Float Constants of more than one element import as parameters (onnx_tensors.cpp: torch folds
        // slices of weights into them); here they are the rotary tables, the cache and a float mask.
        EXPECT_EQ(imported.graph.parameterCount(),
            e["parameters"].get<std::int64_t>() + e["float_constants"].get<std::int64_t>())
            << name;
        const auto& outputs = imported.graph.outputs();
        const auto others = e["other_output_shapes"].get<std::vector<Shape>>();
        ASSERT_EQ(outputs.size(), 1 + others.size()) << name;
        for (std::size_t i = 0; i < others.size(); ++i)
            EXPECT_EQ(imported.graph.tensor(outputs[i + 1]).shape, others[i]) << name << " output " << i + 1;
        EXPECT_LT(relativeForwardError(dir, e), 1e-4) << name;
        ++checked;
    }
    EXPECT_GE(checked, 8);
}
