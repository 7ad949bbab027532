// `pipestudio export`: bad input fails cleanly, the layer formats are written, and the torchrun
// runner trained on 2 CPU processes (gloo) reproduces a single-process run's losses.
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace {

const fs::path kHere = fs::path(__FILE__).parent_path(); // tests/e2e: export_gpt.py and the mapping tests
const fs::path kRunnerDir = kHere.parent_path().parent_path() / "resources" / "export";
constexpr const char* kPython = "PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3"; // no __pycache__ in the tree

using Output = ps::e2e::CliResult;
using ps::e2e::runShell;

using ps::e2e::jsonLines;
using ps::e2e::quote;

Output cli(const std::string& args)
{
    return ps::e2e::runCli(args);
}

// {"step": N, "loss": X} lines anywhere in `text` (torchrun prefixes each line with its rank).
std::vector<double> losses(const std::string& text)
{
    std::vector<double> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        const auto brace = line.find("{\"step\"");
        if (brace != std::string::npos)
            out.push_back(nlohmann::json::parse(line.substr(brace))["loss"].get<double>());
    }
    return out;
}

std::string torchMissing()
{
    const auto probe = runShell(std::string(kPython) + " -c 'import torch, torch.fx, onnx'");
    return probe.exitCode == 0 ? std::string() : "no torch/onnx in /usr/bin/python3: " + probe.output;
}

class Export : public ps::e2e::ScratchTest
{
protected:
    // A planned zoo project; returns the stored plan's id.
    std::int64_t zooPlan(const fs::path& project, const std::string& model, int stages)
    {
        EXPECT_EQ(cli("new --model " + model + " -o " + quote(project)).exitCode, 0);
        const auto plan = cli("plan " + quote(project) + " --stages " + std::to_string(stages)
            + " --schedule 1f1b -m 4 --device a100-40gb --algo gpipe --json");
        EXPECT_EQ(plan.exitCode, 0) << plan.output;
        return nlohmann::json::parse(plan.output)[0].value("plan_id", std::int64_t { 0 });
    }
};

TEST_F(Export, BadInputGivesOneLineAndWritesNothing)
{
    const auto project = m_dir / "p.pstudio";
    const auto id = zooPlan(project, "gpt2-tiny", 2);
    ASSERT_GT(id, 0);
    const auto out = m_dir / "out";
    const auto unknownPlan = cli("export " + quote(project) + " --plan 999 -o " + quote(out));
    EXPECT_NE(unknownPlan.exitCode, 0);
    EXPECT_NE(unknownPlan.output.find("has no plan 999"), std::string::npos) << unknownPlan.output;
    EXPECT_EQ(std::count(unknownPlan.output.begin(), unknownPlan.output.end(), '\n'), 1) << unknownPlan.output;
    const auto unknownFormat =
        cli("export " + quote(project) + " --plan " + std::to_string(id) + " --format onnx -o " + quote(out));
    EXPECT_NE(unknownFormat.exitCode, 0);
    EXPECT_NE(unknownFormat.output.find("unknown export format 'onnx'"), std::string::npos) << unknownFormat.output;
    std::ofstream(m_dir / "a-file") << "x";
    const auto notWritable =
        cli("export " + quote(project) + " --plan " + std::to_string(id) + " -o " + quote(m_dir / "a-file" / "out"));
    EXPECT_NE(notWritable.exitCode, 0);
    EXPECT_NE(notWritable.output.find("cannot write to"), std::string::npos) << notWritable.output;
    const auto uneven = cli(
        "export " + quote(project) + " --plan " + std::to_string(id) + " --data-parallel 3 --nodes 4 -o " + quote(out));
    EXPECT_NE(uneven.exitCode, 0);
    EXPECT_NE(uneven.output.find("--nodes 4: the 6 processes (2 stage(s) x 3 replica(s)) do not spread evenly"),
        std::string::npos)
        << uneven.output;
    EXPECT_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(m_dir)) { // the project (and its WAL files) and a-file only
        const auto name = e.path().filename().string();
        EXPECT_TRUE(name.starts_with("p.pstudio") || name == "a-file") << "left behind: " << name;
    }
}

