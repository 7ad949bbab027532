// Writes the generated seed corpora of the fuzz targets into <out>/<target>/ from this build's own
// writers, so the seeds always match the current formats: a project (graph, cluster, a run with
// metrics), schedule CSVs of every built-in schedule, cluster/catalog/device JSON (first byte: the
// loader fuzz_cluster_json picks), and an Nsight Systems export. ONNX seeds come from
// tests/data/make_onnx_fixtures.py and the Kineto JSON seeds are committed (tests/fuzz/corpus).
#include "cluster/cluster.h"
#include "schedule/schedule.h"
#include "schedule/schedule_validate.h"
#include "store/project_store.h"
#include "store/sqlite.h"
#include "zoo/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

namespace fs = std::filesystem;
using namespace ps;

namespace {

void writeFile(const fs::path& path, const std::string& bytes)
{
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << bytes;
}

Graph tinyMlp()
{
    ModelConfig c = zooPreset("mlp");
    c.layers = 2;
    c.hidden = 16;
    c.vocab = 4;
    c.microBatch = 4;
    c.dropout = 0;
    return buildZooModel(c);
}

void writeProject(const fs::path& dir)
{
    fs::create_directories(dir);
    const auto path = dir / "mlp.pstudio";
    fs::remove(path);
    writeNewProject(path, tinyMlp(), false);
    auto store = ProjectStore::open(path);
    store.saveCluster(makeCluster(DeviceCatalog::builtin().find("a100-40gb"), 4, 2));
    const auto run = store.beginRun(R"({"schedule": "1f1b", "micro_batches": 4})");
    store.appendRunMetrics(run, { { 1, 2.5, 1e6, 1000 }, { 2, 2.1, 9e5, 1100 } });
    store.endRun(run, "finished");
}

void writeSchedules(const fs::path& dir)
{
    for (const char* spec : { "gpipe", "1f1b", "kfkb:2", "interleaved:2", "zb-h1" }) {
        const auto schedule = generateSchedule(parseScheduleSpec(spec, 2, 4));
        std::string name = spec;
        std::replace(name.begin(), name.end(), ':', '_');
        writeFile(dir / (name + ".csv"), scheduleToCsv(schedule));
    }
}

void writeClusterJson(const fs::path& dir, const fs::path& catalogFile)
{
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    auto cluster = makeCluster(a100, 16, 8);
    cluster.interTrace = BandwidthTrace { { { 0.0, 1.0 }, { 0.5, 0.25 } }, 1.0 };
    writeFile(dir / "cluster.json", '\0' + clusterToJson(cluster));
    std::ostringstream catalog;
    catalog << std::ifstream(catalogFile, std::ios::binary).rdbuf();
    writeFile(dir / "catalog.json", '\1' + catalog.str());
    writeFile(dir / "device.json", '\2' + deviceSpecToJson(a100));
}

// The tables and columns of tests/profiler/trace_import_test.cpp's hand-built export.
void writeNsysExport(const fs::path& dir)
{
    fs::create_directories(dir);
    const auto path = dir / "report.sqlite";
    fs::remove(path);
    sql::Database db(path, sql::Database::Mode::Create);
    db.exec(R"(
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
  shortName INTEGER, mangledName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);
INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.11.1');
INSERT INTO StringIds VALUES (1, 'layers.1'), (2, 'pt_autograd_0'), (3, 'main'), (4, 'ampere_sgemm'),
  (5, 'void ampere_sgemm<float>(...)'), (6, 'cudaLaunchKernel'), (7, 'elementwise_kernel');
INSERT INTO ThreadNames VALUES (3, 0, 16777217), (2, 0, 16777218);
INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId) VALUES
  (1000, 2000, 59, 'layers.0.linear.matmul', 16777217, NULL), (3000, 5000, 59, NULL, 16777217, 1),
  (4000, 4500, 59, 'layers.1.relu', 16777217, NULL), (6000, 7000, 60, 'head.matmul', 16777218, NULL),
  (100, NULL, 34, 'layers.0', 16777217, NULL);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, globalTid, correlationId, nameId) VALUES
  (1100, 1110, 16777217, 1, 6), (3100, 3110, 16777217, 2, 6), (4100, 4110, 16777217, 3, 6),
  (6100, 6110, 16777218, 4, 6), (8000, 8010, 16777217, 5, 6);
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId, demangledName, shortName) VALUES
  (1200, 1300, 0, 7, 1, 5, 4), (3200, 3500, 0, 7, 2, 5, 4), (4200, 4250, 0, 7, 3, 7, 7),
  (6200, 6270, 0, 7, 4, 5, 4), (9000, 9040, 0, 7, 99, 7, 7);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, correlationId, bytes, copyKind) VALUES
  (8100, 8300, 0, 7, 5, 4096, 1);
)");
}

} // namespace

int main(int argc, char** argv)
{
    if (argc != 3) {
        std::cerr << "usage: fuzz_seeds OUT_DIR DEVICES_JSON\n";
        return 2;
    }
    const fs::path out = argv[1];
    writeProject(out / "project");
    writeSchedules(out / "schedule_csv");
    writeClusterJson(out / "cluster_json", argv[2]);
    writeNsysExport(out / "trace_nsys");
    std::cout << "fuzz seeds written to " << out.string() << "\n";
    return 0;
}
