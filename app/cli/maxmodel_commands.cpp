// `pipestudio maxmodel`: PatrickStar's maximum model scale (§9.2.1, Table 3) on N devices of one
// kind with a given host memory, beside PyTorch DDP and DeepSpeed ZeRO-Offload.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/validators.h"
#include "graph/graph_summary.h"
#include "plan/max_model.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <memory>

namespace ps::app {
namespace {

    struct MaxModelOptions
    {
        std::string device = "v100-32gb";
        std::string catalog;
        int gpus = 1;
        std::string hostRam;
        double batch = 0; // 0: the paper's 4, 8, 16, 32, 64, the best of them
        std::int64_t seq = 1024;
        double minTflops = 0;
        std::int64_t chunkElements = 0;
        std::string cpuAdamBandwidth = "50GB";
        bool initOnHost = false;
        bool json = false;
    };

    MaxModelRequest requestOf(const MaxModelOptions& o)
    {
        MaxModelRequest r;
        r.device = resolveDevice({ o.device, o.catalog, "fp16", false, false, "adam" });
        r.gpus = o.gpus;
        r.hostMemoryBytes = static_cast<std::int64_t>(parseBytes(o.hostRam, "--host-ram"));
        r.seq = o.seq;
        if (o.batch > 0)
            r.microBatches = { o.batch };
        r.minTflopsPerGpu = o.minTflops;
        r.options.chunkElements = o.chunkElements;
        r.options.cpuAdamBytesPerSecond = parseBytes(o.cpuAdamBandwidth, "--cpu-adam-bandwidth");
        r.options.initializeOnHost = o.initOnHost;
        return r;
    }

    nlohmann::ordered_json estimateJson(const SystemEstimate& e)
    {
        return { { "system", toString(e.system) }, { "feasible", e.feasible }, { "reason", e.reason },
            { "micro_batch", e.microBatch }, { "gpu_peak_bytes", e.gpuPeakBytes }, { "host_bytes", e.hostBytes },
            { "cpu_gpu_bytes", e.cpuGpuBytes }, { "iteration_ms", e.time.totalNs() / 1e6 },
            { "compute_ms", e.time.computeNs / 1e6 }, { "transfer_ms", e.time.transferNs / 1e6 },
            { "collective_ms", e.time.collectiveNs / 1e6 }, { "cpu_adam_ms", e.time.cpuAdamNs / 1e6 },
            { "gpu_adam_ms", e.time.gpuAdamNs / 1e6 }, { "tflops_per_gpu", e.tflopsPerGpu } };
    }

    nlohmann::ordered_json resultJson(const MaxModelRequest& r, const MaxModelResult& result)
    {
        auto largest = nlohmann::ordered_json::array();
        for (const auto system : kTrainingSystems) {
            const int i = result.largest[static_cast<std::size_t>(system)];
            auto entry = nlohmann::ordered_json { { "system", toString(system) } };
            entry["model"] = i < 0 ? nlohmann::ordered_json() : nlohmann::ordered_json(result.rungs[i].rung.label);
            if (i >= 0) {
                entry["parameters"] = result.rungs[i].parameters;
                entry["estimate"] = estimateJson(result.rungs[i].systems[static_cast<std::size_t>(system)]);
            }
            largest.push_back(entry);
        }
        auto rungs = nlohmann::ordered_json::array();
        for (const auto& row : result.rungs) {
            auto systems = nlohmann::ordered_json::array();
            for (const auto& e : row.systems)
                systems.push_back(estimateJson(e));
            rungs.push_back({ { "model", row.rung.label }, { "parameters", row.parameters },
                { "layers", row.rung.config.layers }, { "hidden", row.rung.config.hidden },
                { "heads", row.rung.config.heads }, { "from_paper", row.rung.fromPaper }, { "systems", systems } });
        }
        return { { "device", r.device.id }, { "gpus", r.gpus }, { "host_memory_bytes", r.hostMemoryBytes },
            { "seq", r.seq }, { "micro_batches", r.microBatches }, { "min_tflops_per_gpu", r.minTflopsPerGpu },
            { "largest", largest }, { "rungs", rungs } };
    }

    void printLargest(const MaxModelResult& result)
    {
        fmt::print("{:<14} {:>10} {:>9} {:>6} {:>11} {:>11} {:>12} {:>11}\n", "system", "largest", "params", "batch",
            "GPU peak", "host", "CPU<->GPU", "TFLOPS/GPU");
        for (const auto system : kTrainingSystems) {
            const int i = result.largest[static_cast<std::size_t>(system)];
            if (i < 0) {
                fmt::print("{:<14} {:>10}\n", toString(system), "none");
                continue;
            }
            const auto& row = result.rungs[static_cast<std::size_t>(i)];
            const auto& e = row.systems[static_cast<std::size_t>(system)];
            const bool top = static_cast<std::size_t>(i) + 1 == result.rungs.size();
            fmt::print("{:<14} {:>10} {:>9} {:>6} {:>11} {:>11} {:>12} {:>11.1f}\n", toString(system),
                (top ? ">=" : "") + row.rung.label, formatCount(static_cast<double>(row.parameters)), e.microBatch,
                formatBytes(e.gpuPeakBytes), formatBytes(e.hostBytes), formatBytes(e.cpuGpuBytes), e.tflopsPerGpu);
        }
    }

