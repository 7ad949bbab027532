// Internal to the CLI: human and JSON renderings of a project summary.
#pragma once

#include "graph/graph_summary.h"

#include <string>

namespace ps::app {

// Multi-line text as printed by `pipestudio info`.
std::string summaryText(const GraphSummary& summary, const std::string& projectPath, int schemaVersion);
// The JSON object printed by `pipestudio info --json`.
std::string summaryJson(const GraphSummary& summary, const std::string& projectPath, int schemaVersion);

} // namespace ps::app
