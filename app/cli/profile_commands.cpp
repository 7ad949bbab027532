// `pipestudio profile`: measures every node on this machine's CPU (host timers) or on one of its
// GPUs (the CUDA backend, device time from CUPTI) and stores the profile rows.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cluster/device_catalog.h"
#include "cpu/thread_affinity.h"
#include "cpu_profiler.h"
#include "cuda/cuda_backend.h"
#include "cupti/cupti_tracer.h"
#include "graph/graph_summary.h"
#include "local_devices.h"
#include "runtime/training_job.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>

namespace ps::app {
namespace {

    struct ProfileCommandOptions
    {
        std::string project;
        std::string device = "cpu";
        std::string as; // catalog id of the GPU's rows (default: matched from its name and memory)
        std::vector<std::int64_t> microBatches; // empty: the project's and half (or double) of it
        int repeats = 5;
        int warmup = 2;
        int threads = 0;
        std::string precision = "fp32"; // what a GPU's GEMMs compute with (train --precision)
        bool coRun = true; // CPU: copies of the step on the other cores meanwhile (CpuProfileOptions::coRunners)
        bool json = false;
    };

    // GPU `index` of --device cuda[:N]; -1 for cpu.
    int gpuIndex(const std::string& device)
    {
        if (device == "cpu")
            return -1;
        if (device == "cuda")
            return 0;
        if (device.starts_with("cuda:") && device.size() > 5
            && std::all_of(
                device.begin() + 5, device.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })
            && device.size() < 9)
            return std::stoi(device.substr(5));
        throw Error("device '" + device + "': profile on cpu or on one GPU (cuda, cuda:N)");
    }

    // Forward and backward time by op at the run's micro-batch (`threads` > 0: a CPU run's count).
    void printOpTable(const Graph& stored, const profiler::CpuProfileRun& mine, int threads)
    {
        struct OpTime
        {
            double forwardNs = 0, backwardNs = 0;
            int nodes = 0;
        };
        std::map<std::string, OpTime> byOp; // at the project's micro-batch
        for (std::size_t i = 0; i < stored.nodeCount(); ++i) {
            const auto& n = mine.nodes[i];
            auto& t = byOp[std::string(toString(stored.nodes()[i].op))];
            t.forwardNs += n.forwardNs.median;
            t.backwardNs += n.backwardNs.count > 0 ? n.backwardNs.median : 0.0;
            ++t.nodes;
        }
        std::vector<std::pair<double, std::string>> sorted;
        for (const auto& [op, t] : byOp)
            sorted.emplace_back(t.forwardNs + t.backwardNs, op);
        std::sort(sorted.rbegin(), sorted.rend());
        fmt::print("Forward + backward by op at micro-batch {}{}:\n", mine.microBatch,
            threads > 0 ? fmt::format(" on {} BLAS thread(s)", threads) : "");
        fmt::print(
            "  {:<14} {:>5} {:>10} {:>10} {:>10}  {:>6}\n", "op", "nodes", "forward", "backward", "total", "share");
        for (const auto& [ns, op] : sorted) {
            const auto& t = byOp[op];
            fmt::print("  {:<14} {:>5} {:>7.2f} ms {:>7.2f} ms {:>7.2f} ms  {:5.1f}%\n", op, t.nodes, t.forwardNs / 1e6,
                t.backwardNs / 1e6, ns / 1e6, 100.0 * ns / mine.nodeSumNs);
        }
    }

    // What runs the nodes: the CPU (gpu < 0), or a GPU's backend timed by its tracer.
    struct ProfileTarget
    {
        int gpu = -1;
        const engine::Backend* backend = nullptr;
        profiler::ActivityTracer* tracer = nullptr;
    };

