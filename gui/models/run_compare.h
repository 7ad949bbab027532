// A run's measured iteration against the simulator's prediction for the same cuts, schedule and
// devices: both timelines, the largest per-action differences and per-device peak memory. The
// predicted-vs-measured view draws exactly this value.
#pragma once

#include "models/run_prediction.h"

namespace ps::gui {

struct DevicePeakComparison
{
    int device = 0;
    double predictedBytes = 0;
    std::int64_t measuredBytes = 0; // the largest peak any stored step measured
};

struct RunComparison
{
    std::int64_t runId = 0;
    std::int64_t iteration = 0; // the measured iteration shown
    std::vector<std::int64_t> iterations; // every iteration with a stored timeline
    std::string profileSource;
    SimulationResult predicted;
    std::vector<SimEvent> measured; // times from the iteration's first action
    double measuredIterationNs = 0;
    std::vector<ActionDifference> largestDifferences;
    std::vector<DevicePeakComparison> peaks;
    std::vector<std::string> deviceNames; // the run's devices ("cpu:1", "cuda:0.1"), one per device
};

// `iteration` 0: the last stored one (as `pipestudio compare`). Throws ps::Error naming the run
// when it stored no timeline or cannot be predicted.
[[nodiscard]] RunComparison compareRun(const ProjectStore& store, std::int64_t runId, std::int64_t iteration = 0);

} // namespace ps::gui
