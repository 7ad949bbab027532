// A finished run (or a trace imported as one) against the simulator's prediction of it: the
// iteration time (the median step and one stored iteration's timeline), each device's peak memory
// with its parts, and the actions that differ most. `pipestudio compare` prints this value and the
// studio's Predicted vs measured view draws it.
// Depends on: runtime/run_prediction.h, core (store); no Qt.
#pragma once

#include "runtime/run_prediction.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::engine {

// One part of a device's memory (parameters, gradients, ...): the model's at its predicted peak
// against the allocator's at the measured one.
struct MemoryUseComparison
{
    std::string use; // "parameters", "gradients", "optimizer_states", "activations", "workspace", "messages"
    double predictedBytes = 0;
    double measuredBytes = 0;
};

struct DevicePeakComparison
{
    int device = 0;
    double predictedBytes = 0; // with as many messages as any timing can leave waiting
    double predictedTimedBytes = 0; // with the messages the simulated timing leaves
    double predictedWithoutMessagesBytes = 0; // everything else: what no timing changes
    std::int64_t measuredBytes = 0; // the largest peak any stored step measured; 0: not measured (a trace)
    std::vector<MemoryUseComparison> byUse; // at those peaks
};

struct RunComparisonOptions
{
    std::int64_t iteration = 0; // the stored iteration whose timeline is compared; 0: the last one
    // The profile to predict with (analytical, measured, imported, a stored source); empty: the
    // run's own (imported for a trace's run, else measured where stored).
    std::string profile;
    bool needTimeline = true; // false: a run that stored no timeline compares time and memory only
    // true: a profile asked for (or the run's own) that the project does not store is an error;
    // false: the analytical estimate stands in (the studio's view, which names the profile it used).
    bool strictProfile = true;
};

struct RunComparison
{
    std::int64_t runId = 0;
    std::string schedule; // "1F1B"
    std::string profileSource; // the profile predicted with: "analytical", "measured-cpu (...)"
    std::string profileExplained; // the same for a reader of `compare`: on which device, how to measure one
    SimulationResult predicted;
    double measuredStepNs = 0; // the median step (a training run's first, warming up, left out)
    std::int64_t iteration = 0; // the stored iteration compared (0: none stored)
    std::vector<std::int64_t> iterations; // every iteration with a stored timeline
    std::vector<SimEvent> measured; // that iteration's actions, times from its first action
    double measuredIterationNs = 0; // its span
    std::vector<ActionDifference> largestDifferences;
    std::vector<DevicePeakComparison> peaks;
    std::vector<std::string> deviceNames; // the run's devices ("cpu:1", "cuda:0.1"), one per device
};

// Throws ps::Error naming the project or run: no such run, a profile asked for that the project
// does not store, no stored timeline (where needed) or iteration, or a run that cannot be predicted.
[[nodiscard]] RunComparison compareRun(
    const ProjectStore& store, std::int64_t runId, const RunComparisonOptions& options = {});

} // namespace ps::engine
