// Writes the generated seed corpora of the fuzz targets into <out>/<target>/ from this build's own
// writers, so the seeds always match the current formats: a project (graph, cluster, a run with
// metrics), schedule CSVs of every built-in schedule, cluster/catalog/device JSON (first byte: the
// loader fuzz_cluster_json picks), and an Nsight Systems export. ONNX seeds come from
// tests/data/make_onnx_fixtures.py and the Kineto JSON seeds are committed (tests/fuzz/corpus).
#include "../profiler/nsys_export.h"
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

// The trace import tests' hand-built Nsight Systems export (tests/profiler/nsys_export.h).
void writeNsysExport(const fs::path& dir)
{
    fs::create_directories(dir);
    const auto path = dir / "report.sqlite";
    fs::remove(path);
    ps::test::createNsysExport(path, "3.11.1");
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
