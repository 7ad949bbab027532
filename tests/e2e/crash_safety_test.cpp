// Crash safety of the project file, driven through the CLI:
// - `pipestudio train` killed by SIGKILL at seeded random points (one device, and a two-device 1F1B
//   pipeline): the file passes integrity_check, every step the child reported is stored, the run
//   becomes "interrupted" when the CLI next opens the project, and `train --resume` continues with
//   the losses of a run that was never interrupted;
// - a full disk while saving (a 256 KiB tmpfs; skipped when not root or mount fails): a clear error
//   and the previous project intact;
// - several processes writing one project at once: every write present, never a corrupt file.
#include "cli_support.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <sys/mount.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;

namespace {

using ps::e2e::queryInt;
using ps::e2e::readFile;
using ps::e2e::runCli;
using ps::e2e::runShell;

using ps::e2e::quote;

// The first column of the first row as text ("" when the query fails), opened read-only.
std::string queryText(const fs::path& path, const std::string& sql)
{
    sqlite3* db = nullptr;
    std::string out;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
            const auto* text = sqlite3_column_text(st, 0);
            out = text ? reinterpret_cast<const char*>(text) : "";
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return out;
}

std::map<std::int64_t, double> storedLosses(const fs::path& path, std::int64_t runId)
{
    std::map<std::int64_t, double> out;
    sqlite3* db = nullptr;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* st = nullptr;
        const std::string sql = "SELECT step, loss FROM run_metrics WHERE run_id = " + std::to_string(runId);
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
            while (sqlite3_step(st) == SQLITE_ROW)
                out[sqlite3_column_int64(st, 0)] = sqlite3_column_double(st, 1);
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return out;
}

// What a `train --json` child printed: its run id and the loss of every step it reported. A line
// cut short by the kill is not a report.
struct Reported
{
    std::int64_t runId = 0;
    std::map<std::int64_t, double> losses;
    bool finished = false;
};

Reported parseTrainJson(const std::string& text)
{
    Reported r;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        if (in.eof() && !text.ends_with('\n'))
            break; // the last line was being written when the process died
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_object())
            continue;
        if (j.contains("summary"))
            r.finished = true;
        else if (j.contains("config"))
            r.runId = j.value("run", std::int64_t { 0 });
        else if (j.contains("step") && j.contains("loss"))
            r.losses[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
    }
    return r;
}

// Starts `pipestudio args...` with stdout and stderr into files; returns its pid.
pid_t spawnCli(const std::vector<std::string>& args, const fs::path& out, const fs::path& err)
{
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(o, 1);
        ::dup2(e, 2);
        std::vector<char*> argv { const_cast<char*>(PS_CLI_PATH) };
        for (const auto& a : args)
            argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        ::execv(PS_CLI_PATH, argv.data());
        ::_exit(127);
    }
    return pid;
}

// SIGKILL after `delay` unless the child ended first; returns whether it was killed.
bool killAfter(pid_t pid, std::chrono::milliseconds delay)
{
    const auto end = std::chrono::steady_clock::now() + delay;
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
        if (::waitpid(pid, &status, WNOHANG) == pid)
            return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return WIFSIGNALED(status);
}

std::vector<std::string> split(const std::string& text)
{
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string w; in >> w;)
        out.push_back(w);
    return out;
}

struct Mode
{
    std::string name;
    std::string args; // device and schedule options
};

class CrashSafety : public ps::e2e::ScratchTest
{
protected:
    fs::path newProject(const std::string& name)
    {
        const auto p = m_dir / name;
        const auto r = runCli("new -m gpt2-tiny -o " + quote(p));
        EXPECT_EQ(r.exitCode, 0) << r.output;
        return p;
    }

