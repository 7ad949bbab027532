// `pipestudio estimate` and `pipestudio simulate`.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/validators.h"
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "cpu_probe.h"
#include "graph/graph_summary.h"
#include "plan/partition.h"
#include "schedule/schedule_validate.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <memory>
#include <numeric>
#include <sstream>

namespace ps::app {
namespace {

    int estimate(const std::string& path, const DeviceOptions& o, double mb, bool json)
    {
        auto store = ProjectStore::open(path);
        const auto graph = store.loadGraph();
        const auto device = resolveDevice(o);
        const auto options = costOptions(o);
        const auto profile = estimateProfile(graph, device, options);
        store.saveProfile(profile, 1, mb == 1 ? 2 : mb);
        double fwd = 0;
        double bwd = 0;
        double saved = 0;
        for (const auto& n : profile.nodes) {
            fwd += n.forwardNs.at(mb);
            bwd += n.backwardNs.at(mb);
            saved += n.savedBytes.at(mb);
        }
        // Per kernel class at this micro-batch (a convolution's bias-add is elementwise).
        std::array<std::pair<double, double>, kKernelClassCount> byClass {};
        for (const auto& kernels : estimateKernels(graph, device, options, mb)) {
            for (const auto& k : kernels) {
                byClass[static_cast<std::size_t>(k.kind)].first += k.forwardNs;
                byClass[static_cast<std::size_t>(k.kind)].second += k.backwardNs;
            }
        }
        const auto perParam = bytesPerParameter(profile.setup);
        const double modelBytes = static_cast<double>(graph.parameterCount()) * perParam.total();
        const auto precision = std::string(toString(profile.setup.precision));
        if (json) {
            nlohmann::ordered_json classes = nlohmann::ordered_json::object();
            for (int c = 0; c < kKernelClassCount; ++c) {
                const auto& [f, b] = byClass[static_cast<std::size_t>(c)];
                if (f > 0 || b > 0)
                    classes[std::string(toString(static_cast<KernelClass>(c)))] = { { "forward_ms", f / 1e6 },
                        { "backward_ms", b / 1e6 } };
            }
            const nlohmann::ordered_json j = { { "device", device.id }, { "micro_batch", mb },
                { "precision", precision }, { "source", profile.source }, { "forward_ms", fwd / 1e6 },
                { "backward_ms", bwd / 1e6 }, { "by_class", classes }, { "saved_activation_bytes", saved },
                { "model_state_bytes", modelBytes }, { "bytes_per_parameter", perParam.total() },
                { "nodes", profile.nodes.size() } };
            fmt::print("{}\n", j.dump(2));
            return 0;
        }
        fmt::print("Analytical profile of {} on {} (micro-batch {:g}), saved to {}\n", graph.info().name, device.name,
            mb, path);
        fmt::print("  precision {}\n", describePrecision(profile.setup.precision));
        fmt::print("  forward  {:10.3f} ms   backward {:10.3f} ms per micro-batch\n", fwd / 1e6, bwd / 1e6);
        for (int c = 0; c < kKernelClassCount; ++c) {
            const auto& [f, b] = byClass[static_cast<std::size_t>(c)];
            if (f > 0 || b > 0)
                fmt::print("    {:<14} forward {:10.3f} ms   backward {:10.3f} ms\n",
                    toString(static_cast<KernelClass>(c)), f / 1e6, b / 1e6);
        }
        fmt::print("  activations saved for backward {}; weights+grads+optimizer {} ({:g} B/parameter)\n",
            formatBytes(saved), formatBytes(modelBytes), perParam.total());
        return 0;
    }

    struct SimulateOptions
    {
        std::string project;
        int stages = 4;
        std::string cuts = "auto";
        std::string schedule = "1f1b";
        int microBatches = 8;
        double microBatchSize = 0; // 0: the project's
        int devicesPerNode = 8;
        std::string clusterFile;
        std::string trace;
        std::string csv;
        bool json = false;
        bool noSave = false;
        bool noComm = false;
    };

    Cluster buildCluster(const SimulateOptions& s, const DeviceOptions& o, int devices)
    {
        if (!s.clusterFile.empty())
            return clusterFromJson(readFile(s.clusterFile), s.clusterFile);
        return makeCluster(resolveDevice(o, devices), devices, s.devicesPerNode);
    }

    void printResult(const SimulationResult& r, const Partition& p, const std::vector<StageCost>& stages)
    {
        fmt::print("{} over {} stages, {} micro-batches of {:g}; cuts {}\n", r.scheduleName, r.stages, r.microBatches,
            r.microBatchSize, p.cutsText().empty() ? "-" : p.cutsText());
        fmt::print("iteration {:.3f} ms, bubble {:.1f}%, {:.1f} samples/s{}\n", r.iterationNs / 1e6,
            100 * r.bubbleFraction, r.samplesPerSecond, r.anyOutOfMemory ? ", OUT OF MEMORY" : "");
        fmt::print(
            "{:>6} {:>10} {:>10} {:>12} {:>12} {:>9}\n", "stage", "F ms", "B ms", "send MiB", "peak", "in flight");
        for (std::size_t s = 0; s < stages.size(); ++s) {
            const auto& d = r.devices[s % r.devices.size()];
            fmt::print("{:>6} {:>10.3f} {:>10.3f} {:>12.2f} {:>12} {:>9}{}\n", s, stages[s].forwardNs / 1e6,
                stages[s].backwardNs / 1e6, stages[s].sendForwardBytes / (1 << 20), formatBytes(d.peakBytes),
                d.memory.peakInFlight,
                d.outOfMemory ? "  OOM: " + formatBytes(d.peakBytes - d.capacityBytes) + " over" : "");
        }
    }

