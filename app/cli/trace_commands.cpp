// `pipestudio import-trace`: per-node times from an Nsight Systems SQLite export or a PyTorch
// profiler JSON trace, stored as the project's "imported" profile, and the trace's timeline (its
// iterations' forward, backward and optimizer passes) stored as a run that `compare` and the
// studio's Predicted vs measured view set beside the simulation.
#include "cli/commands.h"
#include "cli/validators.h"
#include "cluster/device_catalog.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "trace_import.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace ps::app {
namespace {

    struct ImportTraceOptions
    {
        std::string project;
        std::string trace;
        std::string device; // empty: "cuda" for kernel traces, "cpu" for CPU-only ones
        std::int64_t microBatch = 0; // 0: the project's
        bool dryRun = false;
        double minCoverage = 0.5; // of the forward and backward work's time, attributed to nodes
        bool json = false;
    };

    // The share of the trace's forward and backward time (its optimizer step's left out) on nodes.
    double coverageOf(const profiler::TraceImport& t)
    {
        const double work = t.totalNs - t.optimizerNs;
        return work > 0 ? t.matchedNs / work : 0.0;
    }

    nlohmann::ordered_json toJson(const ImportTraceOptions& o, const Graph& graph, const profiler::TraceImport& t,
        const std::string& device, std::int64_t microBatch)
    {
        nlohmann::ordered_json j { { "trace", o.trace }, { "format", t.format }, { "schema_version", t.schemaVersion },
            { "activity", t.deviceActivity ? "kernels" : "cpu-ops" }, { "device", device }, { "source", "imported" },
            { "micro_batch", microBatch }, { "saved", !o.dryRun }, { "ranges", t.ranges },
            { "activities", t.activities }, { "matched", t.matchedActivities }, { "unmatched", t.unmatchedActivities },
            { "total_ms", t.totalNs / 1e6 }, { "matched_ms", t.matchedNs / 1e6 },
            { "unmatched_ms", t.unmatchedNs / 1e6 }, { "optimizer", t.optimizerActivities },
            { "optimizer_ms", t.optimizerNs / 1e6 }, { "nodes_matched", t.nodesMatched },
            { "nodes_total", graph.nodeCount() }, { "coverage", coverageOf(t) },
            { "aligned_by_operator_order", t.aligned } };
        if (t.aligned)
            j["alignment"] = { { "passes", t.alignment.passes }, { "operators", t.alignment.operators },
                { "aligned_operators", t.alignment.alignedOperators }, { "nodes_covered", t.alignment.nodesCovered },
                { "nodes", t.alignment.nodes }, { "passes_too_large", t.alignment.passesTooLarge } };
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
        if (t.aligned)
            fmt::print("Ranges cover under half of it: aligned {} of {} operators in {} forward pass(es) to nodes by "
                       "order, kind and shape ({} of {} computing nodes covered)\n",
                t.alignment.alignedOperators, t.alignment.operators, t.alignment.passes, t.alignment.nodesCovered,
                t.alignment.nodes);
        fmt::print("Nodes matched  {} of {}\n", t.nodesMatched, graph.nodeCount());
        fmt::print("Matched        {} ({:.3f} ms)\n", t.matchedActivities, t.matchedNs / 1e6);
        fmt::print("Unmatched      {} ({:.3f} ms)\n", t.unmatchedActivities, t.unmatchedNs / 1e6);
        if (t.optimizerActivities > 0)
            fmt::print("Optimizer      {} ({:.3f} ms)\n", t.optimizerActivities, t.optimizerNs / 1e6);
        fmt::print("Total time     {:.3f} ms\n", t.totalNs / 1e6);
        fmt::print("Coverage       {:.1f}% of the forward and backward time on nodes{}\n", 100 * coverageOf(t),
            coverageOf(t) < o.minCoverage
                ? fmt::format(" (below --min-coverage {:.2f}: would be refused)", o.minCoverage)
                : "");
        for (const auto& u : t.unmatched)
            fmt::print("  unmatched    {:<40} {:6} x {:9.3f} ms\n", u.name, u.count, u.totalNs / 1e6);
        if (o.dryRun)
            fmt::print("Dry run: nothing saved\n");
        else
            fmt::print("Saved {} profile rows (device {}, source imported, micro-batch {}) to {}\n", graph.nodeCount(),
                device, microBatch, o.project);
    }

