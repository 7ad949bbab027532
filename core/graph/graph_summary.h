// Whole-model figures shown by `pipestudio info` and the GUI's summary panel.
//
// One function computes them so the CLI, the GUI and the tests agree. Depends on: graph/.
#pragma once

#include "graph/graph.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ps {

struct GraphSummary
{
    std::string name;
    std::string family;
    std::int64_t microBatch = 1;
    std::size_t nodeCount = 0;
    std::size_t tensorCount = 0;
    std::int32_t layerCount = 0; // distinct transformer blocks
    std::int64_t parameterCount = 0;
    std::int64_t parameterBytes = 0;
    double forwardFlopsPerSample = 0;
    double backwardFlopsPerSample = 0;
    std::int64_t activationBytesPerSample = 0; // saved for backward, each storage once
    std::int64_t outputBytesPerSample = 0; // every activation written in forward
    std::vector<std::pair<std::string, std::int64_t>> opHistogram; // most frequent first
};

[[nodiscard]] GraphSummary summarizeGraph(const Graph& graph);
[[nodiscard]] std::string summaryToJson(const GraphSummary& summary);

// "124.4M", "1.56B"; "355.3 MiB", "1.2 GiB"; "3.1 TFLOP".
[[nodiscard]] std::string formatCount(double value);
[[nodiscard]] std::string formatBytes(double bytes);
[[nodiscard]] std::string formatFlops(double flops);

} // namespace ps
