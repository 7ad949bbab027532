// Internal to the CLI: human and JSON renderings of a project summary.
#pragma once

#include "graph/graph_summary.h"
#include "onnx/onnx_import.h"

#include <string>

namespace ps::app {

// Multi-line text as printed by `pipestudio info`.
std::string summaryText(const GraphSummary& summary, const std::string& projectPath, int schemaVersion);
// The JSON object printed by `pipestudio info --json`.
std::string summaryJson(const GraphSummary& summary, const std::string& projectPath, int schemaVersion);

// One line per data input of an imported model: each dimension dynamic (bound to what) or fixed (at
// what size, re-specialised or not), with its role. Empty for models that are not imported.
std::string inputDimsText(const std::vector<OnnxInputDim>& dims, const std::string& indent = "");

} // namespace ps::app
