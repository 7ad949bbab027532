// `pipestudio import`, `info` and `estimate` on models exported with fixed shapes and on the
// precision setting, as a user runs them (tests/data/make_onnx_fixtures.py, fixed_shapes/).
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace fs = std::filesystem;
using ps::e2e::runCli;

namespace {

class CliFixedShapes : public ps::e2e::ScratchTest
{
protected:
    void SetUp() override
    {
        ScratchTest::SetUp();
        const char* env = std::getenv("PS_ONNX_FIXTURES");
        if (!env || !fs::exists(fs::path(env) / "fixed_shapes" / "manifest.json"))
            GTEST_SKIP() << "no fixed_shapes/ in PS_ONNX_FIXTURES (tests/data/make_onnx_fixtures.py needs torch)";
        m_models = fs::path(env) / "fixed_shapes";
    }
    std::string project(const std::string& name) const
    {
        return ps::e2e::quote(m_dir / (name + ".pstudio"));
    }
    nlohmann::json info(const std::string& name)
    {
        const auto r = runCli("info " + project(name) + " --json");
        EXPECT_EQ(r.exitCode, 0) << r.output;
        return nlohmann::json::parse(r.output);
    }
    fs::path m_models;
};

} // namespace

TEST_F(CliFixedShapes, AlexNetAtItsExportedBatchAndRespecialised)
{
    // The fixture keeps its weights in a data file that is not there (a small file): asking for
    // the weights names that file; --no-weights plans without them.
    const auto model = ps::e2e::quote(m_models / "alexnet-fixed.onnx");
    const auto refused = runCli("import " + model + " -o " + project("a0"));
    EXPECT_NE(refused.exitCode, 0);
    EXPECT_NE(refused.output.find("weights-not-stored.bin', which is missing"), std::string::npos) << refused.output;
    EXPECT_NE(refused.output.find("--no-weights"), std::string::npos) << refused.output;
    const auto at8 = runCli("import " + model + " -o " + project("a8") + " --no-weights");
    ASSERT_EQ(at8.exitCode, 0) << at8.output;
    EXPECT_NE(at8.output.find("micro-batch 8"), std::string::npos) << at8.output;
    const auto i8 = info("a8");
    EXPECT_EQ(i8["micro_batch"], 8);
    EXPECT_NEAR(i8["forward_flops_per_sample"].get<double>() / 1e9, 1.43, 0.01);
    ASSERT_EQ(i8["input_dims"].size(), 4u);
    EXPECT_EQ(i8["input_dims"][0]["role"], "batch");
    EXPECT_EQ(i8["input_dims"][0]["dynamic"], false);
    EXPECT_EQ(i8["input_dims"][0]["exported"], 8);

    const auto at128 = runCli("import " + model + " -o " + project("a128") + " --batch 128 --no-weights");
    ASSERT_EQ(at128.exitCode, 0) << at128.output;
    const auto i128 = info("a128");
    EXPECT_EQ(i128["micro_batch"], 128);
    EXPECT_DOUBLE_EQ(i128["forward_flops_per_sample"].get<double>(), i8["forward_flops_per_sample"].get<double>());
    EXPECT_EQ(i128["input_dims"][0]["size"], 128);
    const auto text = runCli("info " + project("a128"));
    EXPECT_NE(text.output.find("batch 128 (fixed at 8 in the file, re-specialised)"), std::string::npos) << text.output;

    // The A100 estimate at batch 128 prints the precision it used and the time per op class.
    const auto est = runCli("estimate " + project("a128") + " --device a100-40gb --micro-batch 128");
    ASSERT_EQ(est.exitCode, 0) << est.output;
    EXPECT_NE(est.output.find("precision fp32 (PyTorch's default"), std::string::npos) << est.output;
    EXPECT_NE(est.output.find("convolution"), std::string::npos) << est.output;
    const auto json = [&](const std::string& precision) {
        const auto r = runCli("estimate " + project("a128") + " --device a100-40gb --micro-batch 128 --json"
            + (precision.empty() ? "" : " --precision " + precision));
        EXPECT_EQ(r.exitCode, 0) << r.output;
        return nlohmann::json::parse(r.output);
    };
    const auto fp32 = json("");
    const auto tf32 = json("tf32");
    const auto bf16 = json("bf16");
    EXPECT_EQ(fp32["precision"], "fp32");
    EXPECT_EQ(bf16["precision"], "bf16");
    const auto gemm = [](const nlohmann::json& j) { return j["by_class"]["gemm"]["forward_ms"].get<double>(); };
    EXPECT_LT(gemm(bf16), gemm(tf32));
    EXPECT_LT(gemm(tf32), gemm(fp32));
    EXPECT_TRUE(
        failedSaying(runCli("estimate " + project("a128") + " --precision bf16 --tf32"), "give one of --precision"));
}