    // The iterations' shape: micro-batches (forward passes) per iteration and whether they run
    // F B F B (gradient accumulation, 1F1B on one stage) or F F B B (GPipe). Throws when the
    // iterations disagree.
    std::pair<int, std::string> timelineShape(const std::vector<profiler::TraceIteration>& iterations)
    {
        int micro = -1;
        bool interleaved = false;
        for (const auto& it : iterations) {
            int forwards = 0;
            bool backwardSeen = false;
            for (const auto& a : it.actions) {
                if (a.kind == profiler::TraceActionKind::Forward) {
                    ++forwards;
                    interleaved = interleaved || backwardSeen;
                }
                backwardSeen = backwardSeen || a.kind == profiler::TraceActionKind::Backward;
            }
            if (micro >= 0 && forwards != micro)
                throw Error("iterations of the trace run " + std::to_string(micro) + " and " + std::to_string(forwards)
                    + " forward passes");
            micro = forwards;
        }
        return { micro, interleaved || micro <= 1 ? "1f1b" : "gpipe" };
    }

    // The timeline as a finished run of one device: its options, one metric per iteration, and
    // each iteration's passes as events. Returns the run id.
    std::int64_t storeTimelineRun(ProjectStore& store, const ImportTraceOptions& o, const profiler::TraceImport& t,
        const std::string& device, std::int64_t microBatch)
    {
        const auto [micro, schedule] = timelineShape(t.iterations);
        const nlohmann::ordered_json config { { "source", "trace" }, { "trace", o.trace }, { "format", t.format },
            { "device_kind", device }, { "devices", device == "cpu" ? "cpu" : device + " (traced)" },
            { "device_count", 1 }, { "stages", 1 }, { "schedule", schedule }, { "micro_batches", std::max(1, micro) },
            { "micro_batch", microBatch }, { "cuts", "" }, { "profile_source", "imported" }, { "precision", "fp32" },
            { "steps", t.iterations.size() } };
        const auto runId = store.beginRun(config.dump());
        std::vector<ProjectStore::RunMetric> metrics;
        for (std::size_t i = 0; i < t.iterations.size(); ++i) {
            const auto& it = t.iterations[i];
            const double origin = it.startNs; // each iteration's events from its start, as runs store them
            metrics.push_back({ static_cast<std::int64_t>(i + 1), 0.0, it.endNs - it.startNs, 0.0 });
            std::vector<SimEvent> events;
            for (const auto& a : it.actions) {
                const auto type = a.kind == profiler::TraceActionKind::Forward ? ActionType::Forward
                    : a.kind == profiler::TraceActionKind::Backward            ? ActionType::Backward
                                                                               : ActionType::OptimizerStep;
                events.push_back({ DeviceId(0), Stream::Compute, type, StageId(0),
                    MicroBatchId(static_cast<std::uint32_t>(a.microBatch)), a.startNs - origin, a.endNs - origin });
            }
            store.saveRunEvents(runId, static_cast<std::int64_t>(i + 1), events);
        }
        store.appendRunMetrics(runId, metrics);
        store.endRun(runId, "finished");
        return runId;
    }