    // One measurement per micro-batch size, each announced as it starts.
    std::vector<profiler::CpuProfileRun> measureSizes(const Graph& stored, const std::vector<std::int64_t>& sizes,
        const ProfileTarget& target, const profiler::CpuProfileOptions& asked, bool quiet)
    {
        std::vector<profiler::CpuProfileRun> runs;
        const auto memory = asked.coRunners > 0 ? profiler::availableMemoryBytes() : 0;
        for (auto b : sizes) {
            const auto graph = buildAtMicroBatch(stored, b);
            auto options = asked;
            options.coRunners = profiler::coRunnersThatFit(graph, asked.coRunners, memory);
            if (options.coRunners < asked.coRunners && !quiet)
                fmt::print("Co-runners: {} of the {} the other cores would take, each copy of the step holding up to "
                           "{}, within half of the {} this process may still take\n",
                    options.coRunners, asked.coRunners,
                    formatBytes(static_cast<double>(profiler::trainingStepBytesBound(graph))),
                    formatBytes(static_cast<double>(memory)));
            if (!quiet)
                fmt::print("Profiling {} nodes at micro-batch {}{}{} ({} repeats after {} warm-up)\n",
                    graph.nodeCount(), b, target.gpu < 0 ? fmt::format(" on {} BLAS thread(s)", options.threads) : "",
                    options.coRunners > 0 ? fmt::format(", {} cop{} of the step on the other cores", options.coRunners,
                        options.coRunners == 1 ? "y" : "ies")
                                          : "",
                    options.repeats, options.warmup);
            std::fflush(stdout); // a parent reading a pipe (the GUI) sees each size as it starts
            if (target.gpu < 0) {
                runs.push_back(profiler::measureOnCpu(graph, options));
                continue;
            }
            std::vector<std::string> warnings;
            runs.push_back(profiler::measureOnDevice(graph, *target.backend, *target.tracer, options, {}, &warnings));
            for (const auto& w : warnings)
                fmt::print(stderr, "warning: micro-batch {}: {}\n", b, w);
        }
        return runs;
    }

    // Each run's sums against its measured step: JSON rows in `out`, and printed unless `quiet`.
    // `threads`: the CPU's thread count (0: a GPU, no "threads" field).
    void reportRuns(const std::vector<profiler::CpuProfileRun>& runs, int threads, bool quiet, nlohmann::json& out)
    {
        for (const auto& r : runs) {
            nlohmann::json row { { "micro_batch", r.microBatch }, { "node_sum_ms", r.nodeSumNs / 1e6 },
                { "isolated_node_sum_ms", r.isolatedSumNs / 1e6 }, { "step_ms", r.stepNs.median / 1e6 },
                { "step_spread_ms", r.stepNs.mad / 1e6 }, { "ratio", r.nodeSumNs / r.stepNs.median } };
            if (threads > 0) {
                row["threads"] = threads;
                row["co_runners"] = r.coRunners;
            }
            out["runs"].push_back(row);
            if (!quiet)
                fmt::print("Micro-batch {}: nodes within steps {:.1f} ms (alone {:.1f} ms), measured training "
                           "step {:.1f} ms (+/- {:.1f}) with its optimizer, ratio {:.2f}\n",
                    r.microBatch, r.nodeSumNs / 1e6, r.isolatedSumNs / 1e6, r.stepNs.median / 1e6, r.stepNs.mad / 1e6,
                    r.nodeSumNs / r.stepNs.median);
        }
    }

