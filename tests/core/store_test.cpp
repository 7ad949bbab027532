#include "plan/partition.h"
#include "scratch_test.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "store/schema.h"
#include "store/sqlite.h"
#include "test_graphs.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <random>

using namespace ps;
namespace fs = std::filesystem;

namespace {

class StoreTest : public test::ScratchTest
{
protected:
};

std::string readAll(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    return { std::istreambuf_iterator<char>(in), {} };
}

void expectErrorContaining(const std::function<void()>& f, const std::string& fragment)
{
    try {
        f();
        FAIL() << "expected ps::Error containing '" << fragment << "'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

Graph smallGpt2()
{
    auto c = zooPreset("gpt2-small");
    c.layers = 2;
    c.seq = 32;
    return buildZooModel(c);
}

} // namespace

TEST_F(StoreTest, GraphRoundTripsExactly)
{
    const auto graph = smallGpt2();
    writeNewProject(file("p.pstudio"), graph, false);
    const auto store = ProjectStore::open(file("p.pstudio"), ProjectStore::Access::ReadOnly);
    EXPECT_EQ(store.schemaVersion(), kProjectSchemaVersion);
    EXPECT_TRUE(store.hasModel());
    EXPECT_EQ(store.loadGraph(), graph);
}

TEST_F(StoreTest, HasEveryTable)
{
    writeNewProject(file("p.pstudio"), test::tinyMlp(), false);
    const auto tables = ProjectStore::open(file("p.pstudio")).tableNames();
    for (const char* t : { "meta", "model", "nodes", "tensors", "edges", "profiles", "cluster", "plans", "simulations",
             "runs", "run_metrics", "events" })
        EXPECT_NE(std::find(tables.begin(), tables.end(), t), tables.end()) << t;
}

TEST_F(StoreTest, RandomBytesAreRejectedAndUntouched)
{
    std::mt19937 rng(42);
    std::string bytes(8192, '\0');
    for (auto& c : bytes)
        c = static_cast<char>(rng());
    std::ofstream(file("random.pstudio"), std::ios::binary) << bytes;
    expectErrorContaining([&] { (void)ProjectStore::open(file("random.pstudio")); }, "not an SQLite database");
    EXPECT_EQ(readAll(file("random.pstudio")), bytes);
    EXPECT_FALSE(fs::exists(file("random.pstudio-wal")));
}

TEST_F(StoreTest, ForeignSqliteIsRejectedAndUntouched)
{
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file("foreign.db").c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "CREATE TABLE songs(title TEXT); INSERT INTO songs VALUES ('x');", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    const auto before = readAll(file("foreign.db"));
    expectErrorContaining([&] { (void)ProjectStore::open(file("foreign.db")); }, "not a PipeStudio project");
    EXPECT_EQ(readAll(file("foreign.db")), before);
}

TEST_F(StoreTest, TruncatedProjectIsReportedCorrupt)
{
    writeNewProject(file("p.pstudio"), smallGpt2(), false);
    const auto bytes = readAll(file("p.pstudio"));
    std::ofstream(file("cut.pstudio"), std::ios::binary) << bytes.substr(0, bytes.size() / 3);
    const auto before = readAll(file("cut.pstudio"));
    EXPECT_THROW(
        {
            const auto store = ProjectStore::open(file("cut.pstudio"), ProjectStore::Access::ReadOnly);
            (void)store.loadGraph();
        },
        Error);
    EXPECT_EQ(readAll(file("cut.pstudio")), before);
}

TEST_F(StoreTest, NewerSchemaIsRefused)
{
    writeNewProject(file("p.pstudio"), test::tinyMlp(), false);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(file("p.pstudio").c_str(), &db), SQLITE_OK);
    sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    expectErrorContaining([&] { (void)ProjectStore::open(file("p.pstudio")); }, "newer PipeStudio (schema 99");
}

TEST_F(StoreTest, OlderSchemaMigratesForward)
{
    {
        auto store = ProjectStore::create(file("old.pstudio"), 1);
        store.saveGraph(test::tinyMlp());
        EXPECT_EQ(store.schemaVersion(), 1);
    }
    const auto ro = ProjectStore::open(file("old.pstudio"), ProjectStore::Access::ReadOnly);
    EXPECT_EQ(ro.schemaVersion(), 1); // reading never migrates
    const auto rw = ProjectStore::open(file("old.pstudio"));
    EXPECT_EQ(rw.schemaVersion(), kProjectSchemaVersion);
    const auto tables = rw.tableNames();
    EXPECT_NE(std::find(tables.begin(), tables.end(), "plans"), tables.end());
    EXPECT_EQ(rw.loadGraph(), test::tinyMlp());
}

TEST_F(StoreTest, NewProjectRefusesToOverwrite)
{
    writeNewProject(file("p.pstudio"), test::tinyMlp(), false);
    const auto before = readAll(file("p.pstudio"));
    expectErrorContaining([&] { writeNewProject(file("p.pstudio"), smallGpt2(), false); }, "already exists");
    EXPECT_EQ(readAll(file("p.pstudio")), before);
    writeNewProject(file("p.pstudio"), smallGpt2(), true);
    EXPECT_EQ(ProjectStore::open(file("p.pstudio")).loadGraph(), smallGpt2());
}

TEST_F(StoreTest, InvalidGraphLeavesNoFileBehind)
{
    Graph bad(ModelInfo { "bad", "test", "{}", 1 });
    bad.addTensor({ TensorId(), "orphan", { 2 }, DType::F32, TensorKind::Activation, NodeId(), {} });
    EXPECT_THROW(writeNewProject(file("bad.pstudio"), bad, false), Error);
    EXPECT_TRUE(fs::is_empty(m_dir));
}

TEST_F(StoreTest, FailedSaveKeepsThePreviousModel)
{
    writeNewProject(file("p.pstudio"), test::tinyMlp(), false);
    auto store = ProjectStore::open(file("p.pstudio"));
    // Two nodes with one name violate the UNIQUE constraint halfway through the write.
    auto g = test::tinyMlp();
    Graph dup(g.info());
    for (auto t : g.tensors()) {
        t.producer = NodeId();
        dup.addTensor(t);
    }
    for (auto n : g.nodes()) {
        n.name = n.id.value < 2 ? "same" : n.name;
        dup.addNode(n);
    }
    dup.setOutputs(g.outputs());
    EXPECT_THROW(store.saveGraph(dup), Error); // rejected by validation before any write
    EXPECT_EQ(store.loadGraph(), test::tinyMlp());
}

TEST_F(StoreTest, MissingFileIsNamed)
{
    expectErrorContaining([&] { (void)ProjectStore::open(file("nope.pstudio")); }, "nope.pstudio': no such file");
}

TEST_F(StoreTest, TransactionRollsBackWhenNotCommitted)
{
    writeNewProject(file("p.pstudio"), test::tinyMlp(), false);
    {
        sql::Database db(file("p.pstudio"), sql::Database::Mode::ReadWrite);
        sql::Transaction tx(db);
        db.exec("DELETE FROM nodes");
        // no commit: leaving the scope (as an exception would) rolls back
    }
    EXPECT_EQ(ProjectStore::open(file("p.pstudio")).loadGraph(), test::tinyMlp());
}

TEST(Schema, MigrationsReachTheCurrentVersionInOrder)
{
    const auto& migrations = store::projectMigrations();
    ASSERT_FALSE(migrations.empty());
    for (std::size_t i = 0; i < migrations.size(); ++i)
        EXPECT_EQ(migrations[i].toVersion, static_cast<int>(i) + 1);
    EXPECT_EQ(migrations.back().toVersion, kProjectSchemaVersion);
}

// A GPU profiled at fp32 and at bf16: both kept (the second does not replace the first), each found
// by the source a run at that precision asks for, which names the precision its GEMMs ran at.
TEST_F(StoreTest, GpuProfilesOfEachPrecisionAreKeptApart)
{
    const auto graph = smallGpt2();
    writeNewProject(file("p.pstudio"), graph, false);
    auto store = ProjectStore::open(file("p.pstudio"));
    auto fp32 = estimateProfile(graph, DeviceCatalog::builtin().find("h100-80gb"), {});
    fp32.source = measuredCudaSource(Precision::Fp32);
    auto bf16 = fp32;
    bf16.source = measuredCudaSource(Precision::Bf16);
    for (auto& n : bf16.nodes)
        n.forwardNs.perSample /= 2;
    store.saveProfile(fp32, 1, 8);
    store.saveProfile(bf16, 1, 8);
    const auto a = store.loadProfile("h100-80gb", "measured-cuda");
    const auto b = store.loadProfile("h100-80gb", "measured-cuda-bf16");
    ASSERT_TRUE(a.has_value());
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(measuredPrecision(a->source), Precision::Fp32);
    EXPECT_EQ(measuredPrecision(b->source), Precision::Bf16);
    EXPECT_NEAR(b->nodes[1].forwardNs.perSample * 2, a->nodes[1].forwardNs.perSample, 1e-6);
    EXPECT_FALSE(store.loadProfile("h100-80gb", measuredCudaSource(Precision::Tf32)).has_value());
}

TEST_F(StoreTest, ProfilesClustersAndSimulationsRoundTrip)
{
    const auto graph = smallGpt2();
    writeNewProject(file("p.pstudio"), graph, false);
    auto store = ProjectStore::open(file("p.pstudio"));
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    const auto profile = estimateProfile(graph, a100, {});
    store.saveProfile(profile, 1, 8);
    store.saveProfile(profile, 1, 8); // replaces, does not duplicate
    const auto loaded = store.loadProfile("a100-40gb", "analytical");
    ASSERT_TRUE(loaded.has_value());
    ASSERT_EQ(loaded->nodes.size(), profile.nodes.size());
    for (std::size_t n = 0; n < profile.nodes.size(); ++n) {
        EXPECT_NEAR(loaded->nodes[n].forwardNs.at(4), profile.nodes[n].forwardNs.at(4), 1e-6);
        EXPECT_NEAR(loaded->nodes[n].weightGradNs.at(4), profile.nodes[n].weightGradNs.at(4), 1e-6);
        EXPECT_EQ(loaded->nodes[n].parameterCount, profile.nodes[n].parameterCount);
    }
    EXPECT_FALSE(store.loadProfile("h100-80gb", "analytical").has_value());

    const auto cluster = makeCluster(a100, 4);
    store.saveCluster(cluster);
    store.saveCluster(cluster);
    ASSERT_EQ(store.loadClusters().size(), 1U);
    EXPECT_EQ(store.loadClusters().front(), cluster);

    const auto partition = computeBalancedPartition(std::vector<double>(graph.nodeCount(), 1.0), 2);
    const auto stages = computeStageCosts(graph, profile, partition, 1);
    const auto schedule = generateSchedule({ ScheduleKind::OneFOneB, 2, 4, 1, 1 });
    const auto result = simulate({ schedule, stages, cluster, {}, 1, {}, {} });
    EXPECT_EQ(store.saveSimulation(result, "{}"), 1);
    EXPECT_EQ(store.simulationCount(), 1);

    const StageModel model(graph, profile, { ScheduleKind::OneFOneB, 2, 4, 1, 1 }, cluster, 1, {});
    auto slow = evaluatePlan(model, Partition { { 0, 5 } }, "manual");
    auto fast = findPlan(model, {});
    auto broken = slow;
    broken.feasible = false;
    store.savePlan(slow, "lopsided");
    store.savePlan(broken, "broken");
    store.savePlan(fast, "dawnpiper");
    const auto plans = store.loadPlans();
    ASSERT_EQ(plans.size(), 3U);
    EXPECT_EQ(plans[0].name, "dawnpiper"); // feasible and fastest first
    EXPECT_EQ(plans[2].name, "broken");
    EXPECT_LT(plans[0].slowestStageNs, plans[1].slowestStageNs);
}

// CPU profiles measured at several thread counts live side by side (schema 8); a v7 file's profile
// migrates with its thread count unrecorded (0).
TEST_F(StoreTest, ProfilesOfSeveralThreadCountsLiveSideBySide)
{
    const auto graph = smallGpt2();
    {
        auto old = ProjectStore::create(file("v7.pstudio"), 7);
        old.saveGraph(graph);
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(file("v7.pstudio").c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db,
                      "INSERT INTO profiles(node_id, device_kind, micro_batch, forward_ns, backward_ns, output_bytes, "
                      "saved_bytes, workspace_bytes, parameter_bytes, source, created_at) "
                      "SELECT id, 'cpu', 4, 1000, 2000, 0, 0, 0, 0, 'measured-cpu', 'now' FROM nodes",
                      nullptr, nullptr, nullptr),
            SQLITE_OK);
        sqlite3_close(db);
    }
    {
        const auto readOnly = ProjectStore::open(file("v7.pstudio"), ProjectStore::Access::ReadOnly);
        EXPECT_EQ(readOnly.schemaVersion(), 7); // not migrated: its profile reads as thread count 0
        EXPECT_EQ(readOnly.profileThreads("cpu", "measured-cpu"), (std::vector<int> { 0 }));
        ASSERT_TRUE(readOnly.loadProfile("cpu", "measured-cpu").has_value());
        EXPECT_EQ(readOnly.loadProfile("cpu", "measured-cpu")->nodes.size(), graph.nodeCount());
    }
    auto store = ProjectStore::open(file("v7.pstudio"));
    EXPECT_EQ(store.schemaVersion(), kProjectSchemaVersion);
    EXPECT_EQ(store.profileThreads("cpu", "measured-cpu"), (std::vector<int> { 0 }));
    auto profile = *store.loadProfile("cpu", "measured-cpu");
    EXPECT_EQ(profile.threads, 0);
    EXPECT_EQ(profile.nodes.size(), graph.nodeCount());
    for (const int threads : { 2, 1 }) {
        profile.threads = threads;
        for (auto& n : profile.nodes)
            n.forwardNs = { 0, 1000.0 / threads };
        store.saveProfile(profile, 2, 4);
    }
    EXPECT_EQ(store.profileThreads("cpu", "measured-cpu"), (std::vector<int> { 0, 1, 2 }));
    EXPECT_EQ(store.loadProfile("cpu", "measured-cpu")->threads, 2); // the most threads by default
    EXPECT_NEAR(store.loadProfile("cpu", "measured-cpu", 1)->nodes[0].forwardNs.at(4), 4000, 1e-6);
    EXPECT_FALSE(store.loadProfile("cpu", "measured-cpu", 3).has_value());

    // The optimizer step a profile measured (schema 9) travels with it, per thread count; a save
    // without one clears it. The v7 file's profile measured none.
    EXPECT_EQ(store.loadProfile("cpu", "measured-cpu", 0)->setup.optimizerNsPerParameter, 0);
    profile.threads = 1;
    profile.setup.optimizerNsPerParameter = 3.5;
    store.saveProfile(profile, 2, 4);
    EXPECT_DOUBLE_EQ(store.loadProfile("cpu", "measured-cpu", 1)->setup.optimizerNsPerParameter, 3.5);
    EXPECT_EQ(store.loadProfile("cpu", "measured-cpu", 2)->setup.optimizerNsPerParameter, 0);
    profile.setup.optimizerNsPerParameter = 0;
    store.saveProfile(profile, 2, 4);
    EXPECT_EQ(store.loadProfile("cpu", "measured-cpu", 1)->setup.optimizerNsPerParameter, 0);
}