    Partition cutsOption(const std::string& cuts, std::size_t nodes, int stages)
    {
        try {
            return partitionFromCuts(cuts, nodes, stages);
        } catch (const Error& e) {
            throw Error(std::string("--cuts: ") + e.what());
        }
    }

    void writeText(const std::string& path, const std::string& text, const std::string& flag)
    {
        std::ofstream out(path, std::ios::binary);
        out << text;
        out.flush();
        if (!out)
            throw Error(flag + ": cannot write '" + path + "'");
    }

    int simulateCommand(const SimulateOptions& s, const DeviceOptions& o)
    {
        auto store = ProjectStore::open(s.project);
        auto graph = store.loadGraph();
        const double mb = s.microBatchSize > 0 ? s.microBatchSize : static_cast<double>(graph.info().microBatch);
        const auto spec = parseScheduleSpec(s.schedule, s.stages, s.microBatches);
        const auto cluster = buildCluster(s, o, spec.devices());
        auto profile = planningProfile(store, graph, cluster.device, o, spec.devices());
        const auto tensorParallel = applyTensorParallel(graph, profile, cluster.intraNode, o.tensorParallel);
        const auto partition = s.cuts == "auto" ? computeBalancedPartition(nodeTimes(profile, mb), s.stages)
                                                : cutsOption(s.cuts, graph.nodeCount(), s.stages);
        const auto stages = computeStageCosts(graph, profile, partition, mb);
        const auto schedule = withCommunication(generateSchedule(spec));
        validateScheduleOrThrow(schedule);
        const SimulationInput input { schedule, stages, cluster, profile.setup, mb, {}, { true, !s.noComm } };
        const auto result = simulate(input);
        if (!s.trace.empty())
            writeText(s.trace, toChromeTrace(result), "--trace");
        if (!s.csv.empty())
            writeText(s.csv, scheduleToCsv(schedule), "--csv");
        nlohmann::ordered_json config = { { "cuts", partition.cutsText() }, { "device", cluster.device.id },
            { "precision", toString(profile.setup.precision) }, { "profile", profile.source },
            { "cluster", nlohmann::json::parse(clusterToJson(cluster)) } };
        if (tensorParallel)
            config["tensor_parallel"] = tensorParallel->size; // each device one GPU of a group this size
        if (!s.noSave) {
            store.saveCluster(cluster);
            store.saveSimulation(result, config.dump());
        }
        if (s.json) {
            auto j = nlohmann::ordered_json::parse(simulationSummaryJson(result));
            j["cuts"] = partition.cutsText();
            j["precision"] = toString(profile.setup.precision);
            j["profile"] = profile.source;
            if (tensorParallel)
                j["tensor_parallel"] = tensorParallel->size;
            fmt::print("{}\n", j.dump(2));
        } else {
            fmt::print("{} on {}, {}\n", graph.info().name, cluster.device.name, profileLabel(profile));
            printResult(result, partition, stages);
        }
        return 0;
    }

} // namespace

void addEstimateCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("estimate", "Analytical per-node profile on a catalog device, saved to the project");
    auto path = std::make_shared<std::string>();
    auto device = std::make_shared<DeviceOptions>();
    auto mb = std::make_shared<double>(1);
    auto json = std::make_shared<bool>(false);
    cmd->add_option("project", *path, "Project file (.pstudio)")->required();
    addDeviceOptions(cmd, *device);
    cmd->add_option("--micro-batch,-b", *mb, "Micro-batch size to report")->check(positiveUpTo(1 << 20));
    cmd->add_flag("--json", *json, "Print JSON");
    cmd->callback([&action, path, device, mb, json] { action = [=] { return estimate(*path, *device, *mb, *json); }; });
}

void addSimulateCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("simulate", "Simulate one iteration of a pipeline plan");
    auto s = std::make_shared<SimulateOptions>();
    auto device = std::make_shared<DeviceOptions>();
    cmd->add_option("project", s->project, "Project file (.pstudio)")->required();
    cmd->add_option("--stages,-s", s->stages, "Pipeline stages")->check(CLI::Range(1, 4096));
    cmd->add_option("--cuts", s->cuts, "auto, or the first node of stages 1..S-1 (\"12,24,36\")");
    cmd->add_option(
        "--schedule", s->schedule, "gpipe | 1f1b | kfkb:K | interleaved:V | zb-h1 | pipedream | ftpipe-async[:A]");
    cmd->add_option("--micro-batches,-m", s->microBatches, "Micro-batches per iteration (M)")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--micro-batch,-b", s->microBatchSize, "Samples per micro-batch (default: the project's)")
        ->check(positiveUpTo(1 << 20));
    cmd->add_option("--devices-per-node", s->devicesPerNode, "Devices per node of the generated cluster")
        ->check(CLI::Range(1, 4096));
    cmd->add_option("--cluster", s->clusterFile, "Cluster JSON (nodes, links, bandwidth traces)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--trace", s->trace, "Write a Chrome trace JSON (opens in Perfetto)");
    cmd->add_option("--csv", s->csv, "Write the schedule as PyTorch pipelining CSV");
    cmd->add_flag("--json", s->json, "Print JSON");
    cmd->add_flag("--no-save", s->noSave, "Do not store the simulation in the project");
    cmd->add_flag("--no-comm", s->noComm, "Transfers take no time");
    addDeviceOptions(cmd, *device);
    addProfileOption(cmd, *device);
    addTensorParallelOption(cmd, *device);
    cmd->callback([&action, s, device] { action = [=] { return simulateCommand(*s, *device); }; });
}

} // namespace ps::app
