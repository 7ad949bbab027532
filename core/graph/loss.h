// Attaching a training loss to a graph that has none (an imported ONNX model): the model's first
// output becomes the prediction, a new input holds the labels, and the graph's only output is the
// scalar loss, so the engine can train it and the planner can pipeline it.
//
// cross-entropy: (logits (..., V), labels (...) int64 class indices) -> mean loss, as
//   torch.nn.functional.cross_entropy over the last dimension (a classifier's (B, classes) or a
//   language model's (B, T, vocab)).
// mse: (prediction, target of the same shape, float) -> mean((prediction - target)^2), as
//   torch.nn.functional.mse_loss.
// Depends on: graph/graph.h, graph/shape_inference.h; no Qt, no CUDA.
#pragma once

#include "graph/graph.h"

#include <optional>
#include <string_view>

namespace ps {

enum class LossKind : std::uint8_t { CrossEntropy, MeanSquaredError };

// "cross-entropy" or "mse"; nullopt otherwise.
[[nodiscard]] std::optional<LossKind> parseLossKind(std::string_view name);

struct LossSpec
{
    LossKind kind = LossKind::CrossEntropy;
    // The labels' shape; empty: derived from the prediction (its shape without the last dimension
    // for cross-entropy, its shape for mse). Given, it must be that shape.
    std::optional<Shape> labelsShape;
};

// Throws ps::Error naming the model when it already ends in a scalar (a loss), its first output is
// not a floating tensor of rank >= 1 (>= 2 for cross-entropy), or the labels shape does not fit.
// The labels input is named "labels" ("loss.labels" when the model already has a "labels").
[[nodiscard]] Graph attachLoss(Graph graph, const LossSpec& spec);

} // namespace ps
