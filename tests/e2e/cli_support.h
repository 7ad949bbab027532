// What the CLI end-to-end tests share: running the pipestudio executable (or any command) as a
// user would, reading what it wrote, and a scratch folder per test.
#pragma once

#include "scratch_test.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace ps::e2e {

struct CliResult
{
    int exitCode = -1;
    std::string output; // stdout and stderr together
};

// Runs `command` through the shell, stderr folded into stdout.
inline CliResult runShell(const std::string& command)
{
    CliResult r;
    FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
    if (!pipe)
        return r;
    std::array<char, 4096> buf {};
    while (const auto n = std::fread(buf.data(), 1, buf.size(), pipe))
        r.output.append(buf.data(), n);
    const int status = ::pclose(pipe);
    r.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
}

// A path quoted for the shell: inside single quotes, a quote as '\''.
inline std::string quote(const std::filesystem::path& p)
{
    std::string q = "'";
    for (char c : p.string())
        q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// `pipestudio ARGS` (the build's executable).
inline CliResult runCli(const std::string& args)
{
    return runShell(std::string(PS_CLI_PATH) + " " + args);
}

// `r` failed (a non-zero exit) and its output says `text`; the output is the failure's message.
inline ::testing::AssertionResult failedSaying(const CliResult& r, const std::string& text)
{
    if (r.exitCode == 0)
        return ::testing::AssertionFailure() << "exited 0 where it should fail saying '" << text << "':\n" << r.output;
    if (r.output.find(text) == std::string::npos)
        return ::testing::AssertionFailure() << "failed (" << r.exitCode << ") without saying '" << text << "':\n"
                                             << r.output;
    return ::testing::AssertionSuccess();
}

// Every line of `output` as JSON (`--json` prints one object per line); a line that is not JSON
// throws, failing the test.
inline std::vector<nlohmann::json> jsonLines(const std::string& output)
{
    std::vector<nlohmann::json> out;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);)
        out.push_back(nlohmann::json::parse(line));
    return out;
}

inline std::string readFile(const std::filesystem::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return { std::istreambuf_iterator<char>(in), {} };
}

// The first column of the first row `sql` returns from a project file, opened read-only; -1 when
// the query fails.
inline std::int64_t queryInt(const std::string& path, const std::string& sql)
{
    sqlite3* db = nullptr;
    std::int64_t n = -1;
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
        sqlite3_stmt* st = nullptr;
        if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

// A test with an empty scratch folder of its own (tests/common/scratch_test.h).
using ScratchTest = ps::test::ScratchTest;

} // namespace ps::e2e
