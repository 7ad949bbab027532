// The parts a configuration's iteration is priced from, shared by the closed form (scale_model.cpp)
// and the event simulation (scale_sim.cpp), so both cost the same layer, head, sends, data-parallel
// reduction, optimizer step and memory: one GPU of a tensor group, one micro-batch, seconds.
// Depends on: scale/scale_model.h.
#pragma once

#include "scale/scale_model.h"

#include <vector>

namespace ps::scale {

// bf16 element; per parameter the bf16 weight, fp32 main gradient, fp32 master weight, Adam's m and v.
inline constexpr double kHalf = 2;
inline constexpr double kStateBytes = 2 + 4 + 4 + 4 + 4;

// One transformer layer on one GPU of the tensor group.
struct LayerCost
{
    double forward = 0; // GEMMs and memory-bound kernels
    double backward = 0; // input and weight gradients
    double weightGrad = 0; // the part of backward that computes weight gradients (zero-bubble's W)
    double recompute = 0; // what backward adds to rebuild the saved activations
    double allReduce = 0; // one all-reduce of the layer's output over the tensor group
    int forwardAllReduces = 2;
    int backwardAllReduces = 2; // with the recomputed forward's where recomputation is full

    [[nodiscard]] double tensorComm() const
    {
        return (forwardAllReduces + backwardAllReduces) * allReduce;
    }
};
[[nodiscard]] LayerCost layerCost(
    const GptShape& g, const ScaleConfig& c, const NodeSpec& node, const DeviceSpec& device);

// The last stage's logits and cross-entropy (the vocabulary split over the tensor group).
struct HeadCost
{
    double forward = 0;
    double backward = 0; // with the loss's memory traffic
    double weightGrad = 0;
    double logitBytes = 0; // the fp32 logits of one micro-batch
};
[[nodiscard]] HeadCost headCost(const GptShape& g, const ScaleConfig& c, const DeviceSpec& device);

// Activation bytes one layer keeps per micro-batch under recomputation `r` (Korthikanti et al.).
[[nodiscard]] double layerActivationBytes(const GptShape& g, const ScaleConfig& c, Recompute r);
[[nodiscard]] double layerParameters(const GptShape& g); // 12 h^2 + 13 h
// The bytes a chunk sends to the next stage per micro-batch (1/t of it per GPU: scatter-gather).
[[nodiscard]] double stageSendBytes(const GptShape& g, const ScaleConfig& c);
// The link between consecutive stages: the node's switch while the whole pipeline sits in one node,
// else a GPU's share of the NICs (ranks are tensor-, then data-, then pipeline-major).
[[nodiscard]] LinkSpec pipelineLink(const ScaleConfig& c, const NodeSpec& node);

// After a stage's pipeline work: its data-parallel gradient reduction (overlapped with
// `lastBackward`, the stage's last micro-batch's backward, where asked) and Adam, for stage `stage`
// (0, the first, holds the embeddings: the fullest; the last holds its copy of the word embedding).
struct AfterPipeline
{
    double dataComm = 0;
    double optimizer = 0;
};
[[nodiscard]] AfterPipeline afterPipeline(const GptShape& g, const ScaleConfig& c, const NodeSpec& node,
    const DeviceSpec& device, double lastBackward, int stage = 0);
// The bytes of a GPU a configuration may fill with tensors (cost/runtime_memory.h: a PyTorch
// process's CUDA context and caching allocator, as measured, taken from the device's memory).
[[nodiscard]] double usableBytes(const DeviceSpec& device);
// "needs 82 GiB per GPU, more than the 75 GiB ... leaves for tensors"
[[nodiscard]] std::string notFitting(double peakBytes, const DeviceSpec& device);

// Each stage's peak memory on one of its GPUs: model states, the micro-batches it has in flight under
// the schedule, one layer's working set, the last stage's logits.
[[nodiscard]] std::vector<double> stagePeakBytes(const GptShape& g, const ScaleConfig& c, double logitBytes);

} // namespace ps::scale
