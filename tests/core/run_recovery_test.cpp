// Runs left "running" by a process that no longer exists become "interrupted" when the project is
// opened; live runs, runs of another host and runs that ended are left alone.
#include "scratch_test.h"
#include "store/project_store.h"
#include "store/sqlite.h"
#include "test_graphs.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

class RunRecoveryTest : public test::ScratchTest
{
protected:
    void SetUp() override
    {
        ScratchTest::SetUp();
        m_path = m_dir / "p.pstudio";
        ProjectStore::create(m_path).saveGraph(test::tinyMlp());
    }

    // A child process begins a run and dies by SIGKILL before ending it. With `reap` false the
    // child is left a zombie (killed, not yet waited for), as a supervising GUI may briefly see it.
    std::int64_t runOfKilledChild(bool reap)
    {
        int fds[2];
        EXPECT_EQ(::pipe(fds), 0);
        const pid_t child = ::fork();
        if (child == 0) {
            ::close(fds[0]);
            std::int64_t id = 0;
            try {
                id = ProjectStore::open(m_path).beginRun(R"({"plan_id":3})");
            } catch (...) {
            }
            (void)!::write(fds[1], &id, sizeof id);
            ::pause();
            ::_exit(0);
        }
        ::close(fds[1]);
        std::int64_t id = 0;
        EXPECT_EQ(::read(fds[0], &id, sizeof id), static_cast<ssize_t>(sizeof id));
        ::close(fds[0]);
        ::kill(child, SIGKILL);
        if (reap) {
            ::waitpid(child, nullptr, 0);
        } else {
            waitForZombie(child);
            m_zombie = child;
        }
        return id;
    }

    static void waitForZombie(pid_t pid)
    {
        for (int i = 0; i < 500; ++i) {
            std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
            std::string stat;
            std::getline(in, stat);
            const auto close = stat.rfind(')');
            if (close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z')
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        FAIL() << "child " << pid << " did not become a zombie";
    }

    void setColumn(std::int64_t run, const std::string& column, const std::string& value)
    {
        sql::Database db(m_path, sql::Database::Mode::ReadWrite);
        sql::Statement st(db, "UPDATE runs SET " + column + " = ?1 WHERE id = ?2");
        st.bind(1, value).bind(2, run).execute();
    }

    fs::path m_path;
    pid_t m_zombie = 0;
};

} // namespace

TEST_F(RunRecoveryTest, ARunOfAKilledProcessBecomesInterrupted)
{
    const auto run = runOfKilledChild(true);
    ASSERT_GT(run, 0);
    auto store = ProjectStore::open(m_path);
    EXPECT_EQ(store.runStatus(run), "running");
    const auto stale = store.markStaleRunsInterrupted();
    ASSERT_EQ(stale, std::vector<std::int64_t> { run });
    EXPECT_EQ(store.runStatus(run), "interrupted");
    const auto rows = store.loadRuns();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_NE(rows.front().error.find("ended without finishing"), std::string::npos) << rows.front().error;
    EXPECT_FALSE(rows.front().endedAt.empty());
    EXPECT_EQ(rows.front().planId, 3);
    EXPECT_TRUE(store.markStaleRunsInterrupted().empty()); // once
}

TEST_F(RunRecoveryTest, AKilledButUnreapedProcessCountsAsDead)
{
    const auto run = runOfKilledChild(false);
    auto store = ProjectStore::open(m_path);
    EXPECT_EQ(store.markStaleRunsInterrupted(), std::vector<std::int64_t> { run });
    ::waitpid(m_zombie, nullptr, 0);
}

TEST_F(RunRecoveryTest, ALiveRunAndAnotherHostsRunStayRunning)
{
    auto store = ProjectStore::open(m_path);
    const auto mine = store.beginRun("{}"); // this test process is alive
    const auto remote = store.beginRun("{}");
    setColumn(remote, "host", "some-other-host");
    EXPECT_TRUE(store.markStaleRunsInterrupted().empty());
    EXPECT_EQ(store.runStatus(mine), "running");
    EXPECT_EQ(store.runStatus(remote), "running");
}

TEST_F(RunRecoveryTest, AnotherBootOrAReusedPidMeansTheWriterIsGone)
{
    auto store = ProjectStore::open(m_path);
    const auto beforeReboot = store.beginRun("{}");
    setColumn(beforeReboot, "boot_id", "00000000-0000-0000-0000-000000000000");
    const auto reused = store.beginRun("{}"); // same pid, but a process started at another time
    setColumn(reused, "process_start", "1");
    const auto stale = store.markStaleRunsInterrupted();
    EXPECT_EQ(stale.size(), 2u);
    EXPECT_EQ(store.runStatus(beforeReboot), "interrupted");
    EXPECT_EQ(store.runStatus(reused), "interrupted");
}

TEST_F(RunRecoveryTest, EndedRunsKeepTheirStatus)
{
    auto store = ProjectStore::open(m_path);
    const auto failed = store.beginRun("{}");
    store.appendRunMetrics(failed, { { 1, 5.5, 2e6, 100 }, { 2, 4.25, 2e6, 120 } });
    store.endRun(failed, "failed", "out of memory on cpu:0");
    EXPECT_FALSE(store.endRunIfRunning(failed, "interrupted", "killed"));
    EXPECT_EQ(store.runStatus(failed), "failed");
    setColumn(failed, "pid", "0");
    EXPECT_TRUE(store.markStaleRunsInterrupted().empty());
    const auto rows = store.loadRuns();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows.front().steps, 2);
    EXPECT_DOUBLE_EQ(rows.front().lastLoss, 4.25);
    EXPECT_DOUBLE_EQ(rows.front().lastTokensPerSecond, 120);
    EXPECT_EQ(rows.front().error, "out of memory on cpu:0");
}

TEST_F(RunRecoveryTest, ARunningRowOfAnOlderSchemaIsInterruptedAfterMigration)
{
    const auto old = m_dir / "old.pstudio";
    ProjectStore::create(old, 6).saveGraph(test::tinyMlp());
    {
        sql::Database db(old, sql::Database::Mode::ReadWrite);
        db.exec("INSERT INTO runs(started_at, status, json) VALUES ('2026-01-01T00:00:00Z', 'running', '{}')");
    }
    auto store = ProjectStore::open(old);
    EXPECT_EQ(store.schemaVersion(), kProjectSchemaVersion);
    EXPECT_EQ(store.markStaleRunsInterrupted().size(), 1u);
    EXPECT_EQ(store.loadRuns().front().status, "interrupted");
}
