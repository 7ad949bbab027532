// One micro-batch's state in a StageExecutor, shared by its source files (stage_executor.cpp,
// stage_fusion.cpp); not part of the executor's interface.
// Depends on: runtime/stage_executor.h.
#pragma once

#include "runtime/stage_executor.h"

#include <optional>
#include <vector>

namespace ps::engine {

struct StageExecutor::MicroBatch
{
    std::vector<NdArray> values; // by slot
    std::vector<NodeValues> nodes; // by local node: what backward reads
    std::vector<NdArray> grads; // by slot, during backward
    std::vector<std::vector<NdArray>> gradOut; // by local node, kept from B to W
    std::vector<char> weightPending; // by local node
    std::vector<NdArray> received; // gradients of boundaryOut from the next stage
    std::vector<NdArray> outbound; // activations for the next stage
    std::vector<NdArray> inputGrads;
    std::vector<TensorId> pendingSwap, pendingDrop; // wait until outbound is taken
    std::optional<CopyStream::Ticket> swapOutCopy, swapInCopy; // queued on the copy streams
    std::vector<TensorId> dropped;
    std::optional<double> loss;
    bool forwardDone = false;
    bool backwardDone = false;
    bool inputGradsTaken = false;
    int version = 0;
};

} // namespace ps::engine
