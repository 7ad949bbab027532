// Internal to the CLI: `pipestudio train`'s emulated link between CPU devices and Ada-Grouper's
// group-size controller (--schedule kfkb:auto) over the run's measured transfers.
#pragma once

#include "runtime/group_controller.h"
#include "runtime/training_run.h"
#include "store/project_store.h"

#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace ps::app {

struct LinkOptions
{
    std::string bandwidth; // empty: memory speed
    double latencySeconds = 0;
    std::string preempt; // PERIOD_S,FRACTION,SHARE
    int adaptEvery = 5; // kfkb:auto: steps between the controller's decisions
};

void addLinkOptions(CLI::App* cmd, LinkOptions& options);
// Throws ps::Error for a bad bandwidth or trace, or a trace without a link.
[[nodiscard]] engine::LinkEmulation linkEmulation(const LinkOptions& options);
// The controller for `run` (its schedule a kFkB), on the project's measured profile if it has
// one, over autoGroupCandidates' (k, b) (the memory-limit curve under --device-memory); sets the
// run's first (k, b) to the one predicted fastest at the link's nominal bandwidth.
// `deviceKind` and `precision` as the run's RunShape takes them ("cpu" or a GPU's catalog entry;
// "fp32", "tf32", "bf16").
[[nodiscard]] std::unique_ptr<engine::GroupSizeController> groupController(const ProjectStore& store, int adaptEvery,
    std::int64_t deviceMemoryBytes, const std::string& deviceKind, const std::string& precision,
    engine::TrainingRun& run);
// After a step: the controller's decision, if one is due, applied from the next step on (a new
// micro-batch size rebuilds the zoo model at that size) and printed (a JSON line with
// "group_size" and "micro_batch" under --json).
void adaptGroupSize(
    engine::GroupSizeController* controller, engine::TrainingRun& run, const engine::RunStepResult& r, bool json);

} // namespace ps::app
