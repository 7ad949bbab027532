// Issue P19's planner rows as Google Benchmark cases (tests/bench/planner_speed.py times the same
// rows as CLI processes): a 1T-parameter GPT planned by DawnPiper on 64 stages, maxbatch of every
// algorithm on gpt2-xl at 8 stages, the search over 4 schedules x 4 sizes x 2 algorithms, and
// gpt2-xl planned by DawnPiper at 8 stages. One thread, so that a run compares with another.
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "plan/planner.h"
#include "plan/stage_model.h"
#include "zoo/model_config.h"

#include <benchmark/benchmark.h>

namespace {

// gpt2-xl's graph and its analytical profile on `device`, built once per benchmark.
struct PlannedModel
{
    ps::Graph graph;
    ps::Profile profile;
    ps::DeviceSpec device;
};

PlannedModel plannedModel(bool trillion, const char* device)
{
    auto config = ps::zooPreset("gpt2-xl");
    if (trillion) { // 128 layers, hidden 25600, 160 heads, seq 2048
        config.layers = 128;
        config.hidden = 25600;
        config.heads = 160;
        config.seq = 2048;
        config.maxPositions = 2048;
    }
    const auto& d = ps::DeviceCatalog::builtin().find(device);
    auto graph = ps::buildZooModel(config);
    auto profile = ps::estimateProfile(graph, d, {});
    return { std::move(graph), std::move(profile), d };
}

void BM_PlanDawnPiper(benchmark::State& state, bool trillion, int stages, int microBatches)
{
    static const auto t1 = plannedModel(true, "a100-80gb");
    static const auto xl = plannedModel(false, "a100-40gb");
    const auto& m = trillion ? t1 : xl;
    const auto spec = ps::parseScheduleSpec("1f1b", stages, microBatches);
    const auto cluster = ps::makeCluster(m.device, stages);
    ps::PlannerOptions options;
    options.algorithm = ps::PlanAlgorithm::DawnPiper;
    for (auto _ : state) { // a fresh stage model each time: its range cache starts empty, as a `plan` run's
        const ps::StageModel model(
            m.graph, m.profile, spec, cluster, static_cast<double>(m.graph.info().microBatch), {});
        benchmark::DoNotOptimize(ps::findPlan(model, options));
    }
}
BENCHMARK_CAPTURE(BM_PlanDawnPiper, t1_64_stages, true, 64, 128)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PlanDawnPiper, gpt2_xl_8_stages, false, 8, 8)->Unit(benchmark::kMillisecond);

void BM_MaxBatchEveryAlgorithm_Gpt2Xl(benchmark::State& state)
{
    static const auto xl = plannedModel(false, "a100-40gb");
    const auto spec = ps::parseScheduleSpec("1f1b", 8, 8);
    const auto cluster = ps::makeCluster(xl.device, 8);
    for (auto _ : state) {
        for (const auto a : ps::allPlanAlgorithms()) {
            if (a == ps::PlanAlgorithm::Exhaustive)
                continue; // as `maxbatch --algo all` leaves it out at 8 stages
            ps::PlannerOptions options;
            options.algorithm = a;
            benchmark::DoNotOptimize(ps::findMaxMicroBatch(xl.graph, xl.profile, spec, cluster, options));
        }
    }
}
BENCHMARK(BM_MaxBatchEveryAlgorithm_Gpt2Xl)->Unit(benchmark::kMillisecond);

void BM_Search_Gpt2Xl(benchmark::State& state)
{
    static const auto xl = plannedModel(false, "a100-40gb");
    ps::SearchRequest request;
    for (const auto* text : { "gpipe", "1f1b", "kfkb:2", "zb-h1" })
        request.schedules.push_back(ps::parseScheduleSpec(text, 8, 8));
    request.algorithms = { ps::PlanAlgorithm::DawnPiper, ps::PlanAlgorithm::PipeDream };
    request.microBatchSizes = { 1, 2, 4, 8 };
    request.globalBatch = 64;
    request.device = xl.device;
    request.threads = 1;
    std::size_t plans = 0;
    for (auto _ : state)
        plans = ps::searchPlans(xl.graph, xl.profile, request).size();
    state.counters["plans"] = static_cast<double>(plans);
}
BENCHMARK(BM_Search_Gpt2Xl)->Unit(benchmark::kMillisecond);

} // namespace
