// Runs the pipestudio executable as a user would and checks its output, exit codes and files.
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <sys/wait.h>

namespace fs = std::filesystem;

namespace {

using ps::e2e::CliResult;
using ps::e2e::readFile;
using ps::e2e::runCli;

class Cli : public ps::e2e::ScratchTest
{
protected:
    nlohmann::json infoJson(const std::string& model)
    {
        const auto p = file(model + ".pstudio");
        const auto created = runCli("new --model " + model + " -o " + p);
        EXPECT_EQ(created.exitCode, 0) << created.output;
        const auto info = runCli("info " + p + " --json");
        EXPECT_EQ(info.exitCode, 0) << info.output;
        return nlohmann::json::parse(info.output);
    }
};

double relativeError(double value, double target)
{
    return std::abs(value / target - 1.0);
}

} // namespace

TEST_F(Cli, VersionAndHelp)
{
    const auto v = runCli("--version");
    EXPECT_EQ(v.exitCode, 0);
    EXPECT_NE(v.output.find("pipestudio 0."), std::string::npos) << v.output;
    for (const char* cmd : { "--help", "new --help", "info --help", "devices --help", "zoo --help", "demo --help" }) {
        const auto h = runCli(cmd);
        EXPECT_EQ(h.exitCode, 0) << cmd;
        EXPECT_NE(h.output.find("Usage"), std::string::npos) << cmd << ": " << h.output;
    }
}

TEST_F(Cli, Gpt2XlAndSmallParameterCounts)
{
    EXPECT_LT(relativeError(infoJson("gpt2-xl")["parameters"].get<double>(), 1558e6), 0.01);
    EXPECT_LT(relativeError(infoJson("gpt2-small")["parameters"].get<double>(), 124e6), 0.01);
}

TEST_F(Cli, BertLargeAndT5_3bParameterCounts)
{
    // Exact reference counts (Hugging Face); "340M" and "~2.9B" are the papers' rounded figures.
    const auto bert = infoJson("bert-large");
    EXPECT_EQ(bert["parameters"].get<std::int64_t>(), 336'226'108);
    EXPECT_LT(relativeError(bert["parameters"].get<double>(), 340e6), 0.015);
    const auto t5 = infoJson("t5-3b");
    EXPECT_EQ(t5["parameters"].get<std::int64_t>(), 2'851'598'336);
    EXPECT_LT(relativeError(t5["parameters"].get<double>(), 2.9e9), 0.02);
}

TEST_F(Cli, InfoReportsEverythingTheIssueAsksFor)
{
    const auto created = runCli("new --model gpt2-medium --seq 512 --micro-batch 4 -o " + file("m.pstudio"));
    ASSERT_EQ(created.exitCode, 0) << created.output;
    const auto j = nlohmann::json::parse(runCli("info " + file("m.pstudio") + " --json").output);
    EXPECT_EQ(j["micro_batch"], 4);
    EXPECT_GT(j["nodes"].get<int>(), 24 * 20);
    EXPECT_GT(j["forward_flops_per_sample"].get<double>(), 2 * 300e6 * 512);
    EXPECT_GT(j["activation_bytes_per_sample"].get<double>(), 0);
    EXPECT_EQ(j["op_histogram"]["Softmax"], 24);
    const auto text = runCli("info " + file("m.pstudio"));
    EXPECT_EQ(text.exitCode, 0);
    EXPECT_NE(text.output.find("Parameters"), std::string::npos);
    EXPECT_NE(text.output.find("MatMul"), std::string::npos);
}

TEST_F(Cli, RandomBytesFailCleanlyAndStayIdentical)
{
    std::mt19937 rng(7);
    std::string bytes(4096, '\0');
    for (auto& c : bytes)
        c = static_cast<char>(rng());
    std::ofstream(file("junk.pstudio"), std::ios::binary) << bytes;
    EXPECT_TRUE(failedSaying(runCli("info " + file("junk.pstudio")), "junk.pstudio' is not a PipeStudio project"));
    EXPECT_EQ(readFile(file("junk.pstudio")), bytes);
}

TEST_F(Cli, ForeignSqliteFailsCleanlyAndStaysIdentical)
{
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file("other.sqlite").c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES (1);", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    const auto before = readFile(file("other.sqlite"));
    EXPECT_TRUE(failedSaying(runCli("info " + file("other.sqlite")), "not a PipeStudio project"));
    EXPECT_EQ(readFile(file("other.sqlite")), before);
}

TEST_F(Cli, BadArgumentsGiveClearErrors)
{
    EXPECT_TRUE(failedSaying(runCli("new --model gpt5 -o " + file("x.pstudio")), "unknown zoo model 'gpt5'"));
    EXPECT_FALSE(fs::exists(file("x.pstudio")));
    EXPECT_TRUE(
        failedSaying(runCli("new --model gpt2-small --heads 5 -o " + file("x.pstudio")), "not divisible by heads"));
    EXPECT_NE(runCli("info").exitCode, 0);
    EXPECT_NE(runCli("frobnicate").exitCode, 0);
}

TEST_F(Cli, NewRefusesToOverwriteWithoutForce)
{
    ASSERT_EQ(runCli("new --model mlp -o " + file("p.pstudio")).exitCode, 0);
    const auto again = runCli("new --model mlp --layers 2 -o " + file("p.pstudio"));
    EXPECT_NE(again.exitCode, 0);
    EXPECT_NE(again.output.find("already exists"), std::string::npos);
    EXPECT_EQ(runCli("new --model mlp --layers 2 --force -o " + file("p.pstudio")).exitCode, 0);
    const auto j = nlohmann::json::parse(runCli("info --json " + file("p.pstudio")).output);
    EXPECT_EQ(j["layers"], 2);
}

TEST_F(Cli, DemoRunsHeadless)
{
    const auto r = runCli("demo --dir " + file("demo"));
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("identical after reload: yes"), std::string::npos) << r.output;
    EXPECT_TRUE(fs::exists(file("demo") + "/gpt2-medium.pstudio"));
    EXPECT_NE(r.output.find("5. Training a 2-layer"), std::string::npos) << r.output; // exit 0 means the loss fell
}