    // Losses of an uninterrupted run of `steps` steps, by step.
    std::map<std::int64_t, double> referenceLosses(const fs::path& base, const Mode& mode, int steps)
    {
        const auto p = m_dir / "reference.pstudio";
        fs::copy_file(base, p, fs::copy_options::overwrite_existing);
        const auto r = runShell("( " + std::string(PS_CLI_PATH) + " train " + quote(p) + " " + mode.args + kCommon
            + " --steps " + std::to_string(steps) + " --json 2>/dev/null )");
        EXPECT_EQ(r.exitCode, 0) << r.output;
        fs::remove(p);
        return parseTrainJson(r.output).losses;
    }

    // One trial; returns a line for the report.
    std::string trial(const fs::path& base, const Mode& mode, const std::map<std::int64_t, double>& reference,
        int index, std::chrono::milliseconds delay)
    {
        const auto p = m_dir / ("trial" + std::to_string(index) + ".pstudio");
        fs::copy_file(base, p, fs::copy_options::overwrite_existing);
        auto args =
            split("train " + p.string() + " " + mode.args + kCommon + " --steps 60 --checkpoint-every 4 --json");
        const auto out = m_dir / "child.out";
        const bool killed = killAfter(spawnCli(args, out, m_dir / "child.err"), delay);
        const auto reported = parseTrainJson(readFile(out));
        const auto where =
            mode.name + " trial " + std::to_string(index) + " (kill after " + std::to_string(delay.count()) + " ms): ";
        // The file is sound, and every step the child reported is stored with the loss it printed.
        EXPECT_EQ(queryText(p, "PRAGMA integrity_check"), "ok") << where;
        const auto stored = storedLosses(p, reported.runId);
        for (const auto& [step, loss] : reported.losses) {
            const auto it = stored.find(step);
            EXPECT_TRUE(it != stored.end()) << where << "reported step " << step << " is not stored";
            if (it != stored.end()) {
                EXPECT_EQ(it->second, loss) << where << "step " << step;
            }
        }
        // Killed between storing the run and printing its id: the newest run is the child's.
        const auto runId =
            reported.runId > 0 ? reported.runId : queryInt(p.string(), "SELECT coalesce(max(id), 0) FROM runs");
        const auto status = [&] { return queryText(p, "SELECT status FROM runs WHERE id = " + std::to_string(runId)); };
        if (!killed || runId <= 0) // finished before the kill, or killed before its run began
            return where + (killed ? "killed before the run began" : "finished first");
        if (status() == "finished") { // the run completed; the kill caught the process on its way out
            EXPECT_EQ(reported.losses.size(), 60u) << where;
            return where + "finished first (killed while exiting)";
        }
        EXPECT_EQ(status(), "running") << where;
        // The CLI marks the dead run when it next opens the project: `info` on odd trials, the
        // resuming `train` itself on even ones.
        if (index % 2 == 1) {
            const auto info = runCli("info " + quote(p));
            EXPECT_EQ(info.exitCode, 0) << where << info.output;
            EXPECT_EQ(status(), "interrupted") << where << info.output;
        }
        const auto checkpointStep = queryInt(p.string(), "SELECT step FROM checkpoints ORDER BY id DESC LIMIT 1");
        const auto resumed = runShell(
            std::string(PS_CLI_PATH) + " train " + quote(p) + " " + mode.args + kCommon + " --resume --steps 4 --json");
        EXPECT_EQ(status(), "interrupted") << where;
        if (checkpointStep < 0) { // killed before the first checkpoint: nothing to resume from
            EXPECT_NE(resumed.exitCode, 0) << where;
            EXPECT_NE(resumed.output.find("no checkpoint"), std::string::npos) << where << resumed.output;
            return where + std::to_string(reported.losses.size()) + " step(s) reported, no checkpoint yet";
        }
        EXPECT_EQ(resumed.exitCode, 0) << where << resumed.output;
        const auto again = parseTrainJson(resumed.output);
        EXPECT_EQ(again.losses.size(), 4u) << where << resumed.output;
        for (const auto& [step, loss] : again.losses) {
            EXPECT_EQ(step > checkpointStep && step <= checkpointStep + 4, true) << where << "step " << step;
            const auto ref = reference.find(step);
            EXPECT_TRUE(ref != reference.end()) << where << "step " << step;
            if (ref != reference.end()) {
                EXPECT_NEAR(loss, ref->second, 1e-6) << where << "step " << step;
            }
        }
        EXPECT_EQ(queryText(p, "PRAGMA integrity_check"), "ok") << where;
        fs::remove(p);
        return where + std::to_string(reported.losses.size()) + " step(s) reported, resumed from step "
            + std::to_string(checkpointStep);
    }

