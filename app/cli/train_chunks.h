// Internal to the CLI: `pipestudio train --chunks` (PatrickStar chunk managers in the engine): the
// options and how a step's chunk counts are printed and written as JSON.
#pragma once

#include "runtime/training_run.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ps::app {

struct ChunkCliOptions
{
    bool enabled = false;
    std::int64_t chunkElements = 0;
};

void addChunkOptions(CLI::App* cmd, ChunkCliOptions& options);
[[nodiscard]] engine::ChunkOptions chunkOptions(const ChunkCliOptions& options);
// Per device: placement, moves and optimizer elements of one step (empty without chunks).
[[nodiscard]] nlohmann::json chunksJson(const engine::RunStepResult& r);
// One line per device for the text log ("" without chunks).
[[nodiscard]] std::string chunksText(const engine::RunStepResult& r, const std::vector<engine::RuntimeDevice>& devices);

} // namespace ps::app
