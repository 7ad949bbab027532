// `pipestudio plan`, `pipestudio search` and `pipestudio maxbatch`.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/validators.h"
#include "graph/graph_summary.h"
#include "plan/planner.h"
#include "plan/zero_baseline.h"
#include "sim/simulator.h"
#include "store/project_store.h"
#include "util/error.h"
#include "util/parallel.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <memory>
#include <optional>

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
        bool checkpointStages = false;
        bool json = false;
        bool noSave = false;
        int upperLimit = 4096;
        std::string clusterFile; // --cluster: the devices and links to plan on
    };

    void addCommonOptions(CLI::App* cmd, PlanCommandOptions& o, DeviceOptions& d)
    {
        cmd->add_option("project", o.project, "Project file (.pstudio)")->required();
        cmd->add_option("--algo,-a", o.algorithm,
            "dawnpiper | dawnpiper-paper | pipedream | pipedream-mem | gpipe | compute-balanced | "
            "memory-balanced | exhaustive | mixed-pipe | all, or several separated by commas. mixed-pipe (FTPipe): "
            "more stages than devices, non-adjacent stages sharing a device, direct sends between stages");
        cmd->add_option(
               "--stages,-s", o.stages, "Pipeline stages (mixed-pipe: devices; it chooses its own stage count)")
            ->check(CLI::Range(1, 1024));
        cmd->add_option("--schedule", o.schedule, "gpipe | 1f1b | kfkb:K | zb-h1 | pipedream | ftpipe-async[:A]");
        cmd->add_option("--micro-batches,-m", o.microBatches, "Micro-batches per iteration")
            ->check(CLI::Range(1, 1 << 20));
        cmd->add_option("--memory-limit", o.memoryLimit, "Per-device memory limit (e.g. 30GiB); default: the device's");
        cmd->add_option("--cluster", o.clusterFile,
               "Cluster JSON to plan on (nodes, devices per node, links; its device kind replaces --device); "
               "default: --device x the stages' devices, 8 to a node")
            ->check(CLI::ExistingFile);
        cmd->add_flag("--no-swap", o.noSwap, "Do not swap activations to host memory");
        cmd->add_flag("--no-recompute", o.noRecompute, "Do not recompute activations");
        cmd->add_flag("--checkpoint-stages", o.checkpointStages,
            "GPipe's rematerialisation: every stage keeps only its inputs and re-runs its forward before each "
            "backward (no swap/recompute optimizer)");
        cmd->add_flag("--json", o.json, "Print JSON");
        addDeviceOptions(cmd, d);
        addProfileOption(cmd, d);
        addTensorParallelOption(cmd, d);
    }

    PlannerLimits limitsOf(const PlanCommandOptions& o)
    {
        return { o.memoryLimit.empty() ? 0 : parseBytes(o.memoryLimit, "--memory-limit"), !o.noSwap, !o.noRecompute,
            o.checkpointStages };
    }

    struct Problem
    {
        Graph graph;
        Profile profile;
        ScheduleSpec spec;
        Cluster cluster;
        std::optional<TensorParallelPlan> tensorParallel; // --tp: graph and profile are one GPU's of a group
    };

    Problem loadProblem(const PlanCommandOptions& o, const DeviceOptions& d)
    {
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        auto graph = store.loadGraph();
        if (static_cast<std::size_t>(o.stages) > graph.nodeCount())
            throw Error("--stages " + std::to_string(o.stages) + ": the model of '" + o.project + "' has only "
                + std::to_string(graph.nodeCount()) + " nodes (at least one per stage)");
        Problem p { std::move(graph), {}, parseScheduleSpec(o.schedule, o.stages, o.microBatches), {}, {} };
        if (o.clusterFile.empty()) {
            p.cluster = makeCluster(resolveDevice(d, static_cast<int>(p.spec.devices())), p.spec.devices());
        } else {
            try {
                p.cluster = clusterFromJson(readFile(o.clusterFile), o.clusterFile);
                p.cluster.check();
            } catch (const Error& e) {
                throw Error("--cluster '" + o.clusterFile + "': " + e.what());
            }
            if (p.cluster.deviceCount() < p.spec.devices())
                throw Error("--cluster '" + o.clusterFile + "' has " + std::to_string(p.cluster.deviceCount())
                    + " devices; " + std::to_string(p.spec.devices()) + " are needed");
        }
        p.profile = planningProfile(store, p.graph, p.cluster.device, d, p.spec.devices());
        p.tensorParallel = applyTensorParallel(p.graph, p.profile, p.cluster.intraNode, d.tensorParallel);
        if (!o.json)
            fmt::print("{} on {}, {}\n", p.graph.info().name, p.cluster.device.name, profileLabel(p.profile));
        return p;
    }

    std::vector<std::string> splitList(const std::string& text)
    {
        std::vector<std::string> items;
        std::size_t start = 0;
        while (start <= text.size()) {
            const auto comma = std::min(text.find(',', start), text.size());
            if (comma > start)
                items.push_back(text.substr(start, comma - start));
            start = comma + 1;
        }
        return items;
    }

    std::vector<PlanAlgorithm> algorithmsFor(const std::string& names, std::size_t nodes, int stages)
    {
        std::vector<PlanAlgorithm> chosen;
        for (const auto& name : splitList(names)) {
            if (name != "all") {
                chosen.push_back(parsePlanAlgorithm(name));
                continue;
            }
            const auto every = everyPlanAlgorithmFor(nodes, stages);
            chosen.insert(chosen.end(), every.begin(), every.end());
        }
        if (chosen.empty())
            throw Error("--algo: give at least one algorithm");
        return chosen;
    }

    void printPlanHeader()
    {
        fmt::print("{:<4} {:<17} {:<14} {:>5} {:>5} {:>8} {:>12} {:>12} {:>10} {:>9}  {}\n", "rank", "algorithm",
            "schedule", "M", "mb", "feasible", "slowest ms", "iteration ms", "samples/s", "search s", "cuts / reason");
    }

    void printPlanRow(std::size_t rank, const Plan& plan)
    {
        const auto& sim = plan.simulation;
        fmt::print("{:<4} {:<17} {:<14} {:>5} {:>5} {:>8} {:>12.3f} {:>12} {:>10} {:>9.3f}  {}\n", rank, plan.algorithm,
            scheduleName(plan.schedule), plan.schedule.microBatches, plan.microBatch, plan.feasible ? "yes" : "no",
            plan.slowestStageNs / 1e6, sim ? fmt::format("{:.3f}", sim->iterationNs / 1e6) : "-",
            sim ? fmt::format("{:.1f}", sim->samplesPerSecond) : "-", plan.searchSeconds,
            plan.feasible ? plan.partition.cutsText() : plan.reason);
        if (!plan.stageDevices.empty()) // cuts count in the plan's own node order (JSON: node_order)
            fmt::print("     {} ({})\n", plan.stageDevicesText(), plan.seed);
    }

    // Prints (or returns as JSON) the ranked plans and stores the first `save` feasible ones.
    int reportPlans(const std::vector<Plan>& plans, const std::string& project, std::size_t save, std::size_t top,
        bool json, const std::optional<TensorParallelPlan>& tensorParallel, const Graph& graph)
    {
        if (tensorParallel && save > 0) {
            save = 0; // a stored plan has no tensor-parallel split to be reopened with
            if (!json)
                fmt::print("(plans with --tp are not stored in the project)\n");
        }
        std::optional<ProjectStore> store;
        if (save > 0)
            store.emplace(ProjectStore::open(project));
        nlohmann::ordered_json results = nlohmann::ordered_json::array();
        if (!json)
            printPlanHeader();
        std::size_t saved = 0;
        for (std::size_t i = 0; i < plans.size() && i < top; ++i) {
            const auto& plan = plans[i];
            auto entry = nlohmann::ordered_json::parse(planToJson(plan));
            if (tensorParallel) {
                auto& tp = entry["tensor_parallel"];
                tp["size"] = tensorParallel->size;
                for (auto s : { Shard::Column, Shard::Row, Shard::Vocabulary, Shard::Split, Shard::Replicated })
                    tp[std::string(toString(s))] = tensorParallel->count(s);
                // How each node is split (nodes not listed are replicated).
                auto& nodes = tp["nodes"];
                nodes = nlohmann::ordered_json::object();
                for (const auto& n : graph.nodes()) {
                    const auto shard = tensorParallel->nodes[n.id.index()];
                    if (shard != Shard::Replicated)
                        nodes[n.name] = std::string(toString(shard));
                }
                entry["devices"] = plan.deviceCount() * tensorParallel->size;
            }
            if (store && plan.feasible && saved < save) {
                entry["plan_id"] = store->savePlan(plan, plan.algorithm + " " + scheduleName(plan.schedule));
                ++saved;
            }
            if (!json)
                printPlanRow(i + 1, plan);
            results.push_back(entry);
        }
        if (json)
            fmt::print("{}\n", results.dump(2));
        else if (plans.size() > top)
            fmt::print("({} more; --top to see them)\n", plans.size() - top);
        return 0;
    }

    int planCommand(const PlanCommandOptions& o, const DeviceOptions& d)
    {
        const auto p = loadProblem(o, d);
        SearchRequest request;
        request.schedules = { p.spec };
        request.algorithms = algorithmsFor(o.algorithm, p.graph.nodeCount(), o.stages);
        request.microBatch = o.microBatch > 0 ? o.microBatch : static_cast<double>(p.graph.info().microBatch);
        request.limits = limitsOf(o);
        request.device = p.cluster.device;
        if (!o.clusterFile.empty())
            request.cluster = p.cluster;
        const auto plans = searchPlans(p.graph, p.profile, request);
        return reportPlans(
            plans, o.project, o.noSave ? 0 : plans.size(), plans.size(), o.json, p.tensorParallel, p.graph);
    }

    struct SearchCommandOptions
    {
        PlanCommandOptions plan;
        std::string schedules = "gpipe,1f1b,kfkb:2,kfkb:3,kfkb:4,zb-h1";
        std::string sizes; // empty: the project's micro-batch
        double globalBatch = 0;
        std::size_t top = 10;
        std::size_t save = 1;
    };

    int searchCommand(const SearchCommandOptions& o, const DeviceOptions& d)
    {
        const auto p = loadProblem(o.plan, d);
        SearchRequest request;
        for (const auto& text : splitList(o.schedules)) {
            if (text == "kfkb:auto") { // Ada-Grouper's group sizes; those over a point's M are skipped
                for (int k = 1; k <= 8; ++k)
                    request.schedules.push_back({ ScheduleKind::KFKB, o.plan.stages, o.plan.microBatches, k, 1 });
                continue;
            }
            request.schedules.push_back(parseScheduleSpec(text, o.plan.stages, o.plan.microBatches));
        }
        if (request.schedules.empty())
            throw Error("--schedules: give at least one schedule");
        request.algorithms = algorithmsFor(o.plan.algorithm, p.graph.nodeCount(), o.plan.stages);
        request.microBatch = static_cast<double>(p.graph.info().microBatch);
        for (const auto& text : splitList(o.sizes)) {
            double size = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), size);
            if (ec != std::errc() || end != text.data() + text.size() || !(size > 0 && size <= (1 << 20)))
                throw Error("--micro-batch-sizes: '" + text + "' is not a micro-batch size from 1 to 1048576");
            request.microBatchSizes.push_back(size);
        }
        request.globalBatch = o.globalBatch;
        request.limits = limitsOf(o.plan);
        request.device = p.cluster.device;
        if (!o.plan.clusterFile.empty())
            request.cluster = p.cluster;
        const auto plans = searchPlans(p.graph, p.profile, request);
        if (plans.empty())
            throw Error("no schedule and micro-batch size of the request can be built (a global batch of "
                + fmt::format("{}", o.globalBatch) + " needs sizes that divide it)");
        return reportPlans(
            plans, o.plan.project, o.plan.noSave ? 0 : o.save, o.top, o.plan.json, p.tensorParallel, p.graph);
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
        const PlannerLimits none { user.memoryLimitBytes, false, false, false };
        const PlannerLimits checkpoint { user.memoryLimitBytes, false, false, true };
        // "all": DawnPiper's comparison (§5.2), GPipe with and without its per-stage
        // rematerialisation ("R"), PipeDream without optimization; else the algorithms listed.
        const std::vector<MaxBatchRow> all { { "dawnpiper (swap+recompute)", PlanAlgorithm::DawnPiper, user },
            { "dawnpiper (none)", PlanAlgorithm::DawnPiper, none },
            { "gpipe (checkpoint)", PlanAlgorithm::GPipe, checkpoint }, { "gpipe (none)", PlanAlgorithm::GPipe, none },
            { "pipedream (none)", PlanAlgorithm::PipeDream, none },
            { "pipedream-mem (none)", PlanAlgorithm::PipeDreamMemory, none },
            { "memory-balanced (s+r)", PlanAlgorithm::MemoryBalanced, user },
            { "compute-balanced (s+r)", PlanAlgorithm::ComputeBalanced, user } };
        std::vector<MaxBatchRow> rows;
        for (const auto& name : splitList(o.algorithm)) {
            if (name == "all")
                rows.insert(rows.end(), all.begin(), all.end());
            else
                rows.push_back({ name, parsePlanAlgorithm(name), user });
        }
        if (rows.empty())
            throw Error("--algo: give at least one algorithm");
        return rows;
    }

    bool listsAll(const std::string& names)
    {
        const auto items = splitList(names);
        return std::find(items.begin(), items.end(), "all") != items.end();
    }

    int maxBatchCommand(const PlanCommandOptions& o, const DeviceOptions& d)
    {
        const auto p = loadProblem(o, d);
        nlohmann::ordered_json rows = nlohmann::ordered_json::array();
        if (!o.json)
            fmt::print("{} on {} x {}, {} with {} micro-batches\n{:<26} {:>15} {:>14}  {}\n", p.graph.info().name,
                p.spec.devices(), p.cluster.device.id, scheduleName(p.spec), p.spec.microBatches, "algorithm",
                "max micro-batch", "slowest ms", "cuts");
        // The rows are independent searches: they run on the machine's cores, each into its slot, and
        // each row tries several sizes at once (a core left idle by rows done early serves the rest).
        const auto table = maxBatchRows(o);
        std::vector<MaxBatchResult> results(table.size());
        parallelFor(table.size(), 0, [&](std::size_t i) {
            PlannerOptions options;
            options.algorithm = table[i].algorithm;
            options.limits = table[i].limits;
            results[i] = findMaxMicroBatch(p.graph, p.profile, p.spec, p.cluster, options, o.upperLimit, 0);
        });
        for (std::size_t i = 0; i < table.size(); ++i) {
            const auto& row = table[i];
            const auto& r = results[i];
            rows.push_back({ { "algorithm", row.label }, { "max_micro_batch", r.microBatch },
                { "slowest_stage_ms", r.plan.slowestStageNs / 1e6 }, { "cuts", r.plan.partition.cutsText() } });
            if (!o.json)
                fmt::print("{:<26} {:>15} {:>14.3f}  {}\n", row.label, r.microBatch, r.plan.slowestStageNs / 1e6,
                    r.plan.partition.cutsText());
        }
        // The data-parallel baseline, the whole model on every device; not with --tp (its devices
        // would be tensor-parallel groups, which ZeRO's baseline does not model).
        if (listsAll(o.algorithm) && !p.tensorParallel) {
            const double capacity = o.memoryLimit.empty() ? static_cast<double>(p.cluster.device.memoryBytes)
                                                          : parseBytes(o.memoryLimit, "--memory-limit");
            for (int stage : { 2, 3 }) {
                const auto label = fmt::format("zero-{} data parallel", stage);
                const int b = zeroMaxMicroBatch(p.graph, p.profile, p.spec.devices(), stage, capacity, o.upperLimit);
                rows.push_back({ { "algorithm", label }, { "max_micro_batch", b }, { "per_device_batch", true } });
                if (!o.json)
                    fmt::print(
                        "{:<26} {:>15} {:>14}  {}\n", label, b, "-", "(whole model per device; batch per device)");
            }
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
    cmd->add_option("--micro-batch,-b", o->microBatch, "Samples per micro-batch (default: the project's)")
        ->check(positiveUpTo(1 << 20));
    cmd->add_flag("--no-save", o->noSave, "Do not store the plans in the project");
    cmd->callback([&action, o, d] { action = [=] { return planCommand(*o, *d); }; });
}

void addSearchCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("search",
        "Auto-search: algorithms x schedules x micro-batch sizes, ranked by simulated throughput (the studio's "
        "Plan > Auto-search)");
    auto o = std::make_shared<SearchCommandOptions>();
    auto d = std::make_shared<DeviceOptions>();
    o->plan.algorithm = "dawnpiper,pipedream-mem,gpipe";
    addCommonOptions(cmd, o->plan, *d);
    cmd->get_option("--schedule")->description("(unused by search; see --schedules)");
    cmd->add_option("--schedules", o->schedules,
        "Comma-separated schedules, e.g. 1f1b,kfkb:2,zb-h1,interleaved:2; kfkb:auto tries k = 1..8");
    cmd->add_option("--micro-batch-sizes", o->sizes, "Comma-separated micro-batch sizes (default: the project's)");
    cmd->add_option("--global-batch", o->globalBatch,
           "Samples per iteration: each size runs global/size micro-batches (default: --micro-batches each)")
        ->check(numberIn(0, 1 << 30));
    cmd->add_option("--top", o->top, "Plans to print")->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--save", o->save, "Best feasible plans to store in the project")->check(CLI::Range(0, 1 << 20));
    cmd->add_flag("--no-save", o->plan.noSave, "Store nothing");
    cmd->callback([&action, o, d] { action = [=] { return searchCommand(*o, *d); }; });
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