    void trials(const Mode& mode, unsigned seed)
    {
        const auto base = newProject("base.pstudio");
        const auto start = std::chrono::steady_clock::now();
        const auto reference = referenceLosses(base, mode, 64);
        ASSERT_EQ(reference.size(), 64u);
        // Kill points spread over how long a run takes on this machine (start-up included), so a
        // fast machine does not finish most trials before their kill.
        const auto runMs = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> delayMs(std::max(20, runMs / 20), std::max(40, runMs * 17 / 20));
        for (int i = 0; i < 10; ++i)
            std::printf("[crash safety] %s\n",
                trial(base, mode, reference, i, std::chrono::milliseconds(delayMs(rng))).c_str());
    }

    static constexpr const char* kCommon = " --seed 7 --lr 0.002";
};

} // namespace

TEST_F(CrashSafety, KilledSingleDeviceTrainingLeavesASoundResumableProject)
{
    trials({ "cpu", "--device cpu" }, 20240601);
}

TEST_F(CrashSafety, KilledPipelineTrainingLeavesASoundResumableProject)
{
    trials({ "cpu:2 1f1b", "--devices cpu:2 --schedule 1f1b --micro-batches 2" }, 20240602);
}

// A project on a full file system: replacing it or training in it fails with a message that says
// the disk is full, and the project keeps its contents (byte for byte, or at least integrity and
// model) and is usable again once there is room.
TEST_F(CrashSafety, AFullDiskLeavesThePreviousProjectIntact)
{
    if (::geteuid() != 0)
        GTEST_SKIP() << "needs root to mount a small tmpfs";
    const auto small = m_dir / "small";
    fs::create_directories(small);
    if (::mount("tmpfs", small.c_str(), "tmpfs", 0, "size=256k") != 0)
        GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
    struct Unmount
    {
        fs::path dir;
        ~Unmount()
        {
            ::umount2(dir.c_str(), MNT_DETACH);
        }
    } unmount { small };
    const auto base = newProject("base.pstudio");
    const auto p = small / "p.pstudio";
    fs::copy_file(base, p);
    const auto nodes = queryInt(p.string(), "SELECT count(*) FROM nodes");
    ASSERT_GT(nodes, 0);
    const auto original = readFile(p);
    // Fill what is left.
    {
        std::ofstream fill(small / "fill", std::ios::binary);
        const std::string block(4096, '\0');
        while (fill.write(block.data(), static_cast<std::streamsize>(block.size())))
            ;
    }
    const auto replaced = runCli("new -m gpt2-tiny --layers 4 -o " + quote(p) + " --force");
    EXPECT_NE(replaced.exitCode, 0) << replaced.output;
    EXPECT_NE(replaced.output.find("disk is full"), std::string::npos) << replaced.output;
    EXPECT_NE(replaced.output.find(p.string()), std::string::npos) << replaced.output;
    EXPECT_EQ(readFile(p), original) << "`new --force` on a full disk changed the project";
    for (const auto& e : fs::directory_iterator(small)) // no temporary file is left behind
        EXPECT_TRUE(e.path().filename() == "fill" || e.path().filename().string().starts_with("p.pstudio")) << e.path();

    const auto trained = runCli("train " + quote(p) + " --steps 2");
    EXPECT_NE(trained.exitCode, 0) << trained.output;
    EXPECT_TRUE(trained.output.find("disk is full") != std::string::npos
        || trained.output.find("No space left on device") != std::string::npos)
        << trained.output;
    EXPECT_EQ(readFile(p), original) << "`train` on a full disk changed the project";

    // Room for a run to begin but not for its checkpoint (parameters and Adam moments, ~1.4 MiB).
    fs::resize_file(small / "fill", fs::file_size(small / "fill") - 96 * 1024);
    const auto partly = runCli("train " + quote(p) + " --steps 3 --json");
    EXPECT_NE(partly.exitCode, 0) << partly.output;
    EXPECT_NE(partly.output.find("disk is full"), std::string::npos) << partly.output;
    EXPECT_NE(partly.output.find("{\"error\""), std::string::npos) << partly.output;
    EXPECT_EQ(queryText(p, "PRAGMA integrity_check"), "ok");
    EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM nodes"), nodes);
    EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM checkpoints"), 0);

    // With room again (not for a checkpoint) the project opens, its unfinished run is no longer
    // "running", and it stores plans.
    fs::remove(small / "fill");
    const auto info = runCli("info " + quote(p));
    EXPECT_EQ(info.exitCode, 0) << info.output;
    EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM runs WHERE status = 'running'"), 0) << info.output;
    const auto again = runCli("plan " + quote(p) + " --stages 2 --algo gpipe");
    EXPECT_EQ(again.exitCode, 0) << again.output;
    EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM plans"), 1);
    EXPECT_EQ(queryText(p, "PRAGMA integrity_check"), "ok");
}

