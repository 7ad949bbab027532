// `pipestudio profile`: measures every node on this machine's CPU and stores the profile rows.
#include "cli/commands.h"
#include "cpu_profiler.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

namespace ps::app {
namespace {

    struct ProfileCommandOptions
    {
        std::string project;
        std::string device = "cpu";
        std::vector<std::int64_t> microBatches; // empty: the project's and half (or double) of it
        int repeats = 5;
        int warmup = 2;
        int threads = 0;
        bool json = false;
    };

    int runProfile(const ProfileCommandOptions& o)
    {
        if (o.device != "cpu")
            throw Error("device '" + o.device + "': this build profiles on the CPU backend (--device cpu)");
        auto store = ProjectStore::open(o.project);
        const auto stored = store.loadGraph();
        auto sizes = o.microBatches;
        if (sizes.empty()) {
            const auto b = stored.info().microBatch;
            sizes = stored.info().family == "onnx" ? std::vector<std::int64_t> { b }
                                                   : std::vector<std::int64_t> { b > 1 ? b / 2 : 2, b };
        }
        if (sizes.size() > 2)
            throw Error("profile at one or two micro-batch sizes, got " + std::to_string(sizes.size()));
        profiler::CpuProfileOptions options { o.warmup, o.repeats, 0, o.threads };
        std::vector<profiler::CpuProfileRun> runs;
        for (auto b : sizes) {
            const auto graph = buildAtMicroBatch(stored, b);
            if (!o.json)
                fmt::print("Profiling {} nodes at micro-batch {} ({} repeats after {} warm-up)\n", graph.nodeCount(), b,
                    o.repeats, o.warmup);
            std::fflush(stdout); // a parent reading a pipe (the GUI) sees each size as it starts
            runs.push_back(profiler::measureOnCpu(graph, options));
        }
        const auto& a = runs.front();
        const auto& b = runs.back();
        const auto profile = profiler::toProfile(stored, a, b);
        store.saveProfile(profile, static_cast<double>(a.microBatch), static_cast<double>(b.microBatch));
        nlohmann::json out { { "device", "cpu" }, { "source", profile.source }, { "nodes", stored.nodeCount() } };
        for (const auto& r : runs) {
            out["runs"].push_back({ { "micro_batch", r.microBatch }, { "node_sum_ms", r.nodeSumNs / 1e6 },
                { "step_ms", r.stepNs.median / 1e6 }, { "step_spread_ms", r.stepNs.mad / 1e6 },
                { "ratio", r.nodeSumNs / r.stepNs.median } });
        }
        if (o.json) {
            fmt::print("{}\n", out.dump(2));
            return 0;
        }
        std::map<std::string, double> byOp; // at the project's micro-batch
        const auto& mine = runs.back();
        for (std::size_t i = 0; i < stored.nodeCount(); ++i) {
            const auto& n = mine.nodes[i];
            byOp[std::string(toString(stored.nodes()[i].op))] +=
                n.forwardNs.median + (n.backwardNs.count > 0 ? n.backwardNs.median : 0.0);
        }
        std::vector<std::pair<double, std::string>> sorted;
        for (const auto& [op, ns] : byOp)
            sorted.emplace_back(ns, op);
        std::sort(sorted.rbegin(), sorted.rend());
        fmt::print("Forward + backward by op at micro-batch {}:\n", mine.microBatch);
        for (const auto& [ns, op] : sorted)
            fmt::print("  {:<14} {:9.2f} ms  {:5.1f}%\n", op, ns / 1e6, 100.0 * ns / mine.nodeSumNs);
        for (const auto& r : runs)
            fmt::print("Micro-batch {}: nodes in isolation {:.1f} ms, measured training step {:.1f} ms (+/- {:.1f}), "
                       "ratio {:.2f}\n",
                r.microBatch, r.nodeSumNs / 1e6, r.stepNs.median / 1e6, r.stepNs.mad / 1e6,
                r.nodeSumNs / r.stepNs.median);
        fmt::print("Saved {} profile rows (device cpu, source measured-cpu) to {}\n",
            stored.nodeCount() * (a.microBatch == b.microBatch ? 1 : 2), o.project);
        return 0;
    }

} // namespace

void addProfileCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<ProfileCommandOptions>();
    auto* cmd = app.add_subcommand("profile", "Measure every node forward and backward on this machine's CPU");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("--device", o->device, "cpu");
    cmd->add_option(
           "--micro-batches", o->microBatches, "One or two micro-batch sizes (default: the project's and half)")
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--repeats", o->repeats, "Timed repeats per node (median reported)")->check(CLI::Range(1, 1000));
    cmd->add_option("--warmup", o->warmup, "Untimed runs before the repeats")->check(CLI::Range(0, 1000));
    cmd->add_option("--threads", o->threads, "BLAS threads (0: OpenBLAS's default)")->check(CLI::Range(0, 1024));
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, &action] { action = [o] { return runProfile(*o); }; });
}

} // namespace ps::app
