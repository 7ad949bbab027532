// Structural and shape validation of a Graph.
//
// Catches what an importer or a hand edit can get wrong: references to missing tensors, cycles,
// nodes out of topological order, activations nobody produces or consumes, and stored shapes that
// disagree with what the op computes. Messages name the node and tensor involved.
// Depends on: graph/graph.h, graph/shape_inference.h.
#pragma once

#include "graph/graph.h"

#include <string>
#include <vector>

namespace ps {

struct GraphIssue
{
    enum class Severity { Warning, Error };
    Severity severity = Severity::Error;
    std::string message;
};

// Every problem found, errors and warnings, in node order.
[[nodiscard]] std::vector<GraphIssue> validateGraph(const Graph& graph);

// Throws ps::Error carrying the first error (and how many more there are); warnings pass.
void validateGraphOrThrow(const Graph& graph);

} // namespace ps