TEST_F(Export, LayerFormatsAndScheduleCsv)
{
    const auto project = m_dir / "p.pstudio";
    const auto id = zooPlan(project, "gpt2-small", 4);
    ASSERT_GT(id, 0);
    const auto out = m_dir / "out dir"; // a space: every path the CLI prints is quoted
    for (const std::string format : { "deepspeed", "megatron", "pipelining-csv", "torchrun" }) {
        const auto r =
            cli("export " + quote(project) + " --plan " + std::to_string(id) + " -f " + format + " -o " + quote(out));
        EXPECT_EQ(r.exitCode, 0) << r.output;
    }
    std::ifstream in(out / "deepspeed_pipeline.json");
    const auto ds = nlohmann::json::parse(in);
    EXPECT_EQ(ds["num_stages"], 4);
    EXPECT_EQ(ds["parts"], nlohmann::json({ 0, 4, 7, 10, 14 })) << "gpipe: 3 blocks per stage, embedding, head";
    EXPECT_TRUE(fs::exists(out / "megatron_args.txt"));
    EXPECT_TRUE(fs::exists(out / "schedule.csv"));
    EXPECT_TRUE(fs::exists(out / "plan.json"));
    EXPECT_TRUE(fs::exists(out / "run_pipeline.py"));
    // Replicas of the pipeline over machines: the launch line counts stages x replicas per machine.
    const auto multi = cli("export " + quote(project) + " --plan " + std::to_string(id)
        + " -f torchrun --data-parallel 4 --nodes 2 -o " + quote(out));
    ASSERT_EQ(multi.exitCode, 0) << multi.output;
    EXPECT_NE(multi.output.find("(4 stage(s) x 4 replica(s)"), std::string::npos) << multi.output;
    EXPECT_NE(multi.output.find("torchrun --nnodes 2 --nproc_per_node 8 --node_rank $NODE_RANK"), std::string::npos)
        << multi.output;
}

TEST(ExportRunner, MapsScopesOntoTheFxGraph)
{
    if (const auto why = torchMissing(); !why.empty())
        GTEST_SKIP() << why;
    const auto r = runShell("cd " + quote(kHere) + " && PS_RUNNER_DIR=" + quote(kRunnerDir) + " " + kPython
        + " -m unittest -q test_run_pipeline_mapping");
    EXPECT_EQ(r.exitCode, 0) << r.output;
}

// `import --loss cross-entropy` makes an exported GPT (token input 'input', a registered causal-mask
// buffer) a language model the engine trains: its parameters are torch's (the mask buffer is not
// one), and it trains on token windows over two pipelined CPU devices.
TEST_F(Export, ImportedGptWithALossTrainsOnTwoDevices)
{
    if (const auto why = torchMissing(); !why.empty())
        GTEST_SKIP() << why;
    const auto onnx = m_dir / "gpt.onnx";
    const auto made = runShell(std::string(kPython) + " " + quote(kHere / "export_gpt.py") + " onnx " + quote(onnx));
    ASSERT_EQ(made.exitCode, 0) << made.output;
    const auto counted = runShell("cd " + quote(kHere) + " && " + kPython
        + " -c 'import export_gpt as g; print(sum(p.numel() for p in g.TinyGPT().parameters()))'");
    ASSERT_EQ(counted.exitCode, 0) << counted.output;
    const auto project = m_dir / "gpt-loss.pstudio";
    const auto imported = cli("import " + quote(onnx) + " --batch 2 --loss cross-entropy -o " + quote(project));
    ASSERT_EQ(imported.exitCode, 0) << imported.output;
    EXPECT_NE(imported.output.find("labels input 'labels' (2, 16)"), std::string::npos) << imported.output;
    const auto info = cli("info " + quote(project) + " --json");
    ASSERT_EQ(info.exitCode, 0) << info.output;
    EXPECT_EQ(nlohmann::json::parse(info.output).value("parameters", std::int64_t { -1 }), std::stoll(counted.output));
    const auto trained =
        cli("train " + quote(project) + " --steps 3 --devices cpu:2 --data-format random --vocab 64 --json");
    ASSERT_EQ(trained.exitCode, 0) << trained.output;
    int steps = 0;
    for (const auto& j : jsonLines(trained.output)) {
        if (j.contains("config")) {
            EXPECT_EQ(j["config"].value("throughput_unit", ""), "tokens") << j.dump();
        }
        if (j.contains("loss") && !j.contains("summary")) {
            EXPECT_TRUE(std::isfinite(j["loss"].get<double>())) << j.dump();
            ++steps;
        }
    }
    EXPECT_EQ(steps, 3) << trained.output;
}