TEST_F(Cli, DevicesListsTheCpu)
{
    const auto r = runCli("devices --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["devices"][0]["kind"], "cpu");
    EXPECT_EQ(j["profilers"][0]["name"], "cpu-timers");
    // The GEMM library and its kernels; where PipeStudio replaced OpenBLAS's choice, that choice.
    ASSERT_TRUE(j.contains("blas")) << r.output;
    EXPECT_FALSE(j["blas"]["core"].get<std::string>().empty()) << r.output;
    if (j["blas"].contains("detected_core")) {
        EXPECT_NE(j["blas"]["detected_core"], j["blas"]["core"]) << r.output;
    }
    // The CUDA backend's ops where it is built (this build says so), none where it is not.
    ASSERT_TRUE(j.contains("cuda_backend_ops")) << r.output;
    const auto& ops = j["cuda_backend_ops"];
    EXPECT_EQ(ops.empty(), !j["cuda_built"].get<bool>()) << r.output;
    if (!ops.empty()) {
        EXPECT_NE(std::find(ops.begin(), ops.end(), "MatMul"), ops.end()) << r.output;
    }
}

// An OPENBLAS_CORETYPE from the environment is kept, and where it pins kernels narrower than the CPU
// runs, `devices` names the wider core and says how to get it.
TEST_F(Cli, DevicesNamesAnEnvironmentPinBelowTheCpu)
{
    // With OpenBLAS's GEMMs (PS_CPU_GEMM=openblas) the pin matters, and `devices` says so.
    const std::string env = "env -u PS_BLAS_CORE_DETECTED -u PS_CPU_GEMM OPENBLAS_CORETYPE=Prescott ";
    const std::string pinned = env + PS_CLI_PATH;
    const std::string openblas = env + "PS_CPU_GEMM=openblas " + PS_CLI_PATH;
    const auto r = ps::e2e::runShell(openblas + " devices --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["blas"]["cpu_gemm"], "openblas") << r.output;
    if (j["blas"]["library"].get<std::string>().find("DYNAMIC_ARCH") == std::string::npos)
        GTEST_SKIP() << "this OpenBLAS is built for one core type";
    EXPECT_EQ(j["blas"]["core"], "Prescott") << r.output;
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        GTEST_SKIP() << "this CPU runs no kernels wider than Prescott's";
    ASSERT_TRUE(j["blas"].contains("wider_core")) << r.output;
    const auto wider = j["blas"]["wider_core"].get<std::string>();
    EXPECT_TRUE(wider == "Haswell" || wider == "SkylakeX") << wider;
    const std::string advice = "OPENBLAS_CORETYPE=Prescott (set in the environment) runs narrower GEMM kernels than "
                               "this CPU's "
        + wider;
    const auto text = ps::e2e::runShell(openblas + " devices");
    EXPECT_NE(text.output.find(advice), std::string::npos) << text.output;
    EXPECT_NE(text.output.find("CPU GEMM: OpenBLAS"), std::string::npos) << text.output;
    // On an AVX-512 CPU the engine's own kernels run its GEMMs by default: the pin no longer
    // slows them, and no advice is given.
    if (!__builtin_cpu_supports("avx512f"))
        return;
    const auto packed = ps::e2e::runShell(pinned + " devices");
    EXPECT_EQ(packed.output.find(advice), std::string::npos) << packed.output;
    EXPECT_NE(packed.output.find("CPU GEMM: PipeStudio's packed AVX-512 kernels"), std::string::npos) << packed.output;
    const auto packedJson = nlohmann::json::parse(ps::e2e::runShell(pinned + " devices --json").output);
    EXPECT_EQ(packedJson["blas"]["cpu_gemm"], "packed");
#endif
}

TEST_F(Cli, EstimateAndSimulateAPlan)
{
    const auto p = file("m.pstudio");
    ASSERT_EQ(runCli("new --model gpt2-small --seq 256 --micro-batch 2 -o " + p).exitCode, 0);
    const auto est = runCli("estimate " + p + " --device a100-40gb --micro-batch 4 --json");
    ASSERT_EQ(est.exitCode, 0) << est.output;
    EXPECT_GT(nlohmann::json::parse(est.output)["forward_ms"].get<double>(), 0);

    const auto trace = file("trace.json");
    const auto sim =
        runCli("simulate " + p + " --stages 4 --schedule kfkb:2 --micro-batches 8 --device a100-40gb --json --trace "
            + trace + " --csv " + file("schedule.csv"));
    ASSERT_EQ(sim.exitCode, 0) << sim.output;
    const auto j = nlohmann::json::parse(sim.output);
    EXPECT_EQ(j["schedule"], "kfkb:2");
    EXPECT_EQ(j["devices"].size(), 4U);
    EXPECT_GT(j["iteration_ms"].get<double>(), 0);
    std::ifstream in(trace);
    const auto chrome = nlohmann::json::parse(in);
    EXPECT_GT(chrome["traceEvents"].size(), 4U * 8 * 2);
    EXPECT_TRUE(fs::exists(file("schedule.csv")));

    // The same cuts from the CLI give the same iteration time on a second run.
    const auto cuts = j["cuts"].get<std::string>();
    const auto again = nlohmann::json::parse(
        runCli("simulate " + p + " --stages 4 --schedule kfkb:2 --micro-batches 8 --json --no-save --cuts " + cuts)
            .output);
    EXPECT_DOUBLE_EQ(again["iteration_ms"].get<double>(), j["iteration_ms"].get<double>());
}

TEST_F(Cli, SimulateRejectsImpossiblePlans)
{
    const auto p = file("m.pstudio");
    ASSERT_EQ(runCli("new --model mlp -o " + p).exitCode, 0);
    EXPECT_TRUE(failedSaying(runCli("simulate " + p + " --stages 4 --cuts 3,2,1"), "strictly increasing"));
    EXPECT_TRUE(failedSaying(runCli("simulate " + p + " --stages 2 --schedule kfkb:9 --micro-batches 4"),
        "k must be between 1 and the number of micro-batches"));
    std::ofstream(file("c.json"))
        << R"({"device": "a100-40gb", "nodes": 2, "devices_per_node": 1, "inter_node": {"bandwidth": 0}})";
    EXPECT_TRUE(
        failedSaying(runCli("simulate " + p + " --stages 2 --cluster " + file("c.json")), "zero or invalid bandwidth"));
}

TEST_F(Cli, PlanAndMaxBatch)
{
    const auto p = file("m.pstudio");
    ASSERT_EQ(runCli("new --model gpt2-small --seq 512 --micro-batch 8 -o " + p).exitCode, 0);
    const auto planned =
        runCli("plan " + p + " --algo all --stages 4 --schedule 1f1b --micro-batches 8 --memory-limit 6GiB --json");
    ASSERT_EQ(planned.exitCode, 0) << planned.output;
    const auto plans = nlohmann::json::parse(planned.output);
    ASSERT_GE(plans.size(), 6U);
    for (const auto& plan : plans) {
        if (plan["feasible"].get<bool>()) {
            EXPECT_FALSE(plan["simulation"]["out_of_memory"].get<bool>()) << plan["algorithm"];
        } else {
            EXPECT_FALSE(plan["reason"].get<std::string>().empty());
        }
        EXPECT_GT(plan["plan_id"].get<int>(), 0);
    }
    const auto text =
        runCli("plan " + p + " --algo dawnpiper --stages 4 --micro-batches 8 --no-swap --no-recompute --no-save");
    EXPECT_EQ(text.exitCode, 0) << text.output;
    EXPECT_NE(text.output.find("dawnpiper"), std::string::npos);

    const auto mb = runCli("maxbatch " + p + " --stages 4 --device a100-40gb --upper-limit 256 --json");
    ASSERT_EQ(mb.exitCode, 0) << mb.output;
    const auto rows = nlohmann::json::parse(mb.output);
    EXPECT_EQ(rows[0]["algorithm"], "dawnpiper (swap+recompute)");
    EXPECT_GE(rows[0]["max_micro_batch"].get<int>(), rows[1]["max_micro_batch"].get<int>());
    // A list, as --help says: one row per algorithm, in the order given, no data-parallel rows.
    const auto listed =
        runCli("maxbatch " + p + " --stages 4 --device a100-40gb --upper-limit 64 -a dawnpiper-paper,gpipe --json");
    ASSERT_EQ(listed.exitCode, 0) << listed.output;
    const auto two = nlohmann::json::parse(listed.output);
    ASSERT_EQ(two.size(), 2U);
    EXPECT_EQ(two[0]["algorithm"], "dawnpiper-paper");
    EXPECT_EQ(two[1]["algorithm"], "gpipe");
    EXPECT_GT(two[1]["max_micro_batch"].get<int>(), 0);

    const auto bad = runCli("plan " + p + " --algo magic");
    EXPECT_NE(bad.exitCode, 0);
    EXPECT_NE(bad.output.find("unknown planning algorithm 'magic'"), std::string::npos);
    EXPECT_NE(runCli("plan " + p + " --memory-limit lots").exitCode, 0);
}

TEST_F(Cli, SearchRanksSchedulesAndSizesAndStoresTheBest)
{
    const auto p = file("s.pstudio");
    ASSERT_EQ(runCli("new --model gpt2-small --layers 4 --seq 256 -o " + p).exitCode, 0);
    const auto searched = runCli("search " + p
        + " --stages 4 --global-batch 16 --micro-batch-sizes 1,2,4,3 --schedules 1f1b,kfkb:2,zb-h1"
          " --algo dawnpiper,dawnpiper-paper --save 2 --top 100 --json");
    ASSERT_EQ(searched.exitCode, 0) << searched.output;
    const auto plans = nlohmann::json::parse(searched.output);
    EXPECT_EQ(plans.size(), 3U * 3U * 2U); // 3 sizes divide 16, 3 schedules, 2 algorithms
    double previous = 1e300;
    int stored = 0;
    for (const auto& plan : plans) {
        ASSERT_TRUE(plan["feasible"].get<bool>()) << plan.dump();
        const double throughput = plan["simulation"]["samples_per_second"].get<double>();
        EXPECT_LE(throughput, previous * (1 + 1e-12));
        previous = throughput;
        EXPECT_EQ(plan["micro_batches"].get<int>() * plan["micro_batch"].get<double>(), 16.0);
        stored += plan.contains("plan_id") ? 1 : 0;
        if (plan["algorithm"] == "dawnpiper") {
            EXPECT_FALSE(plan["seed"].get<std::string>().empty());
        }
    }
    EXPECT_EQ(stored, 2);

    const auto text = runCli("search " + p + " --stages 2 --schedules gpipe --no-save");
    EXPECT_EQ(text.exitCode, 0) << text.output;
    EXPECT_NE(text.output.find("samples/s"), std::string::npos);
    EXPECT_TRUE(
        failedSaying(runCli("search " + p + " --global-batch 7 --micro-batch-sizes 2 --no-save"), "global batch of 7"));
    EXPECT_NE(runCli("search " + p + " --micro-batch-sizes 0 --no-save").exitCode, 0);

    const auto autoK = runCli("search " + p
        + " --stages 4 --global-batch 16 --schedules kfkb:auto --algo gpipe --no-save "
          "--top 100 --json");
    ASSERT_EQ(autoK.exitCode, 0) << autoK.output;
    std::set<std::string> kinds;
    for (const auto& plan : nlohmann::json::parse(autoK.output))
        kinds.insert(plan["schedule"].get<std::string>());
    EXPECT_TRUE(kinds.contains("kfkb:1") && kinds.contains("kfkb:8")) << autoK.output.substr(0, 400);

    const auto grouping = runCli("grouping " + p
        + " --stages 4 --global-batch 32 --max-k 4 --preempt 20,0.05,0.5 "
          "--iterations 12 --interval 2 --json");
    ASSERT_EQ(grouping.exitCode, 0) << grouping.output;
    const auto g = nlohmann::json::parse(grouping.output);
    ASSERT_FALSE(g["candidates"].empty());
    EXPECT_EQ(g["adaptive"]["steps"].size(), 12U);
    EXPECT_EQ(g["fixed"].size(), g["candidates"].size());
    const auto badTrace = runCli("grouping " + p + " --global-batch 32 --preempt 20,2,0.5");
    EXPECT_NE(badTrace.exitCode, 0);
    EXPECT_NE(badTrace.output.find("--preempt"), std::string::npos);
}

TEST_F(Cli, ProfileStoresMeasuredCpuRowsForEveryNode)
{
    const auto p = file("prof.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-tiny --layers 1 --seq 16 -b 4 -o " + p).exitCode, 0);
    const auto r = runCli("profile " + p + " --repeats 2 --warmup 1");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_NE(r.output.find("measured training step"), std::string::npos) << r.output;
    const auto nodes = ps::e2e::queryInt(p, "SELECT count(*) FROM nodes");
    EXPECT_GT(nodes, 20);
    // By default at two thread counts (one, and every core) where the machine has several cores.
    const auto counts = ps::e2e::queryInt(p, "SELECT count(DISTINCT threads) FROM profiles");
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT min(threads) FROM profiles"), 1);
    EXPECT_EQ(counts, ps::e2e::queryInt(p, "SELECT max(threads) FROM profiles") > 1 ? 2 : 1);
    EXPECT_EQ(
        ps::e2e::queryInt(p, "SELECT count(*) FROM profiles WHERE source = 'measured-cpu' AND device_kind = 'cpu'"),
        2 * nodes * counts);
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(DISTINCT micro_batch) FROM profiles"), 2);
    // --threads N measures at N (beside co-runners where N is fewer than the cores) and replaces only
    // that count's rows.
    ASSERT_EQ(runCli("profile " + p + " --repeats 1 --warmup 0 --threads 1").exitCode, 0);
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(*) FROM profiles"), 2 * nodes * counts);
    // By default (and with --co-run) the other cores run copies of the step meanwhile, as a pipeline's
    // other devices would; --alone leaves them idle.
    const auto loaded = runCli("profile " + p + " --repeats 1 --warmup 0 --threads 1 --json");
    ASSERT_EQ(loaded.exitCode, 0) << loaded.output;
    const auto alone = runCli("profile " + p + " --repeats 1 --warmup 0 --threads 1 --json --alone");
    ASSERT_EQ(alone.exitCode, 0) << alone.output;
    const auto coRunners = [](const std::string& out) {
        return nlohmann::json::parse(out)["runs"][0]["co_runners"].get<int>();
    };
    EXPECT_EQ(coRunners(alone.output), 0);
    if (counts > 1) {
        EXPECT_GE(coRunners(loaded.output), 1) << loaded.output;
        EXPECT_NE(runCli("profile " + p + " --repeats 1 --warmup 0 --threads 1 --co-run")
                      .output.find(" of the step on the other cores"),
            std::string::npos);
    }
    EXPECT_EQ(ps::e2e::queryInt(p, "SELECT count(*) FROM profiles"), 2 * nodes * counts);
}

// A pipeline run's prediction takes the profile measured at its devices' thread count (each of
// cpu:2's devices gets half the cores) and says so.
TEST_F(Cli, CompareMatchesTheProfileToTheDevicesThreads)
{
    const auto p = file("threads.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-tiny --layers 2 --seq 16 -b 2 -o " + p).exitCode, 0);
    ASSERT_EQ(runCli("profile " + p + " --repeats 2 --warmup 1").exitCode, 0);
    ASSERT_EQ(runCli("train " + p + " --devices cpu:2 --schedule 1f1b --micro-batches 4 --steps 3").exitCode, 0);
    const auto c = runCli("compare " + p + " --json");
    ASSERT_EQ(c.exitCode, 0) << c.output;
    const auto profile = nlohmann::json::parse(c.output)["profile"].get<std::string>();
    const auto perDevice = std::max<long long>(1, ps::e2e::queryInt(p, "SELECT max(threads) FROM profiles") / 2);
    EXPECT_NE(profile.find("measured-cpu"), std::string::npos) << profile;
    EXPECT_NE(profile.find(std::to_string(perDevice) + (perDevice == 1 ? " thread per device" : " threads per device")),
        std::string::npos)
        << profile;
}

