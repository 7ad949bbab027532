// `pipestudio import-trace`: per-node times from an Nsight Systems SQLite export or a PyTorch
// profiler JSON trace, stored as the project's "imported" profile, and the trace's timeline (its
// iterations' forward, backward and optimizer passes) stored as a run that `compare` and the
// studio's Predicted vs measured view set beside the simulation. Several traces, one per pipeline
// rank with `--cuts`, are each aligned with their stage's nodes and merged: the profile takes every
// node from its stage's trace, and the run has a device per rank.
// `pipestudio trace`: a training run's measured timeline as a Chrome trace.
#include "cli/commands.h"
#include "cli/validators.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "trace_files.h"
#include "trace_import.h"
#include "trace_timeline.h"
#include "util/error.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace ps::app {
namespace {

    struct ImportTraceOptions
    {
        std::string project;
        std::vector<std::string> traces; // one, or one per pipeline rank (stage order)
        std::string cuts; // with several traces: the first node (index or name) of stages 1..S-1
        std::string trace; // the traces as one line, for reports
        std::string device; // empty: traceDevice()
        std::int64_t microBatch = 0; // 0: the project's
        bool dryRun = false;
        double minCoverage = 0.5; // of the forward and backward work's time, attributed to nodes
        bool json = false;
    };

    nlohmann::ordered_json toJson(const ImportTraceOptions& o, const Graph& graph, const profiler::TraceImport& t,
        const std::string& device, std::int64_t microBatch)
    {
        nlohmann::ordered_json j { { "trace", o.trace }, { "format", t.format }, { "schema_version", t.schemaVersion },
            { "activity", t.deviceActivity ? "kernels" : "cpu-ops" }, { "device", device }, { "gpu", t.gpuName },
            { "gpu_memory_bytes", t.gpuMemoryBytes }, { "source", "imported" }, { "micro_batch", microBatch },
            { "saved", !o.dryRun }, { "ranges", t.ranges }, { "activities", t.activities },
            { "matched", t.matchedActivities }, { "unmatched", t.unmatchedActivities }, { "total_ms", t.totalNs / 1e6 },
            { "matched_ms", t.matchedNs / 1e6 }, { "unmatched_ms", t.unmatchedNs / 1e6 },
            { "optimizer", t.optimizerActivities }, { "optimizer_ms", t.optimizerNs / 1e6 },
            { "communication", t.communicationActivities }, { "communication_ms", t.communicationNs / 1e6 },
            { "setup", t.setupActivities }, { "setup_ms", t.setupNs / 1e6 }, { "input_copies", t.inputCopyActivities },
            { "input_copies_ms", t.inputCopyNs / 1e6 }, { "nodes_matched", t.nodesMatched },
            { "nodes_total", graph.nodeCount() }, { "coverage", t.coverage() },
            { "aligned_by_operator_order", t.aligned }, { "module_ranges", t.moduleRanges }, { "modules", t.modules },
            { "modules_not_named", t.modulesNotNamed } };
        if (t.aligned)
            j["alignment"] = { { "passes", t.alignment.passes }, { "operators", t.alignment.operators },
                { "aligned_operators", t.alignment.alignedOperators }, { "nodes_covered", t.alignment.nodesCovered },
                { "nodes", t.alignment.nodes }, { "passes_too_large", t.alignment.passesTooLarge } };
        j["unmatched_names"] = nlohmann::ordered_json::array();
        for (const auto& u : t.unmatched)
            j["unmatched_names"].push_back({ { "name", u.name }, { "short_name", profiler::shortKernelName(u.name) },
                { "count", u.count }, { "ms", u.totalNs / 1e6 } });
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
        if (t.moduleRanges > 0 || !t.modulesNotNamed.empty())
            fmt::print("Module calls (nn.Module ranges, with_stack): {} named after {} modules of the model{}\n",
                t.moduleRanges, t.modules,
                t.modulesNotNamed.empty() ? ""
                                          : "; not named: " + fmt::format("{}", fmt::join(t.modulesNotNamed, ", ")));
        if (t.aligned)
            fmt::print("{}: aligned {} of {} operators in {} forward pass(es) to nodes by "
                       "order, kind and shape ({} of {} computing nodes covered)\n",
                t.moduleRanges > 0 ? "Within them"
                    : t.ranges > 0 ? "Ranges cover under half of it"
                                   : "No range names a node",
                t.alignment.alignedOperators, t.alignment.operators, t.alignment.passes, t.alignment.nodesCovered,
                t.alignment.nodes);
        if (!t.gpuName.empty())
            fmt::print("GPU            {} ({:.1f} GiB): rows for device {}\n", t.gpuName,
                static_cast<double>(t.gpuMemoryBytes) / (1024.0 * 1024.0 * 1024.0), device);
        fmt::print("Nodes matched  {} of {}\n", t.nodesMatched, graph.nodeCount());
        fmt::print("Matched        {} ({:.3f} ms)\n", t.matchedActivities, t.matchedNs / 1e6);
        fmt::print("Unmatched      {} ({:.3f} ms)\n", t.unmatchedActivities, t.unmatchedNs / 1e6);
        if (t.optimizerActivities > 0)
            fmt::print("Optimizer      {} ({:.3f} ms)\n", t.optimizerActivities, t.optimizerNs / 1e6);
        if (t.communicationActivities > 0)
            fmt::print("Communication  {} ({:.3f} ms: sends, receives, collectives)\n", t.communicationActivities,
                t.communicationNs / 1e6);
        if (t.setupActivities > 0)
            fmt::print("Set-up         {} ({:.3f} ms: initialisations and host-to-device copies before the first "
                       "node's work, e.g. the parameters')\n",
                t.setupActivities, t.setupNs / 1e6);
        if (t.inputCopyActivities > 0)
            fmt::print("Input copies   {} ({:.3f} ms: host-to-device copies no node made, the batches)\n",
                t.inputCopyActivities, t.inputCopyNs / 1e6);
        fmt::print("Total time     {:.3f} ms\n", t.totalNs / 1e6);
        fmt::print("Coverage       {:.1f}% of the forward and backward time on nodes{}\n", 100 * t.coverage(),
            t.coverage() < o.minCoverage
                ? fmt::format(" (below --min-coverage {:.2f}: would be refused)", o.minCoverage)
                : "");
        for (const auto& u : t.unmatched)
            fmt::print("  unmatched    {:<40} {:6} x {:9.3f} ms\n", profiler::shortKernelName(u.name), u.count,
                u.totalNs / 1e6);
        if (o.dryRun)
            fmt::print("Dry run: nothing saved\n");
        else
            fmt::print("Saved {} profile rows (device {}, source imported, micro-batch {}) to {}\n", graph.nodeCount(),
                device, microBatch, o.project);
    }