TEST_F(CliFixedShapes, LanguageModelRespecialisesItsBatchAndRefusesASequenceItsConstantsFix)
{
    const auto fixed = ps::e2e::quote(m_models / "tiny_lm-fixed.onnx");
    const auto dynamic = ps::e2e::quote(m_models / "tiny_lm-dynamic.onnx");
    ASSERT_EQ(runCli("import " + fixed + " -o " + project("f") + " --batch 8").exitCode, 0);
    ASSERT_EQ(runCli("import " + dynamic + " -o " + project("d") + " --batch 8 --seq 16").exitCode, 0);
    const auto f = info("f");
    const auto d = info("d");
    EXPECT_EQ(f["micro_batch"], 8);
    EXPECT_NEAR(f["forward_flops_per_sample"].get<double>() / d["forward_flops_per_sample"].get<double>(), 1.0, 0.02);
    // A longer sequence meets the position table the export folded at 16 rows: refused, naming the
    // node and the export argument; nothing written.
    const auto longer = runCli("import " + fixed + " -o " + project("long") + " --seq 64");
    EXPECT_NE(longer.exitCode, 0);
    EXPECT_NE(longer.output.find("node '"), std::string::npos) << longer.output;
    EXPECT_NE(longer.output.find("dynamic_axes={'input': {1: 'seq'}}"), std::string::npos) << longer.output;
    EXPECT_FALSE(fs::exists(m_dir / "long.pstudio"));
}

// import --constants/--parameters take the user's word over the parameter rules; --dim binds a named
// dynamic dimension; a misspelt name and a malformed --dim are one-line errors.
TEST_F(CliFixedShapes, ImportOverridesParametersConstantsAndNamedDimensions)
{
    const auto model = ps::e2e::quote(m_models / "tiny_lm_v200-dynamic.onnx");
    // The default sequence (128) is past its 64-row position table and causal-mask buffer: refused,
    // saying which sizes it tried and what to change.
    const auto past = runCli("import " + model + " -o " + project("past"));
    EXPECT_NE(past.exitCode, 0);
    EXPECT_NE(past.output.find("at the dynamic sizes batch=1, seq=128"), std::string::npos) << past.output;
    EXPECT_NE(past.output.find("import at a smaller --seq"), std::string::npos) << past.output;
    ASSERT_EQ(runCli("import " + model + " -o " + project("rules") + " --seq 16").exitCode, 0);
    const auto byRules = info("rules")["parameters"].get<std::int64_t>();
    const auto kept = runCli("import " + model + " -o " + project("kept") + " --seq 16 --constants wpe.weight,ln.bias");
    ASSERT_EQ(kept.exitCode, 0) << kept.output;
    EXPECT_EQ(info("kept")["parameters"].get<std::int64_t>(), byRules - 64 * 32 - 32);
    // info says which rule decided each initializer.
    const auto ruleOf = [&](const std::string& name, const std::string& initializer) {
        const auto all = info(name); // kept alive through the loop
        for (const auto& i : all["initializers"]) {
            if (i["name"] == initializer)
                return i["kind"].get<std::string>() + " | " + i["rule"].get<std::string>();
        }
        return std::string("absent");
    };
    EXPECT_EQ(ruleOf("kept", "wpe.weight"), "constant | constant: named by the user (--constants)");
    EXPECT_EQ(ruleOf("rules", "wpe.weight"), "parameter | parameter: a gradient reaches it");
    EXPECT_EQ(ruleOf("rules", "mask"),
        "constant | constant: no gradient reaches it (read by comparisons, shapes or integer casts)");
    EXPECT_EQ(info("rules")["initializers"].size(), 11u);
    const auto text = runCli("info " + project("kept"));
    EXPECT_NE(text.output.find("Initializers   constant: named by the user (--constants) (2): wpe.weight, ln.bias"),
        std::string::npos)
        << text.output;
    const auto seq = runCli("import " + model + " -o " + project("seq32") + " --dim seq=32");
    ASSERT_EQ(seq.exitCode, 0) << seq.output;
    EXPECT_EQ(info("seq32")["input_dims"][1]["size"], 32);
    const auto typo = runCli("import " + model + " -o " + project("typo") + " --seq 16 --parameters wpe.weigth");
    EXPECT_NE(typo.exitCode, 0);
    EXPECT_NE(typo.output.find("'wpe.weigth' (named as a parameter) is not an initializer"), std::string::npos)
        << typo.output;
    const auto unknownDim = runCli("import " + model + " -o " + project("pst") + " --dim pst=4");
    EXPECT_NE(unknownDim.output.find("is named 'pst' (its named dynamic dimensions: batch, seq)"), std::string::npos)
        << unknownDim.output;
    const auto batchDim = runCli("import " + model + " -o " + project("b4") + " --dim batch=4");
    EXPECT_NE(batchDim.output.find("'batch' is the batch: size it with the batch option (--batch)"), std::string::npos)
        << batchDim.output;
    // An override before the model takes one value, not the model's path.
    const auto first = runCli("import --constants wpe.weight " + model + " -o " + project("first") + " --seq 16");
    EXPECT_EQ(first.exitCode, 0) << first.output;
    EXPECT_TRUE(failedSaying(
        runCli("import " + model + " -o " + project("dim") + " --dim seq"), "--dim 'seq' is not NAME=SIZE"));
}

