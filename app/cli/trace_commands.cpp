// `pipestudio import-trace`: per-node times from an Nsight Systems SQLite export or a PyTorch
// profiler JSON trace, stored as the project's "imported" profile.
#include "cli/commands.h"
#include "cli/validators.h"
#include "store/project_store.h"
#include "trace_import.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace ps::app {
namespace {

    struct ImportTraceOptions
    {
        std::string project;
        std::string trace;
        std::string device; // empty: "cuda" for kernel traces, "cpu" for CPU-only ones
        std::int64_t microBatch = 0; // 0: the project's
        bool dryRun = false;
        bool json = false;
    };

    nlohmann::ordered_json toJson(const ImportTraceOptions& o, const Graph& graph, const profiler::TraceImport& t,
        const std::string& device, std::int64_t microBatch)
    {
        nlohmann::ordered_json j { { "trace", o.trace }, { "format", t.format }, { "schema_version", t.schemaVersion },
            { "activity", t.deviceActivity ? "kernels" : "cpu-ops" }, { "device", device }, { "source", "imported" },
            { "micro_batch", microBatch }, { "saved", !o.dryRun }, { "ranges", t.ranges },
            { "activities", t.activities }, { "matched", t.matchedActivities }, { "unmatched", t.unmatchedActivities },
            { "total_ms", t.totalNs / 1e6 }, { "matched_ms", t.matchedNs / 1e6 },
            { "unmatched_ms", t.unmatchedNs / 1e6 }, { "nodes_matched", t.nodesMatched },
            { "nodes_total", graph.nodeCount() } };
        j["unmatched_names"] = nlohmann::ordered_json::array();
        for (const auto& u : t.unmatched)
            j["unmatched_names"].push_back({ { "name", u.name }, { "count", u.count }, { "ms", u.totalNs / 1e6 } });
        j["nodes"] = nlohmann::ordered_json::array();
        for (const auto& n : graph.nodes()) {
            const auto& time = t.nodes[n.id.index()];
            if (time.forwardOccurrences + time.backwardOccurrences == 0)
                continue;
            j["nodes"].push_back({ { "name", n.name }, { "forward_ms", time.forwardNs / 1e6 },
                { "backward_ms", time.backwardNs / 1e6 }, { "occurrences", time.forwardOccurrences } });
        }
        return j;
    }

    void printText(const ImportTraceOptions& o, const Graph& graph, const profiler::TraceImport& t,
        const std::string& device, std::int64_t microBatch)
    {
        fmt::print("Imported {} trace '{}' (schema {}): {} activities ({}), {} ranges naming nodes\n", t.format,
            o.trace, t.schemaVersion, t.activities, t.deviceActivity ? "kernels and copies" : "CPU op self times",
            t.ranges);
        fmt::print("Nodes matched  {} of {}\n", t.nodesMatched, graph.nodeCount());
        fmt::print("Matched        {} ({:.3f} ms)\n", t.matchedActivities, t.matchedNs / 1e6);
        fmt::print("Unmatched      {} ({:.3f} ms)\n", t.unmatchedActivities, t.unmatchedNs / 1e6);
        fmt::print("Total time     {:.3f} ms\n", t.totalNs / 1e6);
        for (const auto& u : t.unmatched)
            fmt::print("  unmatched    {:<40} {:6} x {:9.3f} ms\n", u.name, u.count, u.totalNs / 1e6);
        if (o.dryRun)
            fmt::print("Dry run: nothing saved\n");
        else
            fmt::print("Saved {} profile rows (device {}, source imported, micro-batch {}) to {}\n", graph.nodeCount(),
                device, microBatch, o.project);
    }

    int runImportTrace(const ImportTraceOptions& o)
    {
        // Everything is read and checked before the project is opened for writing.
        const auto graph = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly).loadGraph();
        const auto trace = profiler::importTrace(graph, o.trace);
        if (trace.nodesMatched == 0)
            throw Error("'" + o.trace + "': no range names a node or scope of the model in '" + o.project + "' ("
                + std::to_string(trace.activities) + " activities, none matched); name NVTX or record_function "
                + "ranges after nodes such as '" + graph.nodes().front().name + "'");
        const auto device = !o.device.empty() ? o.device : (trace.deviceActivity ? "cuda" : "cpu");
        const auto microBatch = o.microBatch > 0 ? o.microBatch : graph.info().microBatch;
        if (!o.dryRun) {
            const auto profile = profiler::toImportedProfile(graph, trace, device, microBatch);
            const auto b = static_cast<double>(microBatch);
            ProjectStore::open(o.project).saveProfile(profile, b, b);
        }
        if (o.json)
            fmt::print("{}\n", toJson(o, graph, trace, device, microBatch).dump(2));
        else
            printText(o, graph, trace, device, microBatch);
        return 0;
    }

} // namespace

void addImportTraceCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<ImportTraceOptions>();
    auto* cmd = app.add_subcommand("import-trace",
        "Per-node forward/backward times from an Nsight Systems SQLite export (nsys export --type sqlite) or a "
        "PyTorch profiler JSON trace, matched by NVTX/record_function range names, stored as an imported profile");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("trace", o->trace, "report.sqlite or trace.json")->required();
    cmd->add_option("--device", o->device, "Device kind of the profile rows (default: cuda for kernels, else cpu)");
    cmd->add_option("--micro-batch", o->microBatch,
           "Micro-batch size the trace was recorded at (default: the "
           "project's)")
        ->check(positiveUpTo(1 << 20));
    cmd->add_flag("--dry-run", o->dryRun, "Report the mapping without saving");
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, &action] { action = [o] { return runImportTrace(*o); }; });
}

} // namespace ps::app
