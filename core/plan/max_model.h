// Maximum model scale (PatrickStar §9.2.1, Table 3): the largest GPT-like model of a ladder
// that trains data-parallel on N devices of one kind with a given host memory, for PatrickStar
// (the chunk replay of plan/chunk_plan.h) and two baselines the paper compares with:
//  - PyTorch DDP: everything on every GPU, 16 B/param of model data (cost/training_setup.h) plus
//    the non-model data of the same warm-up trace;
//  - DeepSpeed ZeRO-Offload (the paper's "DeepSpeed", ZeRO-3 with offload, Figure 3): fp16
//    parameters and gradients on the GPUs (sharded over them), fp32 parameters, momentum and
//    variance plus the offloaded fp16 gradients in host memory (12 + 2 B/param), ADAM on the CPU.
// Depends on: plan/chunk_plan.h, zoo/model_config.h, cluster/, cost/.
#pragma once

#include "plan/chunk_plan.h"
#include "zoo/model_config.h"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class TrainingSystem : std::uint8_t { PyTorchDdp, ZeroOffload, PatrickStar };
inline constexpr std::array kTrainingSystems { TrainingSystem::PyTorchDdp, TrainingSystem::ZeroOffload,
    TrainingSystem::PatrickStar };
[[nodiscard]] std::string_view toString(TrainingSystem system);

struct ModelRung
{
    std::string label; // "12B"
    ModelConfig config;
    bool fromPaper = true; // a Table 2 row; false for the larger rungs this tool adds
};

// PatrickStar Table 2 (16 heads; layers x hidden: 1B 20x2048, 2B 40x2048, 4B 64x2304, 6B 53x3072,
// 8B 72x3072, 10B 50x4096, 12B 60x4096 and its 65-layer variant), then hidden 4096 with 80..160
// layers so the search is not capped at the paper's largest model. GPT-2's vocabulary (50257).
[[nodiscard]] std::vector<ModelRung> patrickStarModelLadder(std::int64_t seq);

struct SystemEstimate
{
    TrainingSystem system = TrainingSystem::PatrickStar;
    double microBatch = 0; // samples per GPU
    bool feasible = false;
    std::string reason; // why not, when infeasible
    double gpuPeakBytes = 0; // per device
    double hostBytes = 0; // the node's host memory for model data
    double cpuGpuBytes = 0; // per device and iteration
    IterationEstimate time;
    double tflopsPerGpu = 0;
};

// The baselines at options.microBatch samples per GPU; memory limits are the device's and the
// node's full capacities (the 0.8 fractions are PatrickStar's own budget).
[[nodiscard]] SystemEstimate estimateDdp(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options);
[[nodiscard]] SystemEstimate estimateZeroOffload(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options);
[[nodiscard]] SystemEstimate estimatePatrickStar(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options);

struct MaxModelRequest
{
    DeviceSpec device;
    int gpus = 1;
    std::int64_t hostMemoryBytes = 0; // per node
    std::int64_t seq = 1024; // §9.1: sequence length 1024 in every case
    // §9.1's per-GPU batch sizes; the best one that fits counts.
    std::vector<double> microBatches { 4, 8, 16, 32, 64 };
    // Table 3 counts a model only above 30 TFLOPS per GPU; 0 asks only that it fits.
    double minTflopsPerGpu = 0;
    ChunkPlanOptions options; // its microBatch is replaced by each of microBatches
    std::vector<ModelRung> ladder; // empty: patrickStarModelLadder(seq)
};

struct RungResult
{
    ModelRung rung;
    std::int64_t parameters = 0;
    std::array<SystemEstimate, 3> systems; // by TrainingSystem: its best micro-batch
};

struct MaxModelResult
{
    std::vector<RungResult> rungs;
    std::array<int, 3> largest { -1, -1, -1 }; // by TrainingSystem: index into rungs, -1: none
};

// Walks the ladder (mixed-precision ADAM, analytical profile of `device`). For each rung and
// system the micro-batch with the highest throughput among those that fit is kept.
[[nodiscard]] MaxModelResult findMaxModelScale(const MaxModelRequest& request);

} // namespace ps
