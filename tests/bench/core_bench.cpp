// Building gpt2-xl's graph and saving/loading it as a project.
//   build/release/tests/bench/core_bench
#include "graph/graph_summary.h"
#include "store/project_store.h"
#include "zoo/model_config.h"

#include <benchmark/benchmark.h>

#include <filesystem>
#include <unistd.h>

namespace {

std::filesystem::path benchFile()
{
    return std::filesystem::temp_directory_path() / ("ps_bench_" + std::to_string(::getpid()) + ".pstudio");
}

void BM_BuildGraph(benchmark::State& state, const char* model)
{
    const auto config = ps::zooPreset(model);
    for (auto _ : state)
        benchmark::DoNotOptimize(ps::buildZooModel(config));
}
BENCHMARK_CAPTURE(BM_BuildGraph, gpt2_xl, "gpt2-xl")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_BuildGraph, t5_3b, "t5-3b")->Unit(benchmark::kMillisecond);

void BM_Summarize_Gpt2Xl(benchmark::State& state)
{
    const auto graph = ps::buildZooModel(ps::zooPreset("gpt2-xl"));
    for (auto _ : state)
        benchmark::DoNotOptimize(ps::summarizeGraph(graph));
}
BENCHMARK(BM_Summarize_Gpt2Xl)->Unit(benchmark::kMillisecond);

void BM_SaveProject_Gpt2Xl(benchmark::State& state)
{
    const auto graph = ps::buildZooModel(ps::zooPreset("gpt2-xl"));
    const auto path = benchFile();
    for (auto _ : state)
        ps::writeNewProject(path, graph, true);
    std::filesystem::remove(path);
    state.counters["nodes"] = static_cast<double>(graph.nodeCount());
}
BENCHMARK(BM_SaveProject_Gpt2Xl)->Unit(benchmark::kMillisecond);

void BM_LoadProject_Gpt2Xl(benchmark::State& state)
{
    const auto path = benchFile();
    ps::writeNewProject(path, ps::buildZooModel(ps::zooPreset("gpt2-xl")), true);
    for (auto _ : state) {
        const auto store = ps::ProjectStore::open(path, ps::ProjectStore::Access::ReadOnly);
        benchmark::DoNotOptimize(store.loadGraph());
    }
    std::filesystem::remove(path);
}
BENCHMARK(BM_LoadProject_Gpt2Xl)->Unit(benchmark::kMillisecond);

} // namespace
