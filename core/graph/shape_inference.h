// Output shapes of IR ops from their input shapes and attributes.
//
// One function decides what every op produces: the zoo builder uses it to create output tensors
// and the validator uses it to check stored shapes, so the two can never disagree.
// Depends on: graph/graph.h only.
#pragma once

#include "graph/graph.h"

#include <optional>
#include <vector>

namespace ps {

// Output shapes of `node` given its input tensors, or nullopt for ops whose shapes are not
// derivable (Opaque). Throws ps::Error describing the mismatch, e.g.
// "MatMul inner dimensions differ: (4, 8, 64) x (32, 16)"; callers add the node name.
[[nodiscard]] std::optional<std::vector<Shape>> inferOutputShapes(
    const Node& node, const std::vector<const Tensor*>& inputs);

// NumPy broadcasting of two shapes; throws ps::Error if they are incompatible.
[[nodiscard]] Shape broadcastShapes(const Shape& a, const Shape& b);

} // namespace ps
