// The data-parallel baseline DawnPiper's memory comparison needs: ZeRO (Rajbhandari et al., SC'20,
// §5) shards the model states of data-parallel training over N devices. Stage 1 shards the
// optimizer states (and fp32 master weights), stage 2 also the gradients, stage 3 also the
// weights; every device still runs the whole model on its own micro-batch, so it holds one
// micro-batch of the whole model's activations and the backward's working set. The gathered
// layer's weights (stage 3) and the bucket buffers are transient and left out: a lower bound.
// Depends on: plan/partition.h (StageCost), cost/ (TrainingSetup).
#pragma once

#include "cost/profile.h"
#include "graph/graph.h"

namespace ps {

struct ZeroMemory
{
    double weights = 0;
    double gradients = 0;
    double optimizerStates = 0; // with the master weights under mixed precision
    double activations = 0; // one micro-batch of the whole model
    double workspace = 0;
    [[nodiscard]] double total() const
    {
        return weights + gradients + optimizerStates + activations + workspace;
    }
};

// Per-device memory of data-parallel training with ZeRO `stage` (0: plain DDP, 1, 2, 3) on
// `devices` devices at `microBatch` samples per device. Throws ps::Error for a stage outside 0-3.
[[nodiscard]] ZeroMemory zeroMemory(
    const Graph& graph, const Profile& profile, double microBatch, int devices, int stage);

// The largest per-device micro-batch whose ZeRO memory fits `capacityBytes` (0: not even 1).
[[nodiscard]] int zeroMaxMicroBatch(
    const Graph& graph, const Profile& profile, int devices, int stage, double capacityBytes, int upperLimit = 1 << 14);

} // namespace ps
