// Trace interop through the CLI: the Chrome traces `simulate --trace` and `trace` write, and
// `import-trace` with good and wrong files (which must leave the project untouched).
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sys/wait.h>

namespace fs = std::filesystem;

namespace {

using ps::e2e::CliResult;
using ps::e2e::runCli;

void execSql(const std::string& path, const std::string& sql)
{
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
}

struct ChromeCounts
{
    std::size_t complete = 0; // "X"
    std::size_t processes = 0; // "M" process_name
    std::size_t threads = 0; // "M" thread_name
    std::size_t counters = 0; // "C"
};

// Parses a Chrome trace, checks every event has what Perfetto needs, and counts them by kind.
ChromeCounts countChromeEvents(const fs::path& path)
{
    const auto j = nlohmann::json::parse(ps::e2e::readFile(path));
    ChromeCounts c;
    EXPECT_TRUE(j["traceEvents"].is_array());
    for (const auto& e : j["traceEvents"]) {
        const auto ph = e.at("ph").get<std::string>();
        EXPECT_TRUE(e.at("name").is_string()) << e.dump();
        EXPECT_TRUE(e.at("pid").is_number_integer()) << e.dump();
        if (ph == "X") {
            ++c.complete;
            EXPECT_TRUE(e.at("tid").is_number_integer()) << e.dump();
            EXPECT_GE(e.at("ts").get<double>(), 0) << e.dump();
            EXPECT_GE(e.at("dur").get<double>(), 0) << e.dump();
        } else if (ph == "M") {
            (e["name"] == "process_name" ? c.processes : c.threads) += 1;
        } else {
            EXPECT_EQ(ph, "C") << e.dump();
            ++c.counters;
        }
    }
    return c;
}

class TraceCli : public ps::e2e::ScratchTest
{
protected:
    void SetUp() override
    {
        ScratchTest::SetUp();
        m_project = file("p.pstudio");
        const auto created = runCli("new -m mlp --layers 2 --hidden 16 --vocab 4 --dropout 0 -b 4 -o " + m_project);
        ASSERT_EQ(created.exitCode, 0) << created.output;
    }
    // `import-trace` with `trace` fails with one line naming it, and the project stays byte-identical.
    void expectRefused(const std::string& trace, const std::string& message)
    {
        const auto before = ps::e2e::readFile(m_project);
        const auto r = runCli("import-trace " + m_project + " " + trace);
        EXPECT_NE(r.exitCode, 0) << r.output;
        EXPECT_NE(r.output.find(fs::path(trace).filename().string()), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
        EXPECT_EQ(ps::e2e::readFile(m_project), before) << trace;
    }

    std::string m_project;
};

} // namespace

TEST_F(TraceCli, SimulateTraceIsAChromeTraceWithAnEventPerAction)
{
    const auto trace = file("sim.json");
    const auto r = runCli("simulate " + m_project
        + " --stages 2 --schedule 1f1b --micro-batches 4 --device a100-40gb --json --no-save --trace " + trace);
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto summary = nlohmann::json::parse(r.output);
    const auto c = countChromeEvents(trace);
    EXPECT_EQ(c.processes, 2U); // one per device
    EXPECT_EQ(c.threads, 2U * 4); // compute, two copy streams, send
    // One "X" event per simulated action (zero-time local sends left out), at least F and B of
    // every micro-batch on every stage.
    EXPECT_LE(c.complete, summary["events"].get<std::size_t>());
    EXPECT_GE(c.complete, 2U * 4 * 2);
    const auto j = nlohmann::json::parse(ps::e2e::readFile(trace));
    std::size_t forwards = 0;
    for (const auto& e : j["traceEvents"])
        forwards += e["ph"] == "X" && e["name"].get<std::string>().starts_with("F") ? 1 : 0;
    EXPECT_EQ(forwards, 2U * 4); // F0..F3 on both stages
}

TEST_F(TraceCli, RunTraceHasEveryStoredEventOfTheIteration)
{
    const auto p = file("gpt.pstudio"); // the trainer feeds language models
    ASSERT_EQ(runCli("new -m gpt2-tiny --layers 2 --seq 16 -b 2 -o " + p).exitCode, 0);
    const auto train = runCli("train " + p + " --devices cpu:2 --micro-batches 2 --steps 1");
    ASSERT_EQ(train.exitCode, 0) << train.output;
    EXPECT_NE(train.output.find("timeline: host clock around each action"), std::string::npos) << train.output;
    // A kernel trace is for GPUs: asked for on CPU devices, refused before anything runs.
    EXPECT_TRUE(failedSaying(
        runCli("train " + p + " --devices cpu:2 --micro-batches 2 --steps 1 --timeline cupti"), "runs on the CPU"));
    const auto r = runCli("trace " + p + " -o " + file("run.json"));
    ASSERT_EQ(r.exitCode, 0) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex("Wrote (\\d+) events"))) << r.output;
    const auto written = std::stoul(m[1]);
    EXPECT_EQ(static_cast<std::int64_t>(written),
        ps::e2e::queryInt(p,
            "SELECT count(*) FROM events WHERE run_id = 1 AND iteration = "
            "(SELECT min(iteration) FROM events WHERE run_id = 1)"));
    const auto c = countChromeEvents(file("run.json"));
    EXPECT_EQ(c.processes, 2U);
    EXPECT_GT(c.complete, 0U);
    EXPECT_LE(c.complete, written);
}