// The tracer (profiler/python/pipestudio_trace.py) as a user runs it, with the torch at hand:
// Debian's 1.13 (TorchScript exporter, opset 17) and, where PS_TORCH2_PYTHON names one, torch 2.9+
// (its default torch.export-based exporter, opset 20, weights in a side file). Either way the import
// trains torch's parameters: the tied head once, the buffer and the frozen projection constant.
TEST(TraceHelper, EachTorchsDefaultExportImportsWithTorchsParameters)
{
    std::vector<std::pair<std::string, std::string>> pythons { { "/usr/bin/python3", "TorchScript" } };
    if (const char* torch2 = std::getenv("PS_TORCH2_PYTHON"); torch2 != nullptr && *torch2 != '\0')
        pythons.emplace_back(torch2, ""); // its default exporter: dynamo from torch 2.9, TorchScript before
    if (ps::e2e::runShell("/usr/bin/python3 -c 'import torch' 2>/dev/null").exitCode != 0)
        GTEST_SKIP() << "no torch for /usr/bin/python3 (Debian's python3-torch)";
    const auto dir = std::filesystem::temp_directory_path() / ("ps_trace_helper_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    for (const auto& [python, exporter] : pythons) {
        const auto onnx = dir / ((exporter.empty() ? "torch2" : exporter) + ".onnx");
        const auto traced = ps::e2e::runShell("PYTHONPATH=" PS_SOURCE_DIR "/tests/data " + python
            + " " PS_SOURCE_DIR "/profiler/python/pipestudio_trace.py traced_module:tied_lm --input-shape 2,8 "
              "--dtype int64 --vocab 50 -o "
            + ps::e2e::quote(onnx));
        ASSERT_EQ(traced.exitCode, 0) << python << ": " << traced.output;
        EXPECT_NE(traced.output.find(exporter + " exporter), 1104 trainable parameters"), std::string::npos)
            << traced.output;
        const auto project = dir / onnx.filename().replace_extension(".pstudio");
        const auto imported = ps::e2e::runCli(
            "import " + ps::e2e::quote(onnx) + " --seq 8 --batch 2 -o " + ps::e2e::quote(project) + " --force");
        ASSERT_EQ(imported.exitCode, 0) << imported.output;
        EXPECT_NE(imported.output.find("the tracer's module trains 1104 parameters (the same)"), std::string::npos)
            << exporter << ": " << imported.output;
    }
    std::filesystem::remove_all(dir);
}
