#include "trace_files.h"

#include "cluster/device_catalog.h"
#include "plan/partition.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace ps::profiler {
namespace {

    // The iterations' shape of every stage's trace (stage 0's), checked to agree.
    std::pair<int, std::string> stagesShape(const std::vector<TraceImport>& stages)
    {
        const auto shape = timelineShape(stages.front().iterations);
        for (std::size_t s = 1; s < stages.size(); ++s) {
            if (timelineShape(stages[s].iterations).first != shape.first)
                throw Error("the traces of stage 0 and stage " + std::to_string(s)
                    + " run different numbers of forward passes per iteration");
        }
        return shape;
    }

    // The stages' node windows from the request's cuts (node indices or names, as `plan --cuts`
    // takes them) and those cuts as indices.
    std::pair<std::vector<NodeWindow>, std::string> stageWindows(const TraceFilesRequest& r, const Graph& graph)
    {
        const auto stages = static_cast<int>(r.traces.size());
        if (stages == 1) {
            if (!r.cuts.empty())
                throw Error("--cuts splits the model over several traces, one per pipeline rank; one trace was given");
            return { { NodeWindow {} }, "" };
        }
        if (r.cuts.empty())
            throw Error(fmt::format("{} traces: say where their stages start with --cuts (the first node of stages "
                                    "1..{}, by index or name)",
                stages, stages - 1));
        std::string indices;
        std::stringstream in(r.cuts);
        for (std::string cut; std::getline(in, cut, ',');) {
            const bool number = !cut.empty() && std::all_of(cut.begin(), cut.end(), [](char c) {
                return std::isdigit(static_cast<unsigned char>(c));
            });
            std::string index = cut;
            if (!number) {
                const auto& nodes = graph.nodes();
                const auto it = std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.name == cut; });
                if (it == nodes.end())
                    throw Error("--cuts: no node named '" + cut + "' in '" + r.project + "'");
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
        std::vector<NodeWindow> windows;
        for (int st = 0; st < stages; ++st) {
            const StageId id(static_cast<std::uint32_t>(st));
            windows.push_back({ partition.stageBegin(id), partition.stageEnd(id, graph.nodeCount()) });
        }
        return { windows, partition.cutsText() };
    }

    // Each trace imported over its stage's window; a trace that maps onto nothing, or covers under
    // the minimum (unless a dry run), is refused with the report of what it covered.
    std::vector<TraceImport> importStages(
        const TraceFilesRequest& r, const Graph& graph, const std::vector<NodeWindow>& windows)
    {
        std::vector<TraceImport> stages;
        for (std::size_t s = 0; s < r.traces.size(); ++s) {
            const auto& path = r.traces[s];
            auto trace = importTrace(graph, path, windows[s]);
            if (trace.nodesMatched == 0)
                throw Error("'" + path + "': no range names a node or scope of the model in '" + r.project + "' ("
                    + std::to_string(trace.activities) + " activities, none matched), and no framework operator of "
                    + "the trace aligns with its nodes; record it with torch.profiler.profile(record_shapes=True), or "
                    + "name NVTX or record_function ranges after nodes such as '" + graph.nodes().front().name + "'");
            if (trace.coverage() < r.minCoverage && !r.dryRun) {
                std::string missed;
                for (std::size_t i = 0; i < trace.unmatched.size() && i < 3; ++i)
                    missed += (i > 0 ? "; " : "") + trace.unmatched[i].name.substr(0, 60) + " "
                        + fmt::format("{:.3f} ms", trace.unmatched[i].totalNs / 1e6);
                throw Error(fmt::format("'{}': only {:.1f}% of its forward and backward time maps to nodes of '{}' "
                                        "({} of {} nodes matched; --min-coverage {:.2f}); unmatched: {}",
                    path, 100 * trace.coverage(), r.project, trace.nodesMatched, graph.nodeCount(), r.minCoverage,
                    missed));
            }
            stages.push_back(std::move(trace));
        }
        return stages;
    }

    // Why the traces' timeline cannot be a run to compare with a prediction; empty when it can.
    std::string timelineNote(const TraceFilesImport& t)
    {
        if (!t.timeline)
            return "no timeline: no forward or backward pass matched";
        // A trace without backward work (inference, a forward benchmark) is no training step to compare.
        const bool training = std::any_of(t.stages.begin(), t.stages.end(), [](const TraceImport& s) {
            return std::any_of(s.iterations.begin(), s.iterations.end(), [](const TraceIteration& it) {
                return std::any_of(it.actions.begin(), it.actions.end(),
                    [](const TraceAction& a) { return a.kind == TraceActionKind::Backward; });
            });
        });
        if (!training)
            return "timeline not stored as a run: the trace has forward passes only (no training step to compare "
                   "with a prediction)";
        // A timeline is a run where the simulator can predict it: on the CPU or a catalog GPU.
        const auto& catalog = DeviceCatalog::builtin().devices();
        if (t.device != "cpu"
            && std::none_of(catalog.begin(), catalog.end(), [&](const DeviceSpec& d) { return d.id == t.device; }))
            return "timeline not stored as a run: '" + t.device
                + "' is not a catalog device to predict it on (--device a100-80gb, h100-80gb, ...)";
        try {
            (void)stagesShape(t.stages);
        } catch (const Error& e) {
            return std::string("timeline not stored as a run: ") + e.what();
        }
        return {};
    }