TEST_F(TraceCli, ImportTraceStoresAnImportedProfile)
{
    std::ofstream(file("t.json")) << R"({"schemaVersion": 1, "traceEvents": [
      {"ph": "X", "cat": "user_annotation", "name": "layers.0", "pid": 1, "tid": 1, "ts": 0, "dur": 100},
      {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 50},
      {"ph": "X", "cat": "user_annotation", "name": "head.matmul.backward", "pid": 1, "tid": 1, "ts": 200, "dur": 40},
      {"ph": "X", "cat": "cpu_op", "name": "aten::zeros", "pid": 1, "tid": 1, "ts": 300, "dur": 5}
    ]})";
    const auto dry = runCli("import-trace " + m_project + " " + file("t.json") + " --dry-run");
    ASSERT_EQ(dry.exitCode, 0) << dry.output;
    EXPECT_NE(dry.output.find("Nodes matched  4 of 9"), std::string::npos) << dry.output;
    EXPECT_NE(dry.output.find("Coverage       96.6% of the forward and backward time"), std::string::npos)
        << dry.output;
    EXPECT_EQ(ps::e2e::queryInt(m_project, "SELECT count(*) FROM profiles WHERE source = 'imported'"), 0);
    // Below the coverage asked for, nothing is stored and the error says what the trace covered.
    const auto low = runCli("import-trace " + m_project + " " + file("t.json") + " --min-coverage 0.99");
    EXPECT_NE(low.exitCode, 0);
    EXPECT_NE(low.output.find("only 96.6% of its forward and backward time maps to nodes"), std::string::npos)
        << low.output;
    EXPECT_NE(low.output.find("aten::zeros"), std::string::npos) << low.output;
    EXPECT_EQ(ps::e2e::queryInt(m_project, "SELECT count(*) FROM profiles WHERE source = 'imported'"), 0);

    const auto r = runCli("import-trace " + m_project + " " + file("t.json") + " --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["format"], "kineto-json");
    EXPECT_EQ(j["device"], "cpu");
    EXPECT_EQ(j["nodes_matched"], 4); // layers.0's three nodes, head.matmul
    EXPECT_EQ(j["unmatched"], 1);
    EXPECT_DOUBLE_EQ(j["unmatched_ms"].get<double>(), 0.005);
    EXPECT_DOUBLE_EQ(j["total_ms"].get<double>(), 0.145);
    EXPECT_EQ(j["unmatched_names"][0]["name"], "aten::zeros");
    EXPECT_EQ(
        ps::e2e::queryInt(m_project, "SELECT count(*) FROM profiles WHERE source = 'imported' AND device_kind = 'cpu'"),
        ps::e2e::queryInt(m_project, "SELECT count(*) FROM nodes"));
    EXPECT_EQ(ps::e2e::queryInt(m_project,
                  "SELECT CAST(round(backward_ns) AS INTEGER) FROM profiles p JOIN nodes n ON n.id = p.node_id "
                  "WHERE p.source = 'imported' AND n.name = 'head.matmul'"),
        40000);

    // Planning with it fills the nodes the trace missed from the analytical model calibrated on the
    // four it has, and says so; `calibrate` fits and stores that model for --profile calibrated.
    const auto plan = runCli("plan " + m_project + " --device cpu --stages 2 --profile imported --no-save");
    ASSERT_EQ(plan.exitCode, 0) << plan.output;
    EXPECT_NE(
        plan.output.find("the trace missed filled from the analytical model calibrated on its 4"), std::string::npos)
        << plan.output;
    const auto fit = runCli("calibrate " + m_project + " --device cpu --profile imported --json --nodes 2");
    ASSERT_EQ(fit.exitCode, 0) << fit.output;
    const auto cj = nlohmann::json::parse(fit.output);
    EXPECT_EQ(cj["covered_nodes"], 4);
    EXPECT_FALSE(cj["classes"].empty());
    // --nodes: the two nodes the model misses by the most time, most first.
    ASSERT_EQ(cj["worst_nodes"].size(), 2u) << fit.output;
    const auto miss = [&cj](int k) {
        return std::abs(
            cj["worst_nodes"][k]["measured_ms"].get<double>() - cj["worst_nodes"][k]["analytical_ms"].get<double>());
    };
    EXPECT_GE(miss(0), miss(1));
    EXPECT_GT(cj["worst_nodes"][0]["measured_ms"].get<double>(), 0);
    EXPECT_EQ(ps::e2e::queryInt(m_project, "SELECT count(DISTINCT node_id) FROM profiles WHERE source = 'calibrated'"),
        ps::e2e::queryInt(m_project, "SELECT count(*) FROM nodes"));
    const auto sim = runCli("simulate " + m_project + " --device cpu --stages 2 --profile calibrated --no-save");
    EXPECT_EQ(sim.exitCode, 0) << sim.output;
    EXPECT_TRUE(
        failedSaying(runCli("calibrate " + m_project + " --device cpu --profile analytical"), "measured or imported"));
}

