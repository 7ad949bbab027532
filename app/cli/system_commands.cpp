// `pipestudio zoo`, `pipestudio devices` and `pipestudio demo`.
#include "cli/commands.h"
#include "cli/report.h"
#include "cpu/blas_core.h"
#include "cpu/packed_gemm.h"
#include "cuda/cuda_backend.h"
#include "cuda_libraries.h"
#include "graph/graph_summary.h"
#include "local_devices.h"
#include "profiler_backends.h"
#include "runtime/training_run.h"
#include "store/project_store.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <memory>

namespace ps::app {
namespace {

    // The CUDA backend's ops, or why there is none.
    std::vector<std::string> cudaOps()
    {
        std::vector<std::string> names;
        for (const auto op : engine::cuda::cudaKernelOps())
            names.emplace_back(toString(op));
        return names;
    }

    // The CPU devices' GEMM library and the kernels it runs; where PipeStudio chose them, why.
    std::string blasLine(const engine::BlasCoreReport& blas)
    {
        std::string line = "BLAS: " + blas.config + ", " + blas.core + " kernels";
        if (!blas.detected.empty())
            line += " (chosen by PipeStudio: OpenBLAS picked " + blas.detected + ", narrower than this CPU's vectors"
                + "; OPENBLAS_CORETYPE overrides, PS_KEEP_BLAS_CORE=1 keeps OpenBLAS's choice)";
        const bool packed = engine::cpuGemmKernels() == "packed";
        if (const auto advice = engine::blasPinAdvice(blas); !advice.empty() && !packed)
            line += " (" + advice + ")";
        line += packed ? "\nCPU GEMM: PipeStudio's packed AVX-512 kernels (OpenBLAS for products of fewer than 4 rows "
                         "or 8 columns; "
                         "PS_CPU_GEMM=openblas runs OpenBLAS's)"
                       : "\nCPU GEMM: OpenBLAS";
        return line;
    }

    nlohmann::ordered_json devicesJson(const engine::LocalDeviceReport& report)
    {
        nlohmann::ordered_json devices = nlohmann::ordered_json::array();
        for (const auto& d : report.devices)
            devices.push_back({ { "id", d.id.value }, { "kind", d.kind }, { "name", d.name },
                { "memory_bytes", d.memoryBytes }, { "compute_units", d.computeUnits }, { "detail", d.detail } });
        nlohmann::ordered_json backends = nlohmann::ordered_json::array();
        for (const auto& b : profiler::availableBackends())
            backends.push_back({ { "name", b.name }, { "available", b.available }, { "detail", b.detail } });
        nlohmann::ordered_json libraries = nlohmann::ordered_json::array();
        for (const auto& l : engine::findCudaLibraries()) {
            libraries.push_back({ { "role", l.role }, { "soname", l.soname }, { "found", l.found },
                { l.found ? "path" : "detail", l.found ? l.path : l.detail } });
        }
        const auto blas = engine::blasCoreReport();
        nlohmann::ordered_json blasJson = { { "library", blas.config }, { "core", blas.core } };
        if (!blas.detected.empty())
            blasJson["detected_core"] = blas.detected;
        if (!blas.widerCore.empty())
            blasJson["wider_core"] = blas.widerCore;
        blasJson["cpu_gemm"] = engine::cpuGemmKernels(); // "packed" or "openblas"
        return { { "blas", blasJson }, { "cuda_built", report.cudaBuilt }, { "cuda_status", report.cudaStatus },
            { "devices", devices }, { "cuda_libraries", libraries }, { "cuda_backend_ops", cudaOps() },
            { "profilers", backends } };
    }

    int printDevices(bool json, bool selfTest)
    {
        const auto report = engine::probeLocalDevices();
        if (json) {
            fmt::print("{}\n", devicesJson(report).dump(2));
        } else {
            for (const auto& d : report.devices)
                fmt::print("{:>2}  {:<5} {:<40} {:>12}  {}\n", d.id.value, d.kind, d.name,
                    formatBytes(static_cast<double>(d.memoryBytes)), d.detail);
            fmt::print("{}\n", blasLine(engine::blasCoreReport()));
            fmt::print("CUDA: {}\n", report.cudaStatus);
            for (const auto& l : engine::findCudaLibraries())
                fmt::print("  {:<9} {:<18} {}\n", l.role, l.soname, l.found ? l.path : "not found: " + l.detail);
            const auto ops = cudaOps();
            if (ops.empty())
                fmt::print("CUDA backend: not in this build\n");
            else
                fmt::print("CUDA backend: kernels for {} ops ({}); train --devices cuda:G (run on one H200 and one "
                           "H100; several "
                           "GPUs not yet)\n",
                    ops.size(), fmt::join(ops, ", "));
            for (const auto& b : profiler::availableBackends())
                fmt::print("Profiler {:<11} {}  {}\n", b.name, b.available ? "yes" : "no ", b.detail);
        }
        int failures = 0;
        for (const auto& d : report.devices) {
            if (!selfTest || d.kind != "cuda")
                continue;
            const auto r = engine::cudaSelfTest(static_cast<int>(d.id.value) - 1);
            fmt::print("Self-test GPU {}: {} ({})\n", d.id.value, r.passed ? "passed" : "FAILED", r.message);
            failures += r.passed ? 0 : 1;
        }
        return failures == 0 ? 0 : 1;
    }

} // namespace

void addZooCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("zoo", "List the built-in models with their sizes");
    cmd->callback([&action] {
        action = [] {
            fmt::print("{:<12} {:<6} {:>7} {:>8} {:>12}\n", "model", "family", "layers", "nodes", "parameters");
            for (const auto& name : zooModelNames()) {
                const auto config = zooPreset(name);
                const auto graph = buildZooModel(config);
                fmt::print("{:<12} {:<6} {:>7} {:>8} {:>12}\n", name, toString(config.family),
                    config.layers + config.decoderLayers, graph.nodeCount(),
                    formatCount(static_cast<double>(graph.parameterCount())));
            }
            return 0;
        };
    });
}

void addDevicesCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("devices", "List local devices and profiling backends");
    auto json = std::make_shared<bool>(false);
    auto selfTest = std::make_shared<bool>(false);
    cmd->add_flag("--json", *json, "Print JSON");
    cmd->add_flag("--self-test", *selfTest, "Run a kernel on every GPU and check the result");
    cmd->callback([&action, json, selfTest] { action = [json, selfTest] { return printDevices(*json, *selfTest); }; });
}

void addDemoCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("demo",
        "Headless end-to-end demo: build, save, reopen and summarize a model, then train a small one on the CPU");
    auto dir = std::make_shared<std::string>((std::filesystem::temp_directory_path() / "pipestudio-demo").string());
    cmd->add_option("--dir", *dir, "Where to write the demo project");
    cmd->callback([&action, dir] { action = [dir] { return runDemo(*dir); }; });
}

int runDemo(const std::string& directory)
{
    using Clock = std::chrono::steady_clock;
    std::filesystem::create_directories(directory);
    const auto path = std::filesystem::path(directory) / "gpt2-medium.pstudio";
    auto config = zooPreset("gpt2-medium");
    config.microBatch = 4;

    fmt::print("1. Building the op graph of {} (seq {}, micro-batch {})\n", config.name, config.seq, config.microBatch);
    const auto t0 = Clock::now();
    const auto graph = buildZooModel(config);
    const auto t1 = Clock::now();
    fmt::print("   {} nodes, {} tensors in {:.1f} ms\n", graph.nodeCount(), graph.tensorCount(),
        std::chrono::duration<double, std::milli>(t1 - t0).count());

    fmt::print("2. Saving the project to {}\n", path.string());
    writeNewProject(path, graph, true);
    const auto t2 = Clock::now();
    fmt::print("   {} written in {:.1f} ms\n", formatBytes(static_cast<double>(std::filesystem::file_size(path))),
        std::chrono::duration<double, std::milli>(t2 - t1).count());

    fmt::print("3. Reopening it and checking the graph round-trips\n");
    const auto store = ProjectStore::open(path, ProjectStore::Access::ReadOnly);
    const auto loaded = store.loadGraph();
    fmt::print("   identical after reload: {}\n", loaded == graph ? "yes" : "NO");

    fmt::print("4. Summary (`pipestudio info {}`):\n\n", path.string());
    fmt::print("{}", summaryText(summarizeGraph(loaded), path.string(), store.schemaVersion()));
    const auto devices = engine::probeLocalDevices();
    fmt::print(
        "\nLocal devices: {} CPU thread(s); CUDA: {}\n", devices.devices.front().computeUnits, devices.cudaStatus);

    auto small = zooPreset("gpt2-tiny");
    small.microBatch = 8;
    auto corpus = engine::TokenData::defaultCorpus();
    fmt::print("\n5. Training a 2-layer, 64-wide GPT on this CPU for 40 steps ({}), as a 2-stage 1F1B pipeline\n"
               "   on two CPU devices with 2 micro-batches per step (`pipestudio train --devices cpu:2`)\n",
        corpus.source());
    const auto model = buildZooModel(small);
    engine::RunConfig runConfig;
    runConfig.schedule = parseScheduleSpec("1f1b", 2, 2);
    runConfig.partition = computeBalancedPartition(std::vector<double>(model.nodeCount(), 1.0), 2);
    runConfig.optimizer.lr = 2e-3;
    engine::TrainingRun run(model, std::move(corpus), engine::makeDevices("cpu:2", 0), runConfig);
    double first = 0;
    double last = 0;
    for (int step = 1; step <= 40; ++step) {
        const auto r = run.step();
        first = step == 1 ? r.loss : first;
        last = r.loss;
        if (step == 1 || step % 10 == 0)
            fmt::print("   step {:>3}  loss {:.3f}  {:>7.0f} tokens/s  peak {} / {}\n", step, r.loss, r.tokensPerSecond,
                formatBytes(static_cast<double>(r.devicePeakBytes[0])),
                formatBytes(static_cast<double>(r.devicePeakBytes[1])));
    }
    fmt::print("   loss {:.2f} -> {:.2f} nats\n", first, last);
    return loaded == graph && last < first ? 0 : 1;
}

} // namespace ps::app