// `calibrate` fits the model at the thread count the profile was measured with: a profile of one
// thread per device against the CPU measured at one thread (not at every core), and says so; a
// count no profile was measured at is fitted against the nearest profile, with a note.
TEST_F(Cli, CalibrateFitsAtTheProfilesThreadCount)
{
    const auto p = file("calibrate.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-tiny --layers 1 --seq 16 -b 2 -o " + p).exitCode, 0);
    ASSERT_EQ(runCli("profile " + p + " --repeats 1 --warmup 0 --threads 1").exitCode, 0);
    const auto fit = runCli("calibrate " + p + " --no-save --json");
    ASSERT_EQ(fit.exitCode, 0) << fit.output;
    const auto j = nlohmann::json::parse(fit.output);
    EXPECT_EQ(j["threads"], 1) << fit.output;
    EXPECT_NE(j["profile_note"].get<std::string>().find("as the devices run"), std::string::npos) << fit.output;
    const auto other = runCli("calibrate " + p + " --no-save --threads 3");
    ASSERT_EQ(other.exitCode, 0) << other.output;
    EXPECT_NE(other.output.find("(3 threads, measured)"), std::string::npos) << other.output;
    EXPECT_NE(other.output.find("profile with --threads 3 to match"), std::string::npos) << other.output;
}