// Four `plan` processes saving plans into one project while two `train`s append metrics to it: all
// their writes are there (or a writer says the project is busy), and the file is sound.
TEST_F(CrashSafety, ConcurrentWritersNeverCorruptTheProject)
{
    const auto p = newProject("shared.pstudio");
    std::vector<std::string> commands;
    for (int i = 0; i < 4; ++i)
        commands.push_back("plan " + quote(p) + " --stages 2 --algo all --json");
    for (int i = 0; i < 2; ++i)
        commands.push_back("train " + quote(p) + " --steps 20 --checkpoint-every 5 --json");
    std::vector<ps::e2e::CliResult> results(commands.size());
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < commands.size(); ++i)
        threads.emplace_back(
            [&, i] { results[i] = runShell("( " + std::string(PS_CLI_PATH) + " " + commands[i] + " 2>/dev/null )"); });
    for (auto& t : threads)
        t.join();
    std::int64_t planIds = 0;
    for (std::size_t i = 0; i < 4; ++i) {
        if (results[i].exitCode != 0) { // the only acceptable failure: a clear "busy"
            EXPECT_NE(results[i].output.find("locked"), std::string::npos) << results[i].output;
            continue;
        }
        for (const auto& plan : nlohmann::json::parse(results[i].output))
            planIds += plan.contains("plan_id") ? 1 : 0;
    }
    EXPECT_EQ(queryText(p, "PRAGMA integrity_check"), "ok");
    EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM plans"), planIds);
    EXPECT_GT(planIds, 0);
    int finishedRuns = 0;
    for (std::size_t i = 4; i < results.size(); ++i) {
        const auto run = parseTrainJson(results[i].output);
        if (results[i].exitCode != 0) {
            EXPECT_NE(results[i].output.find("locked"), std::string::npos) << results[i].output;
            continue;
        }
        ++finishedRuns;
        EXPECT_TRUE(run.finished) << results[i].output;
        EXPECT_EQ(storedLosses(p, run.runId), run.losses) << results[i].output;
        EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM checkpoints WHERE run_id = " + std::to_string(run.runId)),
            5); // steps 5, 10, 15, 20 and the final one
    }
    EXPECT_EQ(queryInt(p.string(), "SELECT count(*) FROM runs WHERE status = 'finished'"), finishedRuns);
    std::printf("[crash safety] concurrent writers: %lld plans from 4 plan processes, %d of 2 training runs "
                "finished\n",
        static_cast<long long>(planIds), finishedRuns);
}