// Two processes of the exported runner (torchrun, gloo): a 2-stage pipeline, and one stage run by 2
// data-parallel replicas (each on half of every step's batch, gradients averaged before each step),
// give the single process's losses on the whole batch.
TEST_F(Export, TorchrunOnTwoProcessesMatchesOneProcess)
{
    if (const auto why = torchMissing(); !why.empty())
        GTEST_SKIP() << why;
    const auto onnx = m_dir / "gpt.onnx";
    const auto made = runShell(std::string(kPython) + " " + quote(kHere / "export_gpt.py") + " onnx " + quote(onnx));
    ASSERT_EQ(made.exitCode, 0) << made.output;
    const auto project = m_dir / "gpt.pstudio";
    const auto imported = cli("import " + quote(onnx) + " --batch 2 -o " + quote(project));
    ASSERT_EQ(imported.exitCode, 0) << imported.output;
    const auto single = runShell(std::string(kPython) + " " + quote(kHere / "export_gpt.py") + " reference 5");
    ASSERT_EQ(single.exitCode, 0) << single.output;
    const auto b = losses(single.output);
    ASSERT_EQ(b.size(), 5U) << single.output;
    EXPECT_LT(b.back(), b.front()) << "the model learns";
    struct Layout
    {
        int stages;
        int microBatches; // of 2 samples: replicas (2 / stages) x micro-batches x 2 = the batch of 8
    };
    for (const auto layout : { Layout { 2, 4 }, Layout { 1, 2 } }) {
        const auto label =
            std::to_string(layout.stages) + " stage(s) x " + std::to_string(2 / layout.stages) + " replica(s)";
        SCOPED_TRACE(label);
        const auto planned = cli("plan " + quote(project) + " --stages " + std::to_string(layout.stages)
            + " --schedule 1f1b -m " + std::to_string(layout.microBatches) + " --device cpu --json");
        ASSERT_EQ(planned.exitCode, 0) << planned.output;
        const auto plans = nlohmann::json::parse(planned.output);
        ASSERT_FALSE(plans.empty());
        const auto id = plans[0].value("plan_id", std::int64_t { 0 });
        ASSERT_GT(id, 0) << planned.output;
        const auto out = m_dir / ("torch run " + std::to_string(layout.stages));
        const auto exported =
            cli("export " + quote(project) + " --plan " + std::to_string(id) + " --format torchrun -o " + quote(out));
        ASSERT_EQ(exported.exitCode, 0) << exported.output;

        // Debian's torch 1.13, and a torch 2.x where PS_TORCH2_PYTHON names one (a venv): the same runner.
        std::vector<std::string> pythons { kPython };
        if (const char* torch2 = std::getenv("PS_TORCH2_PYTHON"); torch2 != nullptr && *torch2 != '\0')
            pythons.push_back(std::string("PYTHONDONTWRITEBYTECODE=1 ") + torch2);
        for (const auto& python : pythons) {
            SCOPED_TRACE(python);
            // torchrun is `python3 -m torch.distributed.run`; --redirects/--tee 1 sidestep torch 1.13's
            // launcher failing on Python >= 3.11 with its defaults (Std.from_str("0") gives None there).
            const auto run = runShell("cd " + quote(m_dir) + " && OMP_NUM_THREADS=1 PYTHONPATH=" + quote(kHere) + " "
                + python + " -m torch.distributed.run --standalone --nnodes 1 --nproc_per_node 2 --redirects 1"
                + " --tee 1 --log_dir " + quote(m_dir / "logs") + " " + quote(out / "run_pipeline.py")
                + " --model export_gpt:build_model --steps 5");
            ASSERT_EQ(run.exitCode, 0) << run.output;
            const auto a = losses(run.output);
            ASSERT_EQ(a.size(), 5U) << run.output; // one line per step: replica 0's last stage
            for (std::size_t i = 0; i < a.size(); ++i)
                EXPECT_NEAR(a[i], b[i], 1e-5) << "step " << i;
            if (layout.stages == 2) {
                EXPECT_NE(run.output.find("stage 1 starts at fx node"), std::string::npos) << run.output;
            }
        }
    }
}

} // namespace