// plan, search, simulate and grouping plan with a stored profile when asked (--profile), and say so.
TEST_F(Cli, PlanningCommandsUseAStoredProfileWhenAsked)
{
    const auto p = file("stored.pstudio");
    ASSERT_EQ(runCli("new -m gpt2-tiny --layers 1 --seq 16 -b 4 -o " + p).exitCode, 0);
    const auto missing = runCli("simulate " + p + " --device cpu --stages 2 --profile measured --no-save");
    EXPECT_NE(missing.exitCode, 0);
    EXPECT_NE(missing.output.find("has no measured-cpu profile for device 'cpu'"), std::string::npos) << missing.output;
    EXPECT_NE(missing.output.find("pipestudio profile"), std::string::npos) << missing.output;
    ASSERT_EQ(runCli("profile " + p + " --repeats 2 --warmup 1").exitCode, 0);
    const auto simulate = [&](const std::string& profile) {
        const auto r = runCli("simulate " + p + " --device cpu --stages 2 --cuts 20 --no-save --json" + profile);
        EXPECT_EQ(r.exitCode, 0) << r.output;
        return nlohmann::json::parse(r.output);
    };
    const auto measured = simulate(" --profile measured");
    const auto analytical = simulate("");
    EXPECT_EQ(measured["profile"], "measured-cpu");
    EXPECT_EQ(analytical["profile"], "analytical");
    EXPECT_NE(measured["iteration_ms"].get<double>(), analytical["iteration_ms"].get<double>());
    const auto plan = runCli("plan " + p + " --device cpu --stages 2 --profile measured-cpu --no-save");
    ASSERT_EQ(plan.exitCode, 0) << plan.output;
    // Two stages on the cpu device: each gets half the cores, and the profile of that count.
    const auto perDevice = std::max<long long>(1, ps::e2e::queryInt(p, "SELECT max(threads) FROM profiles") / 2);
    EXPECT_NE(plan.output.find("profile measured-cpu for " + std::to_string(perDevice)
                  + (perDevice == 1 ? " thread" : " threads") + " per device (stored in the project"),
        std::string::npos)
        << plan.output;
    const auto search = runCli("search " + p
        + " --device cpu --stages 2 --schedules 1f1b --micro-batch-sizes 4 "
          "--global-batch 16 --profile measured");
    EXPECT_EQ(search.exitCode, 0) << search.output;
    EXPECT_TRUE(
        failedSaying(runCli("plan " + p + " --device a100-40gb --stages 2 --profile imported"), "import-trace"));
    // On a GPU, `measured` is the profile taken at the plan's precision, and the error says how to take it.
    const auto bf16 = runCli("plan " + p + " --device h100-80gb --stages 2 --precision bf16 --profile measured");
    EXPECT_NE(bf16.exitCode, 0);
    EXPECT_NE(bf16.output.find("no measured-cuda-bf16 profile for device 'h100-80gb'"), std::string::npos)
        << bf16.output;
    EXPECT_NE(bf16.output.find("--device cuda:0 --precision bf16"), std::string::npos) << bf16.output;
    // The CPU backend computes in fp32: a CPU profile at another precision is refused.
    EXPECT_TRUE(failedSaying(
        runCli("profile " + p + " --repeats 1 --warmup 0 --precision bf16"), "the CPU backend computes in fp32"));
}

