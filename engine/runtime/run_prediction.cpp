#include "runtime/run_prediction.h"

#include "cluster/json_detail.h"
#include "cpu/thread_affinity.h"
#include "cpu_probe.h"
#include "graph/graph_summary.h"
#include "plan/partition.h"
#include "plan/stage_model.h"
#include "runtime/training_run.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

namespace ps::engine {
namespace {

    std::vector<TensorId> tensorList(const nlohmann::json& j)
    {
        std::vector<TensorId> out;
        if (j.is_array()) {
            for (const auto& v : j)
                out.emplace_back(v.get<std::uint32_t>());
        }
        return out;
    }

    // Each stage's swap and recompute plan as a stored plan's stage_details (and a run's
    // memory_plans) write it.
    std::vector<StageMemoryPlan> memoryPlansFromJson(const nlohmann::json& stages)
    {
        std::vector<StageMemoryPlan> out;
        for (const auto& st : stages) {
            StageMemoryPlan m;
            m.swappedBytes = st.value("swapped_bytes", 0.0);
            m.recomputedBytes = st.value("recomputed_bytes", 0.0);
            m.keptInputBytes = st.value("kept_input_bytes", 0.0);
            m.swappedTensors = tensorList(st.value("swapped_tensors", nlohmann::json()));
            m.recomputedTensors = tensorList(st.value("recomputed_tensors", nlohmann::json()));
            out.push_back(m);
        }
        return out;
    }