// A real PyTorch profiler trace of a training step (torch 2.15, CPU; recorded by
// tests/data/make_torch_step_trace.py) becomes the imported profile and a run whose timeline
// `compare` predicts from that profile: iteration within 10%, no memory to compare.
TEST_F(TraceCli, TorchTrainingStepTraceBecomesARunThatCompareHoldsThePredictionAgainst)
{
    const auto p = file("mlp.pstudio");
    ASSERT_EQ(runCli("new -m mlp --layers 4 --hidden 1024 --vocab 1000 -b 128 --dropout 0 -o " + p).exitCode, 0);
    const std::string trace = PS_SOURCE_DIR "/tests/data/traces/mlp_train_step_cpu.json";
    const auto r = runCli("import-trace " + p + " " + trace + " --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["nodes_matched"], 15);
    ASSERT_EQ(j["iterations"].size(), 3U);
    EXPECT_EQ(j["iterations"][0]["actions"].size(), 5U); // F0 B0 F1 B1 OPT_STEP
    ASSERT_TRUE(j["run"].is_number_integer()) << r.output;
    const auto run = j["run"].get<std::int64_t>();
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(*) FROM run_metrics WHERE run_id = " + std::to_string(run)), 3);
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(*) FROM events WHERE run_id = " + std::to_string(run)), 15);

    const auto c = runCli("compare " + p + " --json");
    ASSERT_EQ(c.exitCode, 0) << c.output;
    const auto cj = nlohmann::json::parse(c.output);
    EXPECT_EQ(cj["profile"], "imported");
    EXPECT_EQ(cj["schedule"], "1f1b"); // accumulation: F B F B on one device
    EXPECT_LT(std::abs(cj["iteration_error"].get<double>()), 0.10) << c.output;
    EXPECT_TRUE(cj["devices"][0]["measured_peak_bytes"].is_null()); // a trace of times records no memory
    const auto text = runCli("compare " + p);
    EXPECT_NE(text.output.find("not measured"), std::string::npos) << text.output;
    const auto analytical = runCli("compare " + p + " --profile analytical --json");
    ASSERT_EQ(analytical.exitCode, 0) << analytical.output;
    EXPECT_EQ(nlohmann::json::parse(analytical.output)["profile"], "analytical on cpu");
    EXPECT_TRUE(failedSaying(runCli("compare " + p + " --profile calibrated"), "stores no 'calibrated' profile"));
}

TEST_F(TraceCli, ImportTraceRefusesWrongFilesAndLeavesTheProjectUntouched)
{
    std::mt19937 rng(11);
    std::string bytes(4096, '\0');
    for (auto& c : bytes)
        c = static_cast<char>(rng());
    std::ofstream(file("noise.bin"), std::ios::binary) << bytes;
    expectRefused(file("noise.bin"), "is neither an Nsight Systems SQLite export nor a PyTorch profiler JSON trace");

    ASSERT_EQ(runCli("new -m mlp --layers 1 -o " + file("other.pstudio")).exitCode, 0);
    expectRefused(file("other.pstudio"), "is a PipeStudio project, not a trace");

    execSql(file("foreign.sqlite"), "CREATE TABLE t(x); INSERT INTO t VALUES (1);");
    expectRefused(file("foreign.sqlite"), "is an SQLite database but not an Nsight Systems export");

    execSql(file("future.sqlite"),
        "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
        "CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);"
        "INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '7.2.0');");
    expectRefused(file("future.sqlite"), "schema version '7.2.0' is unknown");

    std::ofstream(file("settings.json")) << R"({"theme": "dark", "recent": []})";
    expectRefused(file("settings.json"), "is JSON but not a Chrome or PyTorch profiler trace");

    std::ofstream(file("unrelated.json"))
        << R"([{"ph": "X", "name": "train_step", "ts": 0, "dur": 9, "pid": 1, "tid": 1}])";
    expectRefused(file("unrelated.json"), "no range names a node or scope of the model");

    expectRefused(file("missing.json"), "cannot read");
}

// One PyTorch profiler trace per pipeline rank (the GPT trained as two stages by two gloo
// processes; tests/data/make_trace_models.py, the `trace_models` fixture): `--cuts` says where
// stage 1 starts (by name here), each trace aligns with its stage's nodes, the profile takes every
// node from its own stage, and the run is one device per rank that `compare` predicts.
TEST_F(TraceCli, PipelineRankTracesImportByStageWithCuts)
{
    const char* dir = std::getenv("PS_TRACE_MODELS");
    if (dir == nullptr || !std::filesystem::exists(std::filesystem::path(dir) / "gpt.rank1.cpu.trace.json"))
        GTEST_SKIP() << "no pipeline traces of the GPT (tests/data/make_trace_models.py needs python3-torch)";
    const std::string models = dir;
    const auto p = file("gpt.pstudio");
    ASSERT_EQ(runCli("import " + models + "/gpt.onnx -o " + p + " --loss cross-entropy").exitCode, 0);
    const auto traces = " " + models + "/gpt.rank0.cpu.trace.json " + models + "/gpt.rank1.cpu.trace.json";
    const auto uncut = runCli("import-trace " + p + traces);
    EXPECT_NE(uncut.exitCode, 0);
    EXPECT_NE(uncut.output.find("2 traces: say where their stages start with --cuts"), std::string::npos)
        << uncut.output;
    const auto unknown = runCli("import-trace " + p + traces + " --cuts /h.9/ln_1/LayerNormalization");
    EXPECT_NE(unknown.exitCode, 0);
    EXPECT_NE(unknown.output.find("--cuts: no node named '/h.9/ln_1/LayerNormalization'"), std::string::npos)
        << unknown.output;
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(*) FROM runs"), 0); // refusals write nothing

    const auto r = runCli("import-trace " + p + traces + " --cuts /h.1/ln_1/LayerNormalization --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    ASSERT_EQ(j["stages"].size(), 2U);
    EXPECT_EQ(j["stages"][0]["end_node"], j["stages"][1]["first_node"]);
    for (const auto& s : j["stages"]) {
        EXPECT_GE(s["coverage"].get<double>(), 0.85) << s;
        EXPECT_GT(s["communication_ms"].get<double>(), 0) << s;
    }
    EXPECT_GE(j["coverage"].get<double>(), 0.85);
    ASSERT_TRUE(j["run"].is_number_integer()) << r.output;
    const auto run = std::to_string(j["run"].get<std::int64_t>());
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(DISTINCT device) FROM events WHERE run_id = " + run), 2);
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(*) FROM run_metrics WHERE run_id = " + run), 3);

    const auto c = runCli("compare " + p + " --run " + run + " --json");
    ASSERT_EQ(c.exitCode, 0) << c.output;
    const auto cj = nlohmann::json::parse(c.output);
    EXPECT_EQ(cj["profile"], "imported");
    EXPECT_EQ(cj["devices"].size(), 2U);
}

// A torch 2.15 trace recorded with with_stack (tests/data/make_module_trace.py) of the corpus GPT
// torch.export wrote (tests/data/onnx_torch2/gpt_sdpa_gelu_tanh.onnx): its "nn.Module: Block_1"
// calls are named after the model's modules, the operators inside are aligned to their nodes, and
// the Python functions' time is not taken for work.
TEST_F(TraceCli, WithStackTraceNamesModuleCallsAfterTheModelsModules)
{
    const auto p = file("gpt.pstudio");
    const auto imported =
        runCli("import " PS_SOURCE_DIR "/tests/data/onnx_torch2/gpt_sdpa_gelu_tanh.onnx --loss cross-entropy -o " + p);
    ASSERT_EQ(imported.exitCode, 0) << imported.output;
    const std::string trace = PS_SOURCE_DIR "/tests/data/traces/gpt_with_stack_cpu.json.gz";
    const auto r = runCli("import-trace " + p + " " + trace + " --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    // 17 module instances x 3 steps: emb, blocks.{0,1} with ln1, ln2, qkv, o, f1, f2, ln, head.
    EXPECT_EQ(j["modules"], 17);
    EXPECT_EQ(j["module_ranges"], 51);
    // The position table's lookup was folded into a constant by the export: its module has no node.
    ASSERT_EQ(j["modules_not_named"].size(), 1U) << r.output;
    EXPECT_NE(j["modules_not_named"][0].get<std::string>().find("Embedding_1 (no aligned operator inside"),
        std::string::npos);
    EXPECT_TRUE(j["aligned_by_operator_order"].get<bool>());
    EXPECT_GT(j["coverage"].get<double>(), 0.85) << r.output; // 91.3%: gradient accumulation is the rest
    EXPECT_GE(j["nodes_matched"].get<int>(), 55);
    ASSERT_EQ(j["iterations"].size(), 3U); // ProfilerStep ranges
    const auto text = runCli("import-trace " + p + " " + trace + " --dry-run");
    EXPECT_NE(text.output.find("51 named after 17 modules of the model"), std::string::npos) << text.output;
}