    // The timeline as a finished run, a device per stage's trace (rank): its options, one metric
    // per iteration (from the first rank's start to the last rank's end; the ranks' traces share
    // the host's clock), and each iteration's passes as events. Returns the run id.
    std::int64_t storeTimelineRun(ProjectStore& store, const TraceFilesImport& t)
    {
        const auto& stages = t.stages;
        const auto [micro, schedule] = stagesShape(stages);
        const auto ranks = static_cast<int>(stages.size());
        std::size_t iterations = stages.front().iterations.size();
        for (const auto& s : stages)
            iterations = std::min(iterations, s.iterations.size());
        const std::string devices = ranks == 1 ? (t.device == "cpu" ? "cpu" : t.device + " (traced)")
                                               : fmt::format("{} x {} (traced ranks)", t.device, ranks);
        const nlohmann::ordered_json config { { "source", "trace" }, { "trace", t.traceLine },
            { "format", stages.front().format }, { "device_kind", t.device }, { "devices", devices },
            { "device_count", ranks }, { "stages", ranks }, { "schedule", schedule },
            { "micro_batches", std::max(1, micro) }, { "micro_batch", t.microBatch }, { "cuts", t.cuts },
            { "profile_source", "imported" }, { "precision", "fp32" }, { "steps", iterations } };
        const auto runId = store.beginRun(config.dump());
        std::vector<ProjectStore::RunMetric> metrics;
        for (std::size_t i = 0; i < iterations; ++i) {
            double origin = stages.front().iterations[i].startNs; // each iteration's events from its start
            double end = origin;
            for (const auto& s : stages) {
                origin = std::min(origin, s.iterations[i].startNs);
                end = std::max(end, s.iterations[i].endNs);
            }
            metrics.push_back({ static_cast<std::int64_t>(i + 1), 0.0, end - origin, 0.0 });
            std::vector<SimEvent> events;
            for (int r = 0; r < ranks; ++r) {
                for (const auto& a : stages[static_cast<std::size_t>(r)].iterations[i].actions) {
                    const auto type = a.kind == TraceActionKind::Forward ? ActionType::Forward
                        : a.kind == TraceActionKind::Backward            ? ActionType::Backward
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

} // namespace

std::string traceDevice(const TraceImport& trace)
{
    if (!trace.deviceActivity)
        return "cpu";
    const auto* gpu =
        trace.gpuName.empty() ? nullptr : DeviceCatalog::builtin().matchGpu(trace.gpuName, trace.gpuMemoryBytes);
    return gpu != nullptr ? gpu->id : "cuda";
}

std::pair<int, std::string> timelineShape(const std::vector<TraceIteration>& iterations)
{
    int micro = -1;
    bool interleaved = false;
    for (const auto& it : iterations) {
        int forwards = 0;
        bool backwardSeen = false;
        for (const auto& a : it.actions) {
            if (a.kind == TraceActionKind::Forward) {
                ++forwards;
                interleaved = interleaved || backwardSeen;
            }
            backwardSeen = backwardSeen || a.kind == TraceActionKind::Backward;
        }
        if (micro >= 0 && forwards != micro)
            throw Error("iterations of the trace run " + std::to_string(micro) + " and " + std::to_string(forwards)
                + " forward passes");
        micro = forwards;
    }
    return { micro, interleaved || micro <= 1 ? "1f1b" : "gpipe" };
}

TraceFilesImport readTraceFiles(const TraceFilesRequest& request)
{
    if (request.traces.empty())
        throw Error("no trace to import into '" + request.project + "'");
    TraceFilesImport t;
    for (const auto& path : request.traces)
        t.traceLine += (t.traceLine.empty() ? "" : ", ") + path;
    t.graph = ProjectStore::open(request.project, ProjectStore::Access::ReadOnly).loadGraph();
    std::tie(t.windows, t.cuts) = stageWindows(request, t.graph);
    t.stages = importStages(request, t.graph, t.windows);
    t.merged = t.stages.size() == 1 ? t.stages.front() : mergeStageTraces(t.stages, t.windows);
    t.device = !request.device.empty() ? request.device : traceDevice(t.merged);
    t.microBatch = request.microBatch > 0 ? request.microBatch : t.graph.info().microBatch;
    t.timeline =
        std::all_of(t.stages.begin(), t.stages.end(), [](const TraceImport& s) { return !s.iterations.empty(); });
    t.timelineNote = timelineNote(t);
    return t;
}

std::int64_t saveTraceFiles(const TraceFilesRequest& request, TraceFilesImport& read)
{
    if (request.dryRun)
        throw Error("a dry run of the import of '" + read.traceLine + "' saves nothing");
    const auto profile = toImportedProfile(read.graph, read.merged, read.device, read.microBatch);
    const auto b = static_cast<double>(read.microBatch);
    auto store = ProjectStore::open(request.project);
    store.saveProfile(profile, b, b);
    read.runId = read.timelineNote.empty() ? storeTimelineRun(store, read) : 0;
    return read.runId;
}

} // namespace ps::profiler
