// `pipestudio grouping`: Ada-Grouper's (k, b) candidates at a fixed global batch, and its adaptive
// controller replayed over the cluster's bandwidth trace against every fixed k.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/validators.h"
#include "plan/grouping.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace ps::app {
namespace {

    struct GroupingOptions
    {
        std::string project;
        int stages = 8;
        double globalBatch = 0;
        int maxK = 6;
        double groupBatch = 0;
        std::string algorithm = "dawnpiper";
        std::string memoryLimit;
        bool noSwap = false;
        bool noRecompute = false;
        std::string clusterFile;
        std::string preempt; // "period,fraction,share"
        int iterations = 0;
        int interval = 5;
        bool json = false;
    };

    Cluster clusterFor(const GroupingOptions& o, const DeviceOptions& d)
    {
        auto cluster = o.clusterFile.empty() ? makeCluster(resolveDevice(d, o.stages), o.stages)
                                             : clusterFromJson(readFile(o.clusterFile), o.clusterFile);
        if (cluster.deviceCount() < o.stages)
            throw Error("the cluster has " + std::to_string(cluster.deviceCount()) + " devices, the pipeline "
                + std::to_string(o.stages) + " stages");
        if (!o.preempt.empty()) {
            cluster.intraTrace = preemptionTrace(o.preempt);
            cluster.interTrace = cluster.intraTrace;
        }
        return cluster;
    }

    nlohmann::ordered_json runJson(const GroupingRun& run)
    {
        auto steps = nlohmann::ordered_json::array();
        for (const auto& s : run.steps)
            steps.push_back({ { "iteration", s.iteration }, { "start_s", s.startSeconds }, { "k", s.k },
                { "micro_batch", s.microBatch }, { "seconds", s.iterationSeconds },
                { "estimated_bandwidth_share", s.estimatedFraction } });
        return { { "total_seconds", run.totalSeconds }, { "switches", run.switches() }, { "steps", steps } };
    }

    int groupingCommand(const GroupingOptions& o, const DeviceOptions& d)
    {
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        const auto graph = store.loadGraph();
        const auto cluster = clusterFor(o, d);
        const auto profile = planningProfile(store, graph, cluster.device, d, o.stages);
        GroupingRequest request;
        request.stages = o.stages;
        request.globalBatch = o.globalBatch;
        request.maxK = o.maxK;
        request.groupBatch = o.groupBatch;
        request.algorithm = parsePlanAlgorithm(o.algorithm);
        request.limits = { o.memoryLimit.empty() ? 0 : parseBytes(o.memoryLimit, "--memory-limit"), !o.noSwap,
            !o.noRecompute };
        const auto candidates = groupingCandidates(graph, profile, cluster, request);
        if (candidates.empty())
            throw Error("no k from 1 to " + std::to_string(o.maxK) + " fits at any micro-batch size dividing "
                + fmt::format("{}", o.globalBatch) + " on " + cluster.device.id);
        nlohmann::ordered_json out;
        auto rows = nlohmann::ordered_json::array();
        if (!o.json)
            fmt::print("{} on {} x {}, global batch {}: the memory-limit curve (largest micro-batch per k)\n"
                       "{:>3} {:>6} {:>5} {:>13} {:>10}  {}\n",
                graph.info().name, o.stages, cluster.device.id, o.globalBatch, "k", "mb", "M", "iteration ms",
                "samples/s", "cuts");
        for (const auto& c : candidates) {
            const auto& sim = *c.plan.simulation;
            rows.push_back({ { "k", c.k }, { "micro_batch", c.plan.microBatch },
                { "micro_batches", c.plan.schedule.microBatches }, { "iteration_ms", sim.iterationNs / 1e6 },
                { "samples_per_second", sim.samplesPerSecond }, { "cuts", c.plan.partition.cutsText() } });
            if (!o.json)
                fmt::print("{:>3} {:>6} {:>5} {:>13.3f} {:>10.1f}  {}\n", c.k, c.plan.microBatch,
                    c.plan.schedule.microBatches, sim.iterationNs / 1e6, sim.samplesPerSecond,
                    c.plan.partition.cutsText());
        }
        out["candidates"] = rows;
        if (o.iterations > 0) {
            const auto adaptive = adaptiveGrouping(graph, profile, cluster, candidates, o.iterations, o.interval);
            out["adaptive"] = runJson(adaptive);
            auto fixed = nlohmann::ordered_json::array();
            if (!o.json)
                fmt::print("\n{} iterations, re-estimated every {}: adaptive {:.3f} s ({} switches)\n", o.iterations,
                    o.interval, adaptive.totalSeconds, adaptive.switches());
            for (const auto& c : candidates) {
                const auto run = fixedGrouping(graph, profile, cluster, c, o.iterations);
                fixed.push_back({ { "k", c.k }, { "total_seconds", run.totalSeconds },
                    { "adaptive_speedup", run.totalSeconds / adaptive.totalSeconds } });
                if (!o.json)
                    fmt::print("  fixed k={} {:.3f} s (adaptive is {:.2f}x)\n", c.k, run.totalSeconds,
                        run.totalSeconds / adaptive.totalSeconds);
            }
            out["fixed"] = fixed;
            if (!o.json) {
                fmt::print("k timeline:");
                for (const auto& s : adaptive.steps) {
                    if (s.iteration % o.interval == 0)
                        fmt::print(" {}", s.k);
                }
                fmt::print("\n");
            }
        }
        if (o.json)
            fmt::print("{}\n", out.dump(2));
        return 0;
    }

} // namespace

void addGroupingCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("grouping",
        "Ada-Grouper: kFkB (k, micro-batch) candidates at a fixed global batch, and the adaptive choice of k "
        "over a bandwidth trace");
    auto o = std::make_shared<GroupingOptions>();
    auto d = std::make_shared<DeviceOptions>();
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("--stages,-s", o->stages, "Pipeline stages (one per device)")->check(CLI::Range(1, 1024));
    cmd->add_option("--global-batch", o->globalBatch, "Samples per iteration")
        ->required()
        ->check(positiveUpTo(1 << 30));
    cmd->add_option("--max-k", o->maxK, "Largest group size tried")->check(CLI::Range(1, 64));
    cmd->add_option("--group-batch", o->groupBatch,
           "Samples per group: every k runs micro-batch N/k (Ada-Grouper's granularity test uses 6); "
           "default: for each k the largest micro-batch that fits")
        ->check(positiveUpTo(1 << 30));
    cmd->add_option("--algo,-a", o->algorithm, "Partitioning algorithm for each candidate");
    cmd->add_option("--memory-limit", o->memoryLimit, "Per-device memory limit (default: the device's)");
    cmd->add_flag("--no-swap", o->noSwap, "Do not swap activations to host memory");
    cmd->add_flag("--no-recompute", o->noRecompute, "Do not recompute activations");
    cmd->add_option("--cluster", o->clusterFile, "Cluster JSON (links, bandwidth traces)")->check(CLI::ExistingFile);
    cmd->add_option("--preempt", o->preempt,
        "Periodic preemption of every link: PERIOD_S,FRACTION,SHARE (FRACTION of the bandwidth for SHARE of "
        "each period)");
    cmd->add_option("--iterations", o->iterations, "Replay this many iterations with the adaptive controller")
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--interval", o->interval, "Iterations between re-estimations")->check(CLI::Range(1, 1 << 20));
    cmd->add_flag("--json", o->json, "Print JSON");
    addDeviceOptions(cmd, *d);
    addProfileOption(cmd, *d);
    cmd->callback([&action, o, d] { action = [=] { return groupingCommand(*o, *d); }; });
}

} // namespace ps::app