    int runImportTrace(const ImportTraceOptions& o)
    {
        // Everything is read and checked before the project is opened for writing.
        const auto graph = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly).loadGraph();
        const auto trace = profiler::importTrace(graph, o.trace);
        if (trace.nodesMatched == 0)
            throw Error("'" + o.trace + "': no range names a node or scope of the model in '" + o.project + "' ("
                + std::to_string(trace.activities) + " activities, none matched), and no framework operator of the "
                + "trace aligns with its nodes; record it with torch.profiler.profile(record_shapes=True), or name "
                + "NVTX or record_function ranges after nodes such as '" + graph.nodes().front().name + "'");
        // A half profile is refused with the report of what the trace covered.
        const double coverage = coverageOf(trace);
        if (coverage < o.minCoverage && !o.dryRun) {
            std::string missed;
            for (std::size_t i = 0; i < trace.unmatched.size() && i < 3; ++i)
                missed += (i > 0 ? "; " : "") + trace.unmatched[i].name.substr(0, 60) + " "
                    + fmt::format("{:.3f} ms", trace.unmatched[i].totalNs / 1e6);
            throw Error(
                fmt::format("'{}': only {:.1f}% of its forward and backward time maps to nodes of '{}' ({} of {} "
                            "nodes matched; --min-coverage {:.2f}); unmatched: {}",
                    o.trace, 100 * coverage, o.project, trace.nodesMatched, graph.nodeCount(), o.minCoverage, missed));
        }
        const auto device = !o.device.empty() ? o.device : (trace.deviceActivity ? "cuda" : "cpu");
        const auto microBatch = o.microBatch > 0 ? o.microBatch : graph.info().microBatch;
        // A timeline is a run where the simulator can predict it: on the CPU or a catalog GPU.
        const auto& catalog = DeviceCatalog::builtin().devices();
        const bool predictable = device == "cpu"
            || std::any_of(catalog.begin(), catalog.end(), [&](const DeviceSpec& d) { return d.id == device; });
        std::string timelineNote;
        if (trace.iterations.empty())
            timelineNote = "no timeline: no forward or backward pass matched";
        else if (!predictable)
            timelineNote = "timeline not stored as a run: '" + device
                + "' is not a catalog device to predict it on (--device a100-80gb, h100-80gb, ...)";
        else
            (void)timelineShape(trace.iterations); // checked before anything is written
        std::int64_t runId = 0;
        if (!o.dryRun) {
            const auto profile = profiler::toImportedProfile(graph, trace, device, microBatch);
            const auto b = static_cast<double>(microBatch);
            auto store = ProjectStore::open(o.project);
            store.saveProfile(profile, b, b);
            if (predictable && !trace.iterations.empty())
                runId = storeTimelineRun(store, o, trace, device, microBatch);
        }
        if (o.json) {
            auto j = toJson(o, graph, trace, device, microBatch);
            j["iterations"] = nlohmann::ordered_json::array();
            for (const auto& it : trace.iterations) {
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
            j["run"] = runId > 0 ? nlohmann::ordered_json(runId) : nlohmann::ordered_json();
            if (!timelineNote.empty())
                j["timeline_note"] = timelineNote;
            fmt::print("{}\n", j.dump(2));
        } else {
            printText(o, graph, trace, device, microBatch);
            if (!trace.iterations.empty()) {
                std::vector<double> ms;
                for (const auto& it : trace.iterations)
                    ms.push_back((it.endNs - it.startNs) / 1e6);
                fmt::print("Timeline       {} iteration(s){}, {} pass(es) each; iteration {:.3f} ms (first), {:.3f} "
                           "ms (last)\n",
                    trace.iterations.size(), trace.iterations.front().marked ? " (ProfilerStep ranges)" : "",
                    trace.iterations.front().actions.size(), ms.front(), ms.back());
            }
            if (runId > 0)
                fmt::print("Stored the timeline as run {}: pipestudio compare {} --run {}\n", runId, o.project, runId);
            if (!timelineNote.empty())
                fmt::print("{}\n", timelineNote);
        }
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
    cmd->add_option("--min-coverage", o->minCoverage,
           "Refuse a trace whose time on nodes is below this share of its forward and backward work (default 0.5)")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, &action] { action = [o] { return runImportTrace(*o); }; });
}

} // namespace ps::app
