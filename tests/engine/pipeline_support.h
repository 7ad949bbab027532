// Helpers shared by the pipeline runtime's tests (pipeline_test.cpp, pipeline_ops_test.cpp).
#pragma once

#include "cuda/cuda_probe.h"
#include "data.h"
#include "graph/op_cost.h"
#include "plan/partition.h"
#include "runtime/training_run.h"
#include "schedule/schedule.h"
#include "sim/memory_model.h"
#include "zoo/model_config.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace ps::engine::testing {

// gpt2-tiny (2 layers, 64 wide, byte vocabulary, dropout 0) at sequence 32, micro-batch 2.
inline Graph tinyGpt()
{
    auto c = zooPreset("gpt2-tiny");
    c.seq = 32;
    c.microBatch = 2;
    return buildZooModel(c);
}

// True (with the probe's reason in `why`) where no GPU is usable: GPU tests skip then.
inline bool noGpu(std::string& why)
{
    const auto probe = cuda::probeGpus();
    why = probe.status;
    return probe.devices.empty();
}

// Random bytes, not the default corpus: tests must not depend on it.
inline TokenData randomCorpus()
{
    return TokenData::random(256, 1 << 16, 11);
}

// |a - b| / |b| over all elements (b the reference).
inline double relativeL2(const std::vector<float>& a, const std::vector<float>& b)
{
    double diff = 0;
    double norm = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
        norm += double(b[i]) * double(b[i]);
    }
    return std::sqrt(diff) / std::max(1e-20, std::sqrt(norm));
}

// Trains `steps` steps after a first one; returns the first step's loss and the last's.
template <typename Run> std::pair<double, double> firstAndLastLoss(Run& run, int steps)
{
    const double first = run.step().loss;
    double last = first;
    for (int s = 0; s < steps; ++s)
        last = run.step().loss;
    return { first, last };
}

inline std::vector<float> asFloats(const std::vector<std::byte>& bytes)
{
    std::vector<float> out(bytes.size() / 4);
    std::memcpy(out.data(), bytes.data(), out.size() * 4);
    return out;
}

// Contiguous stages with about equal node counts.
inline Partition evenCuts(const Graph& graph, int stages)
{
    Partition p;
    for (int s = 0; s < stages; ++s)
        p.stageStarts.push_back(graph.nodeCount() * static_cast<std::size_t>(s) / static_cast<std::size_t>(stages));
    return p;
}

// A run of `graph` on `stages` even stages under `schedule` (ScheduleSpec text), seed 5.
inline RunConfig configFor(
    const Graph& graph, const std::string& schedule, int stages, int microBatches, const std::string& optimizer = "sgd")
{
    RunConfig c;
    c.schedule = parseScheduleSpec(schedule, stages, microBatches);
    c.partition = evenCuts(graph, stages);
    c.optimizer.kind = optimizer;
    c.optimizer.lr = optimizer == "sgd" ? 0.05 : 3e-3;
    c.seed = 5;
    return c;
}

// Every stage swaps half of its saved storages and recomputes the rest (storages produced on
// another stage can only be swapped); with `recomputeAll`, recomputes every one it can.
inline std::vector<StageMemoryPlan> swapAndRecompute(
    const Graph& graph, const Partition& partition, bool recomputeAll = false)
{
    const auto costs = computeOpCosts(graph);
    std::vector<StageMemoryPlan> plans;
    for (int s = 0; s < partition.stageCount(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        const auto begin = partition.stageBegin(id);
        const auto end = partition.stageEnd(id, graph.nodeCount());
        StageMemoryPlan p;
        std::vector<TensorId> seen;
        for (std::size_t n = begin; n < end; ++n) {
            for (auto t : costs[n].savedTensors) {
                const auto root = storageRoot(graph, t);
                const auto& rt = graph.tensor(root);
                if (rt.kind != TensorKind::Activation || std::find(seen.begin(), seen.end(), root) != seen.end())
                    continue; // the loader's data is neither swapped nor recomputed
                seen.push_back(root);
                const bool here = rt.producer.valid() && rt.producer.index() >= begin && rt.producer.index() < end;
                if ((seen.size() % 2 == 0 && !recomputeAll) || !here)
                    p.swappedTensors.push_back(root);
                else
                    p.recomputedTensors.push_back(root);
            }
        }
        plans.push_back(p);
    }
    return plans;
}

} // namespace ps::engine::testing
