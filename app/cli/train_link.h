// Internal to the CLI: `pipestudio train`'s emulated link between CPU devices and the pace of
// Ada-Grouper's group-size controller (--schedule kfkb:auto; engine/runtime/training_job.h runs it).
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
} // namespace ps::app
