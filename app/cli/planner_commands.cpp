// `pipestudio plan` and `pipestudio maxbatch`.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "graph/graph_summary.h"
#include "plan/planner.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace ps::app {
namespace {

    struct PlanCommandOptions
    {
        std::string project;
        std::string algorithm = "dawnpiper";
        int stages = 4;
        std::string schedule = "1f1b";
        int microBatches = 8;
        double microBatch = 0; // 0: the project's
        std::string memoryLimit;
        bool noSwap = false;
        bool noRecompute = false;
        bool json = false;
        bool noSave = false;
        int upperLimit = 4096;
    };

    void addCommonOptions(CLI::App* cmd, PlanCommandOptions& o, DeviceOptions& d)
    {
        cmd->add_option("project", o.project, "Project file (.pstudio)")->required();
        cmd->add_option("--algo,-a", o.algorithm,
            "dawnpiper | pipedream | pipedream-mem | gpipe | compute-balanced | memory-balanced | "
            "exhaustive | all");
        cmd->add_option("--stages,-s", o.stages, "Pipeline stages")->check(CLI::Range(1, 1024));
        cmd->add_option("--schedule", o.schedule, "gpipe | 1f1b | kfkb:K | zb-h1 | pipedream");
        cmd->add_option("--micro-batches,-m", o.microBatches, "Micro-batches per iteration")
            ->check(CLI::Range(1, 1 << 20));
        cmd->add_option("--memory-limit", o.memoryLimit, "Per-device memory limit (e.g. 30GiB); default: the device's");
        cmd->add_flag("--no-swap", o.noSwap, "Do not swap activations to host memory");
        cmd->add_flag("--no-recompute", o.noRecompute, "Do not recompute activations");
        cmd->add_flag("--json", o.json, "Print JSON");
        addDeviceOptions(cmd, d);
    }

    PlannerLimits limitsOf(const PlanCommandOptions& o)
    {
        return { o.memoryLimit.empty() ? 0 : parseBytes(o.memoryLimit), !o.noSwap, !o.noRecompute };
    }

    struct Problem
    {
        Graph graph;
        Profile profile;
        ScheduleSpec spec;
        Cluster cluster;
    };

    Problem loadProblem(const PlanCommandOptions& o, const DeviceOptions& d)
    {
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        Problem p { store.loadGraph(), {}, parseScheduleSpec(o.schedule, o.stages, o.microBatches), {} };
        p.cluster = makeCluster(resolveDevice(d), p.spec.devices());
        p.profile = estimateProfile(p.graph, p.cluster.device, costOptions(d));
        return p;
    }

    std::vector<PlanAlgorithm> algorithmsFor(const std::string& name, std::size_t nodes, int stages)
    {
        if (name != "all")
            return { parsePlanAlgorithm(name) };
        std::vector<PlanAlgorithm> all;
        for (auto a : allPlanAlgorithms()) {
            if (a != PlanAlgorithm::Exhaustive || (nodes <= 80 && stages <= 5))
                all.push_back(a);
        }
        return all;
    }

    nlohmann::ordered_json simulatePlan(const Problem& p, const Plan& plan)
    {
        if (!plan.feasible)
            return nullptr;
        const auto stages = computeStageCosts(p.graph, p.profile, plan.partition, plan.microBatch);
        const auto schedule = generateSchedule(p.spec);
        const auto r =
            simulate({ schedule, stages, p.cluster, p.profile.setup, plan.microBatch, plan.memoryPlans(), {} });
        double peak = 0;
        for (const auto& d : r.devices)
            peak = std::max(peak, d.peakBytes);
        return { { "iteration_ms", r.iterationNs / 1e6 }, { "samples_per_second", r.samplesPerSecond },
            { "bubble_fraction", r.bubbleFraction }, { "peak_bytes", peak }, { "out_of_memory", r.anyOutOfMemory } };
    }