    void printJson(const ImportTraceOptions& o, const profiler::TraceFilesImport& t)
    {
        const auto& stages = t.stages;
        const auto& windows = t.windows;
        auto j = toJson(o, t.graph, t.merged, t.device, t.microBatch);
        if (stages.size() > 1) {
            j["cuts"] = t.cuts;
            j["stages"] = nlohmann::ordered_json::array();
            for (std::size_t s = 0; s < stages.size(); ++s)
                j["stages"].push_back({ { "trace", o.traces[s] }, { "first_node", windows[s].first },
                    { "end_node", windows[s].end }, { "nodes_matched", stages[s].nodesMatched },
                    { "coverage", stages[s].coverage() }, { "communication_ms", stages[s].communicationNs / 1e6 } });
        }
        j["iterations"] = nlohmann::ordered_json::array();
        for (const auto& it : stages.front().iterations) {
            nlohmann::ordered_json row { { "ms", (it.endNs - it.startNs) / 1e6 }, { "marked", it.marked } };
            for (const auto& a : it.actions) {
                const char* kind = a.kind == profiler::TraceActionKind::Forward ? "F"
                    : a.kind == profiler::TraceActionKind::Backward             ? "B"
                                                                                : "OPT_STEP";
                row["actions"].push_back({ { "action", kind }, { "micro_batch", a.microBatch },
                    { "start_ms", (a.startNs - it.startNs) / 1e6 }, { "ms", (a.endNs - a.startNs) / 1e6 } });
            }
            j["iterations"].push_back(row);
        }
        j["run"] = t.runId > 0 ? nlohmann::ordered_json(t.runId) : nlohmann::ordered_json();
        if (!t.timelineNote.empty())
            j["timeline_note"] = t.timelineNote;
        fmt::print("{}\n", j.dump(2));
    }

    int runImportTrace(ImportTraceOptions o)
    {
        const profiler::TraceFilesRequest request { o.project, o.traces, o.cuts, o.device, o.microBatch, o.dryRun,
            o.minCoverage };
        auto read = profiler::readTraceFiles(request);
        o.trace = read.traceLine;
        if (!o.dryRun)
            profiler::saveTraceFiles(request, read);
        if (o.json) {
            printJson(o, read);
            return 0;
        }
        const auto& stages = read.stages;
        for (std::size_t s = 0; s < stages.size() && stages.size() > 1; ++s)
            fmt::print(
                "Stage {}        nodes {}..{} from '{}': {} matched, coverage {:.1f}%, communication {:.3f} ms\n", s,
                read.windows[s].first, read.windows[s].end - 1, o.traces[s], stages[s].nodesMatched,
                100 * stages[s].coverage(), stages[s].communicationNs / 1e6);
        printText(o, read.graph, read.merged, read.device, read.microBatch);
        if (read.timeline) {
            const auto& its = stages.front().iterations;
            fmt::print("Timeline       {} iteration(s){}, {} pass(es) each on stage 0; iteration {:.3f} ms (first), "
                       "{:.3f} ms (last)\n",
                its.size(), its.front().marked ? " (ProfilerStep ranges)" : "", its.front().actions.size(),
                (its.front().endNs - its.front().startNs) / 1e6, (its.back().endNs - its.back().startNs) / 1e6);
        }
        if (read.runId > 0)
            fmt::print(
                "Stored the timeline as run {}: pipestudio compare {} --run {}\n", read.runId, o.project, read.runId);
        if (!read.timelineNote.empty())
            fmt::print("{}\n", read.timelineNote);
        return 0;
    }

