// What the Scale-out dialog shows (issue P17, deliverable 5): for the project's GPT on a cluster of
// one node kind, the search's ranked configurations at the GPUs asked for, and the scale-out curve,
// the best configuration's TFLOP/s per GPU and memory at 1, 2, 4, ... nodes up to those GPUs, at the
// same global batch (core/scale/scale_model.h). Depends on: core (scale, graph, zoo); no Qt.
#pragma once

#include "graph/graph.h"
#include "scale/scale_model.h"
#include "schedule/schedule.h"

#include <optional>
#include <string>
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

// The Cluster dock's sizes across nodes: the plan's pipeline (p = its devices, its schedule,
// micro-batch size and count) replicated over `data` GPUs' worth of data parallelism, each stage
// split over `tensor` GPUs of one node, on nodes of kind `node` (Megatron-LM's layout, bf16 and
// Adam, priced by simulateScale; the layers split evenly over the stages, not by the plan's cuts).
struct ClusterSizes
{
    std::string node = "dgx-a100-80gb";
    int tensor = 1;
    int data = 1;
    Recompute recompute = Recompute::Selective;
};

struct ClusterScale
{
    ScaleConfig config;
    ScaleEstimate estimate; // valid false with the reason where the sizes do not apply
    int gpus = 0;
    int nodes = 0; // nodes the GPUs fill, the last one possibly in part
    std::string text; // what the dock shows
};

// Prices the plan at those sizes. Schedules other than 1F1B and interleaved are not priced (the
// reason says so), nor a model that is not a GPT decoder (`model` nullopt), nor a plan whose stages
// share devices (Mixed-pipe).
[[nodiscard]] ClusterScale priceClusterSizes(const std::optional<GptShape>& model, const ClusterSizes& sizes,
    const ScheduleSpec& schedule, std::int64_t microBatch, bool stagesShareDevices = false);

} // namespace ps::gui
