// Traces imported into a project (trace_files.h, what `import-trace` calls): read and checked first
// with nothing written, then the profile and the timeline run stored; a forward-only trace stores no
// run and says why; a trace under the coverage floor or given with cuts it cannot take is refused.
#include "scratch_test.h"
#include "store/project_store.h"
#include "tiny_mlp.h"
#include "trace_files.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace ps;
namespace fs = std::filesystem;

namespace {

// The legacy torch profiler's array form of a CPU run of the tiny MLP: two iterations, each a
// forward pass over the nodes' ranges and a backward pass inside a `backward` range, then the
// optimizer step; `withBackward` false leaves the backward passes out (an inference trace).
std::string cpuTrace(bool withBackward)
{
    std::string events;
    const auto add = [&](const std::string& name, int ts, int dur) {
        events += std::string(events.empty() ? "" : ",\n") + R"({"name": ")" + name + R"(", "ph": "X", "ts": )"
            + std::to_string(ts) + R"(, "dur": )" + std::to_string(dur)
            + R"(, "tid": 1, "pid": "CPU functions", "args": {}})";
    };
    for (int it = 0; it < 2; ++it) {
        const int t0 = it * 1000;
        add("layers.0.linear.matmul", t0, 40);
        add("layers.0.relu", t0 + 40, 10);
        add("layers.1.linear.matmul", t0 + 50, 40);
        add("layers.1.relu", t0 + 90, 10);
        add("head.matmul", t0 + 100, 20);
        if (withBackward) {
            add("backward", t0 + 200, 300);
            add("head.matmul", t0 + 210, 30);
            add("layers.1.linear.matmul", t0 + 250, 80);
            add("layers.0.linear.matmul", t0 + 340, 80);
        }
        add("Optimizer.step#SGD.step", t0 + 600, 50);
    }
    return "[\n" + events + "\n]";
}

class TraceFilesTest : public test::ScratchTest
{
protected:
    void SetUp() override
    {
        ScratchTest::SetUp();
        m_project = (m_dir / "mlp.pstudio").string();
        ProjectStore::create(m_project).saveGraph(tinyMlp());
    }
    std::string write(const std::string& name, const std::string& text) const
    {
        std::ofstream(m_dir / name, std::ios::binary) << text;
        return (m_dir / name).string();
    }
    [[nodiscard]] profiler::TraceFilesRequest request(std::vector<std::string> traces, std::string cuts = "") const
    {
        profiler::TraceFilesRequest r;
        r.project = m_project;
        r.traces = std::move(traces);
        r.cuts = std::move(cuts);
        return r;
    }
    [[nodiscard]] std::size_t runs() const
    {
        return ProjectStore::open(m_project, ProjectStore::Access::ReadOnly).loadRuns().size();
    }

    std::string m_project;
};

} // namespace

TEST_F(TraceFilesTest, ATrainingTraceIsReadFirstThenStoredAsAProfileAndARun)
{
    const auto r = request({ write("step.json", cpuTrace(true)) });
    auto read = profiler::readTraceFiles(r);
    EXPECT_EQ(read.device, "cpu"); // a CPU-only trace's rows
    EXPECT_EQ(read.microBatch, 4); // the project's
    EXPECT_EQ(read.cuts, "");
    ASSERT_EQ(read.stages.size(), 1U);
    EXPECT_TRUE(read.timeline);
    EXPECT_EQ(read.timelineNote, "") << read.timelineNote;
    ASSERT_EQ(read.stages[0].iterations.size(), 2U);
    EXPECT_EQ(profiler::timelineShape(read.stages[0].iterations), std::make_pair(1, std::string("1f1b")));
    EXPECT_EQ(runs(), 0U); // reading writes nothing

    EXPECT_GT(profiler::saveTraceFiles(r, read), 0);
    EXPECT_EQ(runs(), 1U);
    const auto store = ProjectStore::open(m_project, ProjectStore::Access::ReadOnly);
    EXPECT_EQ(store.loadRunEvents(read.runId, 1).size(), 3U); // F, B and the optimizer step
    const auto profile = store.loadProfile("cpu", "imported");
    ASSERT_TRUE(profile.has_value());
    EXPECT_EQ(profile->nodes.size(), read.graph.nodeCount());

    auto dry = r;
    dry.dryRun = true;
    EXPECT_THROW(profiler::saveTraceFiles(dry, read), Error);
}

TEST_F(TraceFilesTest, AForwardOnlyTraceStoresTheProfileAndNoRun)
{
    const auto r = request({ write("infer.json", cpuTrace(false)) });
    auto read = profiler::readTraceFiles(r);
    EXPECT_NE(read.timelineNote.find("forward passes only"), std::string::npos) << read.timelineNote;
    EXPECT_EQ(profiler::saveTraceFiles(r, read), 0);
    EXPECT_EQ(runs(), 0U);
}

TEST_F(TraceFilesTest, RefusalsNameTheFileOrTheCutsAndWriteNothing)
{
    const auto trace = write("step.json", cpuTrace(true));
    const auto errorOf = [](const profiler::TraceFilesRequest& r) {
        try {
            (void)profiler::readTraceFiles(r);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    auto strict = request({ trace });
    strict.minCoverage = 1.01; // more than any trace covers
    EXPECT_NE(errorOf(strict).find("'" + trace + "': only "), std::string::npos) << errorOf(strict);
    strict.dryRun = true; // a dry run reports what it would refuse instead
    EXPECT_EQ(errorOf(strict), "no error");
    const auto cut = request({ trace }, "3");
    EXPECT_NE(errorOf(cut).find("one trace was given"), std::string::npos) << errorOf(cut);
    auto two = request({ trace, trace });
    EXPECT_NE(errorOf(two).find("2 traces: say where their stages start with --cuts"), std::string::npos);
    two.cuts = "no.such.node";
    EXPECT_NE(errorOf(two).find("--cuts: no node named 'no.such.node'"), std::string::npos) << errorOf(two);
    EXPECT_EQ(runs(), 0U);
}