    // "512MiB", "1e9", "1048576" as `pipestudio train --device-memory` reads them; 0 when empty.
    std::int64_t bytesOf(const std::string& text)
    {
        if (text.empty())
            return 0;
        std::size_t used = 0;
        const double value = std::stod(text, &used);
        const auto unit = text.substr(used);
        const double scale = unit == "KiB" ? 1024.0
            : unit == "MiB"                ? 1024.0 * 1024
            : unit == "GiB"                ? 1024.0 * 1024 * 1024
            : unit == "KB"                 ? 1e3
            : unit == "MB"                 ? 1e6
            : unit == "GB"                 ? 1e9
                                           : 1.0;
        return static_cast<std::int64_t>(value * scale);
    }

} // namespace

const DeviceSpec& thisCpu(int threads)
{
    static std::mutex mutex;
    static std::map<int, DeviceSpec> measured;
    const std::lock_guard lock(mutex);
    if (threads <= 0) // every core this process may use, as measureCpuDevice(0) counts them
        threads = static_cast<int>(allowedCores().size());
    auto it = measured.find(threads);
    if (it == measured.end())
        it = measured.emplace(threads, measureCpuDevice(threads)).first;
    return it->second;
}

RunShape shapeFromPlanJson(const std::string& json, std::size_t nodeCount)
{
    const auto j = nlohmann::json::parse(json);
    if (j.contains("node_order")) // a dataflow plan: its cuts count in another order than the graph's
        throw Error("this is a Mixed-pipe plan (stages cut in their own node order, sending to non-adjacent "
                    "stages); the pipeline runtime runs stages in the graph's node order only");
    RunShape s;
    const int stages = j.value("stages", 1);
    s.schedule = parseScheduleSpec(j.value("schedule", std::string("1f1b")), stages, j.value("micro_batches", 1));
    s.partition = partitionFromCuts(j.value("cuts", std::string()), nodeCount, stages);
    s.microBatch = static_cast<std::int64_t>(std::llround(j.value("micro_batch", 0.0)));
    s.memory = memoryPlansFromJson(j.value("stage_details", nlohmann::json::array()));
    if (j.contains("stage_devices")) {
        for (const auto& d : j["stage_devices"])
            s.stageDevices.emplace_back(d.get<std::uint32_t>());
    }
    return s;
}

RunShape shapeFromRun(const ProjectStore& store, std::int64_t runId, std::size_t nodeCount)
{
    const auto cfg = nlohmann::json::parse(store.runConfig(runId));
    if (!cfg.contains("cuts"))
        throw Error("run " + std::to_string(runId) + " was recorded by an older PipeStudio without its cuts");
    RunShape s;
    const int stages = cfg.value("stages", 1);
    s.schedule = parseScheduleSpec(cfg.value("schedule", std::string("1f1b")), stages, cfg.value("micro_batches", 1));
    s.partition = partitionFromCuts(cfg.value("cuts", std::string()), nodeCount, stages);
    s.microBatch = cfg.value("micro_batch", std::int64_t { 0 });
    s.deviceMemoryBytes = bytesOf(cfg.value("memory", std::string()));
    s.deviceKind = cfg.value("device_kind", std::string("cpu"));
    s.profileSource = cfg.value("profile_source", std::string());
    if (s.deviceKind.empty()) // a GPU the catalog does not know: predicted as this CPU's devices
        s.deviceKind = "cpu";
    s.precision = cfg.value("precision", std::string("fp32"));
    if (const auto it = cfg.find("devices"); it != cfg.end() && it->is_string()) {
        try {
            s.deviceNames = runtimeDeviceNames(it->get<std::string>());
        } catch (const Error&) { // an older or foreign spelling: named by kind
        }
    }
    if (cfg.contains("link"))
        s.link = linkFromJson(cfg["link"].dump());
    if (const auto plans = cfg.find("memory_plans"); plans != cfg.end()) // planned by the run itself
        s.memory = memoryPlansFromJson(*plans);
    if (const auto planId = cfg.value("plan_id", std::int64_t { 0 }); planId > 0) {
        for (const auto& p : store.loadPlans()) {
            if (p.id == planId) {
                auto planned = shapeFromPlanJson(p.json, nodeCount);
                s.memory = planned.memory;
                s.stageDevices = planned.stageDevices;
            }
        }
    }
    return s;
}

Profile engineAnalyticalProfile(const Graph& graph, const DeviceSpec& device, CostModelOptions options)
{
    auto profile = estimateProfile(graph, device, options);
    if (!options.setup.mixedPrecision())
        return profile;
    options.setup.precision = Precision::Fp32;
    const auto bytes = estimateProfile(graph, device, options);
    for (std::size_t n = 0; n < profile.nodes.size(); ++n) {
        auto& node = profile.nodes[n];
        const auto& fp32 = bytes.nodes[n];
        node.outputBytes = fp32.outputBytes;
        node.savedBytes = fp32.savedBytes;
        node.workspaceBytes = fp32.workspaceBytes;
    }
    profile.setup.precision = Precision::Fp32;
    return profile;
}

DeviceSpec runDevice(const RunShape& shape)
{
    // A CPU run's devices each compute on their share of the cores (training_run.h).
    auto device = shape.deviceKind == "cpu" ? thisCpu(threadsPerDevice(shape.schedule.devices()))
                                            : DeviceCatalog::builtin().find(shape.deviceKind);
    if (shape.deviceMemoryBytes > 0)
        device.memoryBytes = shape.deviceMemoryBytes;
    return device;
}

RunPrediction predictRun(const Graph& stored, const Profile* measured, const RunShape& shape)
{
    const auto mb = shape.microBatch > 0 ? shape.microBatch : stored.info().microBatch;
    const auto graph = mb == stored.info().microBatch ? stored : buildAtMicroBatch(stored, mb);
    RunConfig c;
    c.schedule = shape.schedule;
    c.partition = shape.partition;
    c.memory = shape.memory;
    c.stageDevices = shape.stageDevices;
    const auto device = runDevice(shape);
    auto cluster = makeCluster(device, static_cast<int>(shape.schedule.devices()));
    if (shape.link.enabled()) {
        cluster.intraNode = shape.link.spec();
        cluster.intraTrace = shape.link.trace;
    }
    RunPrediction p;
    p.profileSource = measured ? measured->source : "analytical";
    CostModelOptions options;
    options.setup.precision = parsePrecision(shape.precision);
    const auto profile = measured ? *measured : engineAnalyticalProfile(graph, device, options);
    const auto stages = computeStageCosts(graph, profile, c.partition, static_cast<double>(mb));
    // A recompute takes the forward time of the nodes it re-runs, on this profile.
    const auto costs = computeOpCosts(graph);
    for (std::size_t s = 0; s < c.memory.size() && s < static_cast<std::size_t>(c.partition.stageCount()); ++s) {
        auto& plan = c.memory[s];
        if (plan.recomputedTensors.empty() || c.partition.dataflow())
            continue;
        const StageId id(static_cast<std::uint32_t>(s));
        plan.recomputeNs = 0;
        for (auto n : recomputedNodes(graph, costs, c.partition.stageBegin(id),
                 c.partition.stageEnd(id, graph.nodeCount()), plan.recomputedTensors))
            plan.recomputeNs += profile.nodes.at(n).forwardNs.at(static_cast<double>(mb));
    }
    const auto schedule = withCommunication(runtimeSchedule(c));
    SimulationInput input { schedule, stages, cluster, profile.setup, static_cast<double>(mb), c.memory, {} };
    input.options.timedPeak = true; // compare and the monitor show what this timing leaves as well
    p.simulation = simulate(input);
    for (std::size_t d = 0; d < p.simulation.devices.size(); ++d) {
        const auto& dev = p.simulation.devices[d];
        if (dev.outOfMemory)
            p.overflows.push_back({ static_cast<int>(d), dev.peakBytes, dev.capacityBytes });
        p.deviceNames.push_back(d < shape.deviceNames.size()
                ? shape.deviceNames[d]
                : (shape.deviceKind == "cpu" ? "cpu:" : "gpu:") + std::to_string(d));
    }
    return p;
}

std::string linkToJson(const LinkEmulation& link)
{
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    if (link.enabled()) {
        j["bandwidth"] = link.bandwidth;
        j["latency_s"] = link.latencySeconds;
        if (link.trace)
            j["trace"] = ps::detail::traceToJson(*link.trace);
    }
    return j.dump();
}

LinkEmulation linkFromJson(const std::string& json)
{
    const auto j = nlohmann::json::parse(json);
    LinkEmulation link;
    if (!j.is_object())
        throw Error("a run's link must be a JSON object");
    link.bandwidth = j.value("bandwidth", 0.0);
    link.latencySeconds = j.value("latency_s", 0.0);
    if (link.bandwidth < 0 || link.latencySeconds < 0)
        throw Error("a run's link has a negative bandwidth or latency");
    if (j.contains("trace"))
        link.trace = ps::detail::traceFromJson(j["trace"], "the run's link trace");
    return link;
}

std::string deviceLabel(const RunPrediction& prediction, std::size_t d)
{
    return d < prediction.deviceNames.size() ? prediction.deviceNames[d] : "device " + std::to_string(d);
}

std::string overflowMessage(const RunPrediction& prediction)
{
    std::string out;
    for (const auto& o : prediction.overflows) {
        if (!out.empty())
            out += "; ";
        out += deviceLabel(prediction, static_cast<std::size_t>(o.device)) + " is predicted to need "
            + formatBytes(o.peakBytes) + ", " + formatBytes(o.peakBytes - o.capacityBytes) + " more than its "
            + formatBytes(o.capacityBytes);
    }
    return out;
}

std::vector<ActionDifference> largestActionDifferences(
    const std::vector<SimEvent>& measured, const std::vector<SimEvent>& predicted, std::size_t limit)
{
    std::vector<ActionDifference> out;
    for (const auto& e : measured) {
        const auto match = std::find_if(predicted.begin(), predicted.end(), [&](const SimEvent& p) {
            return p.action == e.action && p.stage == e.stage && p.microBatch == e.microBatch && p.stream == e.stream;
        });
        if (match != predicted.end())
            out.push_back({ formatAction({ e.action, e.stage, e.microBatch }), static_cast<int>(e.device.value),
                (e.endNs - e.startNs) / 1e6, (match->endNs - match->startNs) / 1e6 });
    }
    std::stable_sort(out.begin(), out.end(), [](const ActionDifference& a, const ActionDifference& b) {
        return std::abs(a.measuredMs - a.predictedMs) > std::abs(b.measuredMs - b.predictedMs);
    });
    if (out.size() > limit)
        out.resize(limit);
    return out;
}

std::string profileDescription(const RunPrediction& prediction)
{
    return prediction.profileSource + (prediction.profileNote.empty() ? "" : " (" + prediction.profileNote + ")");
}

std::optional<MatchedProfile> measuredProfileFor(const ProjectStore& store, const RunShape& shape)
{
    const bool cpu = shape.deviceKind == "cpu";
    if (shape.profileSource == "analytical")
        return std::nullopt;
    const auto source = shape.profileSource.empty() || shape.profileSource == "measured"
        ? (cpu ? std::string("measured-cpu") : measuredCudaSource(parsePrecision(shape.precision)))
        : shape.profileSource;
    // Only this machine's own CPU measurements come at several thread counts to match.
    return loadMatchedProfile(store, shape.deviceKind, source,
        cpu && source == "measured-cpu" ? threadsPerDevice(shape.schedule.devices()) : 0);
}

RunPrediction predictWithStoredProfile(const ProjectStore& store, const Graph& graph, const RunShape& shape)
{
    const auto measured = measuredProfileFor(store, shape);
    auto prediction = predictRun(graph, measured ? &measured->profile : nullptr, shape);
    if (measured)
        prediction.profileNote = measured->note;
    return prediction;
}

RunPrediction predictStoredRun(const ProjectStore& store, std::int64_t runId)
{
    const auto graph = store.loadGraph();
    return predictWithStoredProfile(store, graph, shapeFromRun(store, runId, graph.nodeCount()));
}

} // namespace ps::engine