    void printRungs(const MaxModelResult& result)
    {
        fmt::print("\n{:<8} {:>7} {:>6} {:>6}", "model", "params", "layers", "hidden");
        for (const auto system : kTrainingSystems)
            fmt::print(" {:>16}", toString(system));
        fmt::print("\n");
        for (const auto& row : result.rungs) {
            fmt::print("{:<8} {:>7} {:>6} {:>6}", row.rung.label + (row.rung.fromPaper ? "" : "*"),
                formatCount(static_cast<double>(row.parameters)), row.rung.config.layers, row.rung.config.hidden);
            for (const auto& e : row.systems) {
                const auto cell = e.feasible ? fmt::format("{:.1f} TF b{}", e.tflopsPerGpu, e.microBatch)
                                             : std::string(e.reason.substr(0, e.reason.find(':')));
                fmt::print(" {:>16}", e.feasible ? cell : "no (" + cell + ")");
            }
            fmt::print("\n");
        }
        fmt::print("(* beyond the paper's Table 2; TF: estimated TFLOPS per GPU at the best micro-batch b)\n");
    }

    // Why each system's first rung past its largest does not fit.
    void printReasons(const MaxModelResult& result)
    {
        for (const auto system : kTrainingSystems) {
            const auto next = static_cast<std::size_t>(result.largest[static_cast<std::size_t>(system)] + 1);
            if (next >= result.rungs.size())
                continue;
            const auto& e = result.rungs[next].systems[static_cast<std::size_t>(system)];
            fmt::print("{} at {} (micro-batch {}): {}\n", toString(system), result.rungs[next].rung.label, e.microBatch,
                e.reason);
        }
    }

    int maxModelCommand(const MaxModelOptions& o)
    {
        const auto request = requestOf(o);
        const auto result = findMaxModelScale(request);
        if (o.json) {
            fmt::print("{}\n", resultJson(request, result).dump(2));
            return 0;
        }
        fmt::print("Largest GPT-like model (PatrickStar Table 2 ladder) on {} x {}, {} host RAM, seq {}, "
                   "micro-batch per GPU {}{}\n\n",
            request.gpus, request.device.id, formatBytes(static_cast<double>(request.hostMemoryBytes)), request.seq,
            o.batch > 0 ? fmt::format("{}", o.batch) : "best of 4, 8, 16, 32, 64",
            o.minTflops > 0 ? fmt::format(", at least {} TFLOPS per GPU", o.minTflops) : "");
        printLargest(result);
        printRungs(result);
        printReasons(result);
        return 0;
    }

} // namespace

void addMaxModelCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand(
        "maxmodel", "Largest GPT-like model PatrickStar, PyTorch DDP and ZeRO-Offload can train (PatrickStar Table 3)");
    auto o = std::make_shared<MaxModelOptions>();
    cmd->add_option("--device,-d", o->device, "Catalog device (default v100-32gb)");
    cmd->add_option("--catalog", o->catalog, "Device catalog JSON to use instead of the built-in one")
        ->check(CLI::ExistingFile);
    cmd->add_option("--gpus,-g", o->gpus, "Data-parallel GPUs (8 per node)")->check(CLI::Range(1, 4096));
    cmd->add_option("--host-ram", o->hostRam, "Host memory per node, e.g. 240GiB")->required();
    cmd->add_option("--batch,-b", o->batch, "Samples per GPU (default: the best of 4, 8, 16, 32, 64)")
        ->check(positiveUpTo(1 << 20));
    cmd->add_option("--seq-len", o->seq, "Tokens per sample (default 1024, as in the paper)")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--min-tflops", o->minTflops,
           "Count a model only at this many TFLOPS per GPU or more (the paper's Table 3 uses 30; default 0)")
        ->check(numberIn(0, 1e6));
    cmd->add_option("--chunk-elements", o->chunkElements, "PatrickStar chunk size in elements (default: searched)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 40));
    cmd->add_option("--cpu-adam-bandwidth", o->cpuAdamBandwidth,
        "Host memory bandwidth CPU ADAM sustains per node, bytes per second (default 50GB)");
    cmd->add_flag("--init-on-host", o->initOnHost,
        "PatrickStar builds the model in host memory first, so the host must hold every chunk once");
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([&action, o] { action = [=] { return maxModelCommand(*o); }; });
}

} // namespace ps::app
