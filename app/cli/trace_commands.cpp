// `pipestudio import-trace`: per-node times from an Nsight Systems SQLite export or a PyTorch
// profiler JSON trace, stored as the project's "imported" profile, and the trace's timeline (its
// iterations' forward, backward and optimizer passes) stored as a run that `compare` and the
// studio's Predicted vs measured view set beside the simulation. Several traces, one per pipeline
// rank with `--cuts`, are each aligned with their stage's nodes and merged: the profile takes every
// node from its stage's trace, and the run has a device per rank.
// `pipestudio trace`: a training run's measured timeline as a Chrome trace.
#include "cli/commands.h"
#include "cli/validators.h"
#include "cluster/device_catalog.h"
#include "plan/partition.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "trace_import.h"
#include "trace_timeline.h"
#include "util/error.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

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

    // The iterations' shape of every stage's trace (stage 0's), checked to agree.
    std::pair<int, std::string> stagesShape(const std::vector<profiler::TraceImport>& stages)
    {
        const auto shape = timelineShape(stages.front().iterations);
        for (std::size_t s = 1; s < stages.size(); ++s) {
            if (timelineShape(stages[s].iterations).first != shape.first)
                throw Error("the traces of stage 0 and stage " + std::to_string(s)
                    + " run different numbers of forward passes per iteration");
        }
        return shape;
    }

    // The timeline as a finished run, a device per stage's trace (rank): its options, one metric
    // per iteration (from the first rank's start to the last rank's end; the ranks' traces share
    // the host's clock), and each iteration's passes as events. Returns the run id.
    std::int64_t storeTimelineRun(ProjectStore& store, const ImportTraceOptions& o,
        const std::vector<profiler::TraceImport>& stages, const std::string& device, std::int64_t microBatch,
        const std::string& cuts)
    {
        const auto [micro, schedule] = stagesShape(stages);
        const auto ranks = static_cast<int>(stages.size());
        std::size_t iterations = stages.front().iterations.size();
        for (const auto& t : stages)
            iterations = std::min(iterations, t.iterations.size());
        const std::string devices = ranks == 1 ? (device == "cpu" ? "cpu" : device + " (traced)")
                                               : fmt::format("{} x {} (traced ranks)", device, ranks);
        const nlohmann::ordered_json config { { "source", "trace" }, { "trace", o.trace },
            { "format", stages.front().format }, { "device_kind", device }, { "devices", devices },
            { "device_count", ranks }, { "stages", ranks }, { "schedule", schedule },
            { "micro_batches", std::max(1, micro) }, { "micro_batch", microBatch }, { "cuts", cuts },
            { "profile_source", "imported" }, { "precision", "fp32" }, { "steps", iterations } };
        const auto runId = store.beginRun(config.dump());
        std::vector<ProjectStore::RunMetric> metrics;
        for (std::size_t i = 0; i < iterations; ++i) {
            double origin = stages.front().iterations[i].startNs; // each iteration's events from its start
            double end = origin;
            for (const auto& t : stages) {
                origin = std::min(origin, t.iterations[i].startNs);
                end = std::max(end, t.iterations[i].endNs);
            }
            metrics.push_back({ static_cast<std::int64_t>(i + 1), 0.0, end - origin, 0.0 });
            std::vector<SimEvent> events;
            for (int r = 0; r < ranks; ++r) {
                for (const auto& a : stages[static_cast<std::size_t>(r)].iterations[i].actions) {
                    const auto type = a.kind == profiler::TraceActionKind::Forward ? ActionType::Forward
                        : a.kind == profiler::TraceActionKind::Backward            ? ActionType::Backward
                                                                                   : ActionType::OptimizerStep;
                    events.push_back({ DeviceId(static_cast<std::uint32_t>(r)), Stream::Compute, type,
                        StageId(static_cast<std::uint32_t>(r)), MicroBatchId(static_cast<std::uint32_t>(a.microBatch)),
                        a.startNs - origin, a.endNs - origin });
                }
            }
            store.saveRunEvents(runId, static_cast<std::int64_t>(i + 1), events);
        }
        store.appendRunMetrics(runId, metrics);
        store.endRun(runId, "finished");
        return runId;
    }

    // The stages' node windows from `--cuts` (node indices or names, as `plan --cuts` takes them).
    std::pair<std::vector<profiler::NodeWindow>, std::string> stageWindows(
        const ImportTraceOptions& o, const Graph& graph)
    {
        const auto stages = static_cast<int>(o.traces.size());
        if (stages == 1) {
            if (!o.cuts.empty())
                throw Error("--cuts splits the model over several traces, one per pipeline rank; one trace was given");
            return { { profiler::NodeWindow {} }, "" };
        }
        if (o.cuts.empty())
            throw Error(fmt::format("{} traces: say where their stages start with --cuts (the first node of stages "
                                    "1..{}, by index or name)",
                stages, stages - 1));
        std::string indices;
        std::stringstream in(o.cuts);
        for (std::string cut; std::getline(in, cut, ',');) {
            const bool number = !cut.empty() && std::all_of(cut.begin(), cut.end(), [](char c) {
                return std::isdigit(static_cast<unsigned char>(c));
            });
            std::string index = cut;
            if (!number) {
                const auto& nodes = graph.nodes();
                const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.name == cut; });
                if (it == nodes.end())
                    throw Error("--cuts: no node named '" + cut + "' in '" + o.project + "'");
                index = std::to_string(it->id.index());
            }
            indices += (indices.empty() ? "" : ",") + index;
        }
        Partition partition;
        try {
            partition = partitionFromCuts(indices, graph.nodeCount(), stages);
        } catch (const Error& e) {
            throw Error(std::string("--cuts: ") + e.what());
        }
        std::vector<profiler::NodeWindow> windows;
        for (int st = 0; st < stages; ++st) {
            const StageId id(static_cast<std::uint32_t>(st));
            windows.push_back({ partition.stageBegin(id), partition.stageEnd(id, graph.nodeCount()) });
        }
        return { windows, partition.cutsText() };
    }

    // Each trace imported over its stage's window; a trace that maps onto nothing, or covers under
    // --min-coverage (unless a dry run), is refused with the report of what it covered.
    std::vector<profiler::TraceImport> importStages(
        const ImportTraceOptions& o, const Graph& graph, const std::vector<profiler::NodeWindow>& windows)
    {
        std::vector<profiler::TraceImport> stages;
        for (std::size_t s = 0; s < o.traces.size(); ++s) {
            const auto& path = o.traces[s];
            auto trace = profiler::importTrace(graph, path, windows[s]);
            if (trace.nodesMatched == 0)
                throw Error("'" + path + "': no range names a node or scope of the model in '" + o.project + "' ("
                    + std::to_string(trace.activities) + " activities, none matched), and no framework operator of "
                    + "the trace aligns with its nodes; record it with torch.profiler.profile(record_shapes=True), or "
                    + "name NVTX or record_function ranges after nodes such as '" + graph.nodes().front().name + "'");
            // A half profile is refused with the report of what the trace covered.
            if (trace.coverage() < o.minCoverage && !o.dryRun) {
                std::string missed;
                for (std::size_t i = 0; i < trace.unmatched.size() && i < 3; ++i)
                    missed += (i > 0 ? "; " : "") + trace.unmatched[i].name.substr(0, 60) + " "
                        + fmt::format("{:.3f} ms", trace.unmatched[i].totalNs / 1e6);
                throw Error(fmt::format("'{}': only {:.1f}% of its forward and backward time maps to nodes of '{}' "
                                        "({} of {} nodes matched; --min-coverage {:.2f}); unmatched: {}",
                    path, 100 * trace.coverage(), o.project, trace.nodesMatched, graph.nodeCount(), o.minCoverage,
                    missed));
            }
            stages.push_back(std::move(trace));
        }
        return stages;
    }

    void printJson(const ImportTraceOptions& o, const Graph& graph, const profiler::TraceImport& trace,
        const std::vector<profiler::TraceImport>& stages, const std::vector<profiler::NodeWindow>& windows,
        const std::string& cuts, const std::string& device, std::int64_t microBatch, std::int64_t runId,
        const std::string& timelineNote)
    {
        auto j = toJson(o, graph, trace, device, microBatch);
        if (stages.size() > 1) {
            j["cuts"] = cuts;
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
        j["run"] = runId > 0 ? nlohmann::ordered_json(runId) : nlohmann::ordered_json();
        if (!timelineNote.empty())
            j["timeline_note"] = timelineNote;
        fmt::print("{}\n", j.dump(2));
    }

    // The device kind of a trace's rows where --device names none: the CPU for a CPU-only trace, the
    // catalog GPU its device properties match, else "cuda".
    std::string traceDevice(const profiler::TraceImport& trace)
    {
        if (!trace.deviceActivity)
            return "cpu";
        const auto* gpu =
            trace.gpuName.empty() ? nullptr : DeviceCatalog::builtin().matchGpu(trace.gpuName, trace.gpuMemoryBytes);
        return gpu != nullptr ? gpu->id : "cuda";
    }

    int runImportTrace(ImportTraceOptions o)
    {
        o.trace.clear();
        for (const auto& t : o.traces)
            o.trace += (o.trace.empty() ? "" : ", ") + t;
        // Everything is read and checked before the project is opened for writing.
        const auto graph = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly).loadGraph();
        const auto [windows, cuts] = stageWindows(o, graph);
        const auto stages = importStages(o, graph, windows);
        const auto trace = stages.size() == 1 ? stages.front() : profiler::mergeStageTraces(stages, windows);
        const auto device = !o.device.empty() ? o.device : traceDevice(trace);
        const auto microBatch = o.microBatch > 0 ? o.microBatch : graph.info().microBatch;
        // A timeline is a run where the simulator can predict it: on the CPU or a catalog GPU.
        const auto& catalog = DeviceCatalog::builtin().devices();
        const bool predictable = device == "cpu"
            || std::any_of(catalog.begin(), catalog.end(), [&](const DeviceSpec& d) { return d.id == device; });
        const bool timeline = std::all_of(
            stages.begin(), stages.end(), [](const profiler::TraceImport& t) { return !t.iterations.empty(); });
        // A trace without backward work (inference, a forward benchmark) is no training step to compare.
        const bool training = std::any_of(stages.begin(), stages.end(), [](const profiler::TraceImport& t) {
            return std::any_of(t.iterations.begin(), t.iterations.end(), [](const profiler::TraceIteration& it) {
                return std::any_of(it.actions.begin(), it.actions.end(),
                    [](const profiler::TraceAction& a) { return a.kind == profiler::TraceActionKind::Backward; });
            });
        });
        std::string timelineNote;
        if (!timeline) {
            timelineNote = "no timeline: no forward or backward pass matched";
        } else if (!training) {
            timelineNote = "timeline not stored as a run: the trace has forward passes only (no training step to "
                           "compare with a prediction)";
        } else if (!predictable) {
            timelineNote = "timeline not stored as a run: '" + device
                + "' is not a catalog device to predict it on (--device a100-80gb, h100-80gb, ...)";
        } else {
            try { // checked before anything is written
                (void)stagesShape(stages);
            } catch (const Error& e) {
                timelineNote = std::string("timeline not stored as a run: ") + e.what();
            }
        }
        std::int64_t runId = 0;
        if (!o.dryRun) {
            const auto profile = profiler::toImportedProfile(graph, trace, device, microBatch);
            const auto b = static_cast<double>(microBatch);
            auto store = ProjectStore::open(o.project);
            store.saveProfile(profile, b, b);
            if (timelineNote.empty())
                runId = storeTimelineRun(store, o, stages, device, microBatch, cuts);
        }
        if (o.json) {
            printJson(o, graph, trace, stages, windows, cuts, device, microBatch, runId, timelineNote);
            return 0;
        }
        for (std::size_t s = 0; s < stages.size() && stages.size() > 1; ++s)
            fmt::print(
                "Stage {}        nodes {}..{} from '{}': {} matched, coverage {:.1f}%, communication {:.3f} ms\n", s,
                windows[s].first, windows[s].end - 1, o.traces[s], stages[s].nodesMatched, 100 * stages[s].coverage(),
                stages[s].communicationNs / 1e6);
        printText(o, graph, trace, device, microBatch);
        if (timeline) {
            const auto& its = stages.front().iterations;
            fmt::print("Timeline       {} iteration(s){}, {} pass(es) each on stage 0; iteration {:.3f} ms (first), "
                       "{:.3f} ms (last)\n",
                its.size(), its.front().marked ? " (ProfilerStep ranges)" : "", its.front().actions.size(),
                (its.front().endNs - its.front().startNs) / 1e6, (its.back().endNs - its.back().startNs) / 1e6);
        }
        if (runId > 0)
            fmt::print("Stored the timeline as run {}: pipestudio compare {} --run {}\n", runId, o.project, runId);
        if (!timelineNote.empty())
            fmt::print("{}\n", timelineNote);
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
