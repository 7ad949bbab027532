// The event simulation of one parallel configuration (issue P17, deliverable 3): one pipeline
// replica of p stages (p v chunks when interleaved) run by core/sim's simulator under the schedule
// core/schedule generates for it (1F1B, interleaved:v, kFkB:k, ZB-H1). Each chunk's forward and
// backward are its layers as the closed form prices them (scale_costs.h: GEMMs, memory-bound kernels,
// the tensor-parallel all-reduces inside the compute, recomputation), the embeddings on the first
// stage and the logits and loss on the last; ZB-H1 defers the weight-gradient GEMMs to W. Chunks
// send their activations and gradients over the link between their stages' nodes: the node's switch
// inside a node, a GPU's share of the NICs across nodes (ranks tensor-, then data-, then
// pipeline-major). After the pipeline, the data-parallel gradient reduction (overlapped as stated)
// and Adam, as in the closed form. The pipeline is simulated twice, with and without transfer
// times, so the exposed pipeline sends and the bubble are told apart.
// Depends on: scale/scale_costs.h, schedule/, sim/simulator.h.
#pragma once

#include "scale/scale_model.h"
#include "schedule/schedule.h"

namespace ps {

// The largest pipeline simulateScale runs (2 p v m compute actions); beyond it the closed form stands.
inline constexpr double kMaxSimulatedActions = 1 << 21;

// The configuration's schedule as core/schedule knows it: p x v chunk stages, m micro-batches.
[[nodiscard]] ScheduleSpec scaleScheduleSpec(const ScaleConfig& config);

// The closed form's estimate with the iteration, its split, throughput and memory from the
// simulation: each stage's peak by core/sim's memory model (the one `compare` holds against measured
// runs) over Korthikanti et al.'s activation bytes per chunk, bf16 weights with fp32 gradient buffers
// (Megatron-LM's main_grad, held for the whole run), fp32 master weights and Adam states (1/d of
// them under ZeRO-1). Invalid configurations, and pipelines of more than kMaxSimulatedActions, come
// back as estimateScale returns them.
[[nodiscard]] ScaleEstimate simulateScale(
    const GptShape& model, const ScaleConfig& config, const NodeSpec& node, const DeviceSpec& device);
[[nodiscard]] ScaleEstimate simulateScale(const GptShape& model, const ScaleConfig& config, const NodeSpec& node);

} // namespace ps