    struct TraceOptions
    {
        std::string project;
        std::int64_t run = 0;
        std::int64_t iteration = 0;
        std::string output;
    };

    int runTrace(const TraceOptions& o)
    {
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        const auto runId = o.run > 0 ? o.run : store.latestRunId();
        if (runId == 0)
            throw Error("'" + o.project + "' has no training runs");
        const auto iterations = store.runEventIterations(runId);
        if (iterations.empty())
            throw Error("run " + std::to_string(runId) + " of '" + o.project + "' stored no timeline");
        const auto iteration = o.iteration > 0 ? o.iteration : iterations.front();
        if (std::find(iterations.begin(), iterations.end(), iteration) == iterations.end())
            throw Error(
                "run " + std::to_string(runId) + " stored no timeline for iteration " + std::to_string(iteration));
        SimulationResult r;
        r.scheduleName = "measured run " + std::to_string(runId) + ", iteration " + std::to_string(iteration);
        r.events = store.loadRunEvents(runId, iteration);
        std::uint32_t devices = 0;
        for (const auto& e : r.events) {
            devices = std::max(devices, e.device.value + 1);
            r.iterationNs = std::max(r.iterationNs, e.endNs);
        }
        r.devices.resize(devices);
        std::ofstream out(o.output, std::ios::binary);
        out << toChromeTrace(r);
        if (!out)
            throw Error("cannot write '" + o.output + "'");
        fmt::print("Wrote {} events of run {} iteration {} ({} device(s)) to {}\n", r.events.size(), runId, iteration,
            devices, o.output);
        return 0;
    }

} // namespace

// `trace`: a training run's measured timeline as a Chrome trace (registered after `train`).
void addTraceCommand(CLI::App& app, Action& action)
{
    auto t = std::make_shared<TraceOptions>();
    auto* trace = app.add_subcommand("trace", "Export a training run's measured timeline as a Chrome trace (Perfetto)");
    trace->add_option("project", t->project, "Project file (.pstudio)")->required();
    trace->add_option("--run", t->run, "Run id (default: the newest)")
        ->check(CLI::Range(std::int64_t { 1 }, std::numeric_limits<std::int64_t>::max()));
    trace->add_option("--iteration", t->iteration, "Step whose timeline to export (default: the first stored)")
        ->check(CLI::Range(std::int64_t { 1 }, std::numeric_limits<std::int64_t>::max()));
    trace->add_option("-o,--output", t->output, "Trace JSON to write")->required();
    trace->callback([t, &action] { action = [t] { return runTrace(*t); }; });
}

void addImportTraceCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<ImportTraceOptions>();
    auto* cmd = app.add_subcommand("import-trace",
        "Per-node forward/backward times from an Nsight Systems SQLite export (nsys export --type sqlite) or a "
        "PyTorch profiler JSON trace, matched by NVTX/record_function range names or aligned by operator order, "
        "stored as an imported profile; one trace per pipeline rank merged by stage");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("trace", o->traces, "report.sqlite or trace.json; several: one per pipeline rank, with --cuts")
        ->required();
    cmd->add_option("--cuts", o->cuts,
        "With one trace per pipeline rank: the first node of stages 1..S-1, by index or name (\"12\", "
        "\"/h.1/ln_1/LayerNormalization\"); each trace aligns with its stage's nodes");
    cmd->add_option("--device", o->device,
        "Device kind of the profile rows (default: the catalog GPU the trace's device properties match, else cuda "
        "for kernels; cpu for a CPU-only trace)");
    cmd->add_option("--micro-batch", o->microBatch,
           "Micro-batch size the trace was recorded at (default: the "
           "project's)")
        ->check(positiveUpTo(1 << 20));
    cmd->add_flag("--dry-run", o->dryRun, "Report the mapping without saving");
    cmd->add_option("--min-coverage", o->minCoverage,
           "Refuse a trace whose time on nodes is below this share of its forward and backward work (default 0.5)")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, &action] { action = [o] { return runImportTrace(*o); }; });
}

} // namespace ps::app
