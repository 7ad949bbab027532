// What the Scale-out dialog shows (issue P17, deliverable 5): for the project's GPT on a cluster of
// one node kind, the search's ranked configurations at the GPUs asked for, and the scale-out curve,
// the best configuration's TFLOP/s per GPU and memory at 1, 2, 4, ... nodes up to those GPUs, at the
// same global batch (core/scale/scale_model.h). Depends on: core (scale, graph, zoo); no Qt.
#pragma once

#include "graph/graph.h"
#include "scale/scale_model.h"

#include <optional>
#include <vector>

namespace ps::gui {

struct ScaleOutPoint
{
    int gpus = 0;
    ScaleEstimate best; // the search's fastest that fits
};

struct ScaleOut
{
    ScaleSearch search; // at the GPUs asked for
    std::vector<ScaleOutPoint> curve; // GPU counts where something fits, ascending
};

// The GPT sizes of a zoo GPT-2 graph; nullopt for any other model (scale plans GPT decoders).
[[nodiscard]] std::optional<GptShape> gptShapeOf(const Graph& graph);
// `features`: sequence parallelism, ZeRO-1 and the overlapped reduction for every configuration.
[[nodiscard]] ScaleOut scaleOut(const GptShape& model, const NodeSpec& node, int gpus, std::int64_t globalBatch,
    std::size_t keep = 20, ScaleFeatures features = {});

} // namespace ps::gui