    int runProfile(const ProfileCommandOptions& o)
    {
        const int gpu = gpuIndex(o.device);
        const auto gemm = engine::trainingGemmPrecision(o.precision);
        if (gpu < 0 && gemm != engine::GemmPrecision::Fp32)
            throw Error(
                "--precision " + o.precision + ": the CPU backend computes in fp32; profile a GPU at tf32 or bf16");
        // A GPU: its backend and CUPTI first, so a machine without them fails before any work.
        const engine::Backend* backend = gpu >= 0 ? &engine::cuda::cudaBackend(gpu) : nullptr;
        auto deviceKind = std::string("cpu");
        if (gpu >= 0) {
            deviceKind = o.as.empty() ? engine::localGpuCatalogId(gpu) : DeviceCatalog::builtin().find(o.as).id;
            if (deviceKind.empty())
                throw Error("GPU " + std::to_string(gpu)
                    + " matches no device of the catalog: name the entry its rows belong to with --as ID");
        }
        std::unique_ptr<profiler::ActivityTracer> tracer;
        if (gpu >= 0)
            tracer = profiler::cupti::makeCuptiTracer();
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
        // On the CPU, by default, every node at one thread and at all cores (a pipeline's devices
        // share the cores; predictions fit the counts between, core/cost/profile_threads.h).
        std::vector<int> threadCounts { o.threads };
        if (gpu < 0 && o.threads == 0) {
            threadCounts = { engine::threadsPerDevice(1) };
            if (threadCounts.front() > 1)
                threadCounts.push_back(1);
        }
        nlohmann::json out { { "device", deviceKind }, { "nodes", stored.nodeCount() } };
        std::vector<profiler::CpuProfileRun> runs; // of the last thread count
        for (const int threads : threadCounts) {
            const int coRunners = gpu >= 0 || !o.coRun
                ? 0
                : profiler::coRunnersFor(threads, static_cast<int>(engine::allowedCores().size()));
            profiler::CpuProfileOptions options { o.warmup, o.repeats, 0, threads, gemm, coRunners };
            runs = measureSizes(stored, sizes, { gpu, backend, tracer.get() }, options, o.json);
            const auto& a = runs.front();
            const auto& b = runs.back();
            auto profile = gpu < 0
                ? profiler::toProfile(stored, a, b)
                : profiler::cupti::toCudaProfile(stored, a, b, deviceKind, parsePrecision(o.precision));
            profile.threads = gpu < 0 ? threads : 0;
            store.saveProfile(profile, static_cast<double>(a.microBatch), static_cast<double>(b.microBatch));
            out["source"] = profile.source;
            reportRuns(runs, gpu < 0 ? threads : 0, o.json, out);
            if (!o.json && gpu < 0)
                fmt::print("Saved {} profile rows (device {}, source {}, {} BLAS thread(s)) to {}\n",
                    stored.nodeCount() * (a.microBatch == b.microBatch ? 1 : 2), deviceKind, profile.source, threads,
                    o.project);
            else if (!o.json)
                fmt::print("Saved {} profile rows (device {}, source {}) to {}\n",
                    stored.nodeCount() * (a.microBatch == b.microBatch ? 1 : 2), deviceKind, profile.source, o.project);
        }
        if (o.json) {
            fmt::print("{}\n", out.dump(2));
            return 0;
        }
        printOpTable(stored, runs.back(), gpu < 0 ? threadCounts.back() : 0);
        if (gpu < 0)
            noteBlasPin();
        return 0;
    }

} // namespace

void addProfileCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<ProfileCommandOptions>();
    auto* cmd = app.add_subcommand(
        "profile", "Measure every node forward and backward on this machine's CPU or one of its GPUs");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("--device", o->device, "cpu (host timers), or cuda / cuda:N (the CUDA backend timed by CUPTI)");
    cmd->add_option("--as", o->as, "Catalog device the GPU's rows are stored under (default: matched by name)");
    cmd->add_option(
           "--micro-batches", o->microBatches, "One or two micro-batch sizes (default: the project's and half)")
        ->delimiter(',')
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--repeats", o->repeats, "Timed repeats per node (median reported)")->check(CLI::Range(1, 1000));
    cmd->add_option("--warmup", o->warmup, "Untimed runs before the repeats")->check(CLI::Range(0, 1000));
    cmd->add_option("--threads", o->threads,
           "Cores the GEMMs and element-wise loops share (0: a CPU profile on every core and, where there are "
           "several, one on one thread, for runs whose devices share the cores)")
        ->check(CLI::Range(0, 1024));
    cmd->add_flag("--co-run,!--alone", o->coRun,
        "CPU, at fewer threads than cores: keep copies of the step running on the other cores while measuring, as "
        "a pipeline's other CPU devices load them (devices slow each other: shared caches, memory bandwidth, a "
        "lower all-core clock), as many as fit in half the memory (each holds the whole model and its optimizer "
        "states); the default. --alone measures with the other cores idle");
    cmd->add_option("--precision", o->precision,
           "What a GPU's GEMMs compute with, as `train --precision` runs them: fp32, tf32 or bf16 (CPU: fp32)")
        ->check(CLI::IsMember({ "fp32", "tf32", "bf16" }));
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([o, &action] { action = [o] { return runProfile(*o); }; });
}

} // namespace ps::app
