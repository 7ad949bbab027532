// Issue P17's scale rows as Google Benchmark cases: the search for the 1T-parameter GPT on 3,072
// A100s (Megatron-LM's largest Table 1 row), and one configuration of it priced by the closed form
// beside the event simulation (their ratio is what simulating the search's leaders costs).
#include "scale/scale_sim.h"

#include <benchmark/benchmark.h>

namespace {

const ps::GptShape kTrillion { 128, 25600, 160, 2048, 51200 };

void BM_ScaleSearch_1T_3072(benchmark::State& state)
{
    const auto& node = ps::findNode("dgx-a100-80gb");
    for (auto _ : state)
        benchmark::DoNotOptimize(ps::searchScale(kTrillion, 3072, 3072, node, 10));
}
BENCHMARK(BM_ScaleSearch_1T_3072)->Unit(benchmark::kMillisecond);

// Megatron's 1T row (t8 p64 d6, 1F1B) priced once: the closed form, or the event simulation.
void BM_Scale1TRow(benchmark::State& state, bool simulated)
{
    const auto& node = ps::findNode("dgx-a100-80gb");
    const ps::ScaleConfig c { 8, 64, 6, 1, 3072, 1, ps::Recompute::Full };
    for (auto _ : state) {
        benchmark::DoNotOptimize(
            simulated ? ps::simulateScale(kTrillion, c, node) : ps::estimateScale(kTrillion, c, node));
    }
}
BENCHMARK_CAPTURE(BM_Scale1TRow, closed_form, false)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Scale1TRow, simulated, true)->Unit(benchmark::kMicrosecond);

} // namespace