    int planCommand(const PlanCommandOptions& o, const DeviceOptions& d)
    {
        const auto p = loadProblem(o, d);
        const double mb = o.microBatch > 0 ? o.microBatch : static_cast<double>(p.graph.info().microBatch);
        const StageModel model(p.graph, p.profile, p.spec, p.cluster, mb, limitsOf(o));
        std::optional<ProjectStore> store;
        if (!o.noSave)
            store.emplace(ProjectStore::open(o.project));
        nlohmann::ordered_json results = nlohmann::ordered_json::array();
        if (!o.json)
            fmt::print("{:<17} {:>8} {:>12} {:>12} {:>11} {:>9}  {}\n", "algorithm", "feasible", "slowest ms",
                "iteration ms", "peak", "search s", "cuts / reason");
        for (auto algo : algorithmsFor(o.algorithm, p.graph.nodeCount(), o.stages)) {
            PlannerOptions options;
            options.algorithm = algo;
            options.limits = limitsOf(o);
            const auto plan = findPlan(model, options);
            auto entry = nlohmann::ordered_json::parse(planToJson(plan));
            entry["simulation"] = simulatePlan(p, plan);
            if (store)
                entry["plan_id"] = store->savePlan(plan, std::string(toString(algo)) + " " + scheduleName(p.spec));
            if (!o.json) {
                const auto& sim = entry["simulation"];
                fmt::print("{:<17} {:>8} {:>12.3f} {:>12} {:>11} {:>9.3f}  {}\n", plan.algorithm,
                    plan.feasible ? "yes" : "no", plan.slowestStageNs / 1e6,
                    sim.is_null() ? "-" : fmt::format("{:.3f}", sim["iteration_ms"].get<double>()),
                    sim.is_null() ? "-" : formatBytes(sim["peak_bytes"].get<double>()), plan.searchSeconds,
                    plan.feasible ? plan.partition.cutsText() : plan.reason);
            }
            results.push_back(entry);
        }
        if (o.json)
            fmt::print("{}\n", results.dump(2));
        return 0;
    }

    struct MaxBatchRow
    {
        std::string label;
        PlanAlgorithm algorithm;
        PlannerLimits limits;
    };

    std::vector<MaxBatchRow> maxBatchRows(const PlanCommandOptions& o)
    {
        const auto user = limitsOf(o);
        const PlannerLimits none { user.memoryLimitBytes, false, false };
        const PlannerLimits recompute { user.memoryLimitBytes, false, user.allowRecompute };
        if (o.algorithm != "all")
            return { { o.algorithm, parsePlanAlgorithm(o.algorithm), user } };
        // DawnPiper's comparison (§5.2): GPipe with recomputation, PipeDream without optimization.
        return { { "dawnpiper (swap+recompute)", PlanAlgorithm::DawnPiper, user },
            { "dawnpiper (none)", PlanAlgorithm::DawnPiper, none },
            { "gpipe (recompute)", PlanAlgorithm::GPipe, recompute },
            { "pipedream (none)", PlanAlgorithm::PipeDream, none },
            { "pipedream-mem (none)", PlanAlgorithm::PipeDreamMemory, none },
            { "memory-balanced (s+r)", PlanAlgorithm::MemoryBalanced, user },
            { "compute-balanced (s+r)", PlanAlgorithm::ComputeBalanced, user } };
    }

    int maxBatchCommand(const PlanCommandOptions& o, const DeviceOptions& d)
    {
        const auto p = loadProblem(o, d);
        nlohmann::ordered_json rows = nlohmann::ordered_json::array();
        if (!o.json)
            fmt::print("{} on {} x {}, {} with {} micro-batches\n{:<26} {:>15} {:>14}  {}\n", p.graph.info().name,
                p.spec.devices(), p.cluster.device.id, scheduleName(p.spec), p.spec.microBatches, "algorithm",
                "max micro-batch", "slowest ms", "cuts");
        for (const auto& row : maxBatchRows(o)) {
            PlannerOptions options;
            options.algorithm = row.algorithm;
            options.limits = row.limits;
            const auto r = findMaxMicroBatch(p.graph, p.profile, p.spec, p.cluster, options, o.upperLimit);
            rows.push_back({ { "algorithm", row.label }, { "max_micro_batch", r.microBatch },
                { "slowest_stage_ms", r.plan.slowestStageNs / 1e6 }, { "cuts", r.plan.partition.cutsText() } });
            if (!o.json)
                fmt::print("{:<26} {:>15} {:>14.3f}  {}\n", row.label, r.microBatch, r.plan.slowestStageNs / 1e6,
                    r.plan.partition.cutsText());
        }
        if (o.json)
            fmt::print("{}\n", rows.dump(2));
        return 0;
    }

} // namespace

void addPlanCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("plan", "Search partitions and swap/recompute plans; results are stored, ranked");
    auto o = std::make_shared<PlanCommandOptions>();
    auto d = std::make_shared<DeviceOptions>();
    addCommonOptions(cmd, *o, *d);
    cmd->add_option("--micro-batch,-b", o->microBatch, "Samples per micro-batch (default: the project's)");
    cmd->add_flag("--no-save", o->noSave, "Do not store the plans in the project");
    cmd->callback([&action, o, d] { action = [=] { return planCommand(*o, *d); }; });
}

void addMaxBatchCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("maxbatch", "Largest micro-batch each algorithm can fit");
    auto o = std::make_shared<PlanCommandOptions>();
    auto d = std::make_shared<DeviceOptions>();
    o->algorithm = "all";
    addCommonOptions(cmd, *o, *d);
    cmd->add_option("--upper-limit", o->upperLimit, "Largest micro-batch tried")->check(CLI::Range(1, 1 << 20));
    cmd->callback([&action, o, d] { action = [=] { return maxBatchCommand(*o, *d); }; });
}

} // namespace ps::app