TEST_F(Cli, MaxModelComparesPatrickStarWithItsBaselines)
{
    const auto r = runCli("maxmodel --device v100-32gb --gpus 1 --host-ram 240GiB --batch 4 --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    ASSERT_EQ(j["largest"].size(), 3U);
    std::vector<std::int64_t> params;
    for (const auto& row : j["largest"]) {
        ASSERT_FALSE(row["model"].is_null()) << row;
        params.push_back(row["parameters"].get<std::int64_t>());
        EXPECT_TRUE(row["estimate"]["feasible"].get<bool>());
    }
    EXPECT_EQ(j["largest"][0]["system"], "pytorch-ddp");
    EXPECT_LT(params[0], params[1]); // DDP < ZeRO-Offload < PatrickStar
    EXPECT_LT(params[1], params[2]);
    EXPECT_GT(j["largest"][2]["estimate"]["host_bytes"].get<double>(), 0);

    const auto text = runCli("maxmodel --gpus 8 --host-ram 120GiB --batch 4");
    ASSERT_EQ(text.exitCode, 0) << text.output;
    EXPECT_NE(text.output.find("patrickstar"), std::string::npos) << text.output;
    EXPECT_NE(text.output.find("8 x v100-32gb"), std::string::npos) << text.output;

    const auto tiny = runCli("maxmodel --gpus 1 --host-ram 1GiB --batch 4 --json");
    ASSERT_EQ(tiny.exitCode, 0) << tiny.output;
    const auto star = nlohmann::json::parse(tiny.output)["rungs"][0]["systems"][2];
    EXPECT_FALSE(star["feasible"].get<bool>());
    EXPECT_NE(star["reason"].get<std::string>().find("host RAM"), std::string::npos) << star;

    EXPECT_TRUE(failedSaying(runCli("maxmodel --host-ram plenty"), "'plenty' is not a size"));
}

TEST_F(Cli, GemmCheckFitsAndChecksTheGemmModel)
{
    const auto r = runCli("gemm-check --json");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_GE(j["checks"].get<int>(), 10);
    EXPECT_EQ(j["checks_within_15_percent"], j["checks"]);
    EXPECT_NEAR(j["fitted_efficiency"]["fp32"].get<double>(), 0.742, 0.001);
    // A user's own measurements: one point, refused with the file and point named when malformed.
    const auto mine = file("mine.json");
    std::ofstream(mine) << R"({"points": [{"id": "my gemm", "device": "a100-80gb", "math": "bf16",
        "gemms": [[1, 4096, 4096, 4096]], "measured_us": 600, "role": "check"}]})";
    const auto own = runCli("gemm-check --measurements " + mine);
    EXPECT_EQ(own.exitCode, 0) << own.output;
    EXPECT_NE(own.output.find("my gemm"), std::string::npos) << own.output;
    std::ofstream(mine) << R"({"points": [{"id": "bad", "device": "a100-80gb", "math": "bf16", "gemms": [[1, 4096]],
        "measured_us": 600, "role": "check"}]})";
    EXPECT_TRUE(failedSaying(runCli("gemm-check --measurements " + mine), "point 'bad'"));
}
