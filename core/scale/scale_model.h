// Pipeline x tensor x data parallelism for GPT models on clusters (issue P17, deliverables 2-4):
// Megatron-LM's layout (Narayanan et al., SC'21, §2-3): tensor parallelism t inside a node (the
// attention and MLP MatMuls split column- then row-wise, two all-reduces of the layer's output per
// pass), pipeline parallelism p over stages of l/p layers (1F1B, or interleaved with v chunks per
// GPU), data parallelism d = N / (t p) replicas whose gradients are all-reduced after the backward.
// One replica's iteration is priced analytically: every GEMM of a layer through the GEMM model
// (core/cost/gemm_model.h: tiles and waves on the GPU's SMs), the memory-bound kernels at the GPU's
// memory bandwidth, the tensor-parallel all-reduces, the pipeline's point-to-point sends and
// bubble, the data-parallel all-reduce and the optimizer step. Throughput is reported as the
// paper's Eq. 3 FLOP count over the iteration time, so it compares with its Table 1.
// Depends on: cost/gemm_model.h, scale/collectives.h; no Qt.
#pragma once

#include "scale/collectives.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

struct GptShape
{
    std::int64_t layers = 24;
    std::int64_t hidden = 2304;
    std::int64_t heads = 24;
    std::int64_t seq = 2048;
    std::int64_t vocab = 51200;
    // 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h)): the paper's parameter count.
    [[nodiscard]] double parameters() const;
};

enum class Recompute { None, Selective, Full };
[[nodiscard]] std::string_view toString(Recompute r);
[[nodiscard]] Recompute parseRecompute(std::string_view text); // throws ps::Error naming the value

struct ScaleConfig
{
    int tensor = 1; // t
    int pipeline = 1; // p
    int data = 1; // d
    std::int64_t microBatch = 1; // b
    std::int64_t globalBatch = 512; // B = d x b x m
    int chunks = 1; // v: 1 is 1F1B, more is the interleaved schedule
    Recompute recompute = Recompute::Full;
    // Sequence parallelism (Korthikanti et al. 2022, §4.2.2): LayerNorm and dropout sharded over the
    // sequence inside the tensor group; each all-reduce becomes a reduce-scatter and an all-gather
    // (the same time on a ring), and those activations and kernels are 1/t per GPU.
    bool sequenceParallel = false;
    // ZeRO stage 1 (Rajbhandari et al. 2020, §5.1, P_os) over the data-parallel group: each GPU keeps
    // and updates 1/d of the fp32 master weights and Adam's states; the gradients are reduce-scattered
    // (fp32) and the updated weights all-gathered (bf16) instead of all-reduced.
    bool zero1 = false;
    // The data-parallel gradient reduction bucketed per layer and started as the last micro-batch's
    // backward finishes each layer of the stage: only what that backward cannot hide is exposed, and
    // at least the last layer's bucket.
    bool overlapGradientReduce = false;
    int group = 1; // kFkB's k (Ada-Grouper): k micro-batches per group; 1 is 1F1B
    bool zeroBubble = false; // ZB-H1 (Qi et al. 2024): the backward split into B and W, 1F1B's memory

    [[nodiscard]] int gpus() const
    {
        return tensor * pipeline * data;
    }
    [[nodiscard]] std::int64_t microBatches() const; // m per pipeline
    [[nodiscard]] std::string scheduleText() const; // "1f1b", "interleaved:2", "kfkb:2", "zb-h1"
    [[nodiscard]] std::string text() const; // "t8 p4 d32 b1 interleaved:2 full[ sp][ zero1][ overlap]"
};

// Sets `config`'s schedule from "1f1b", "interleaved:V" (V >= 2), "kfkb:K" (K >= 2) or "zb-h1";
// throws ps::Error listing the forms.
void setScaleSchedule(ScaleConfig& config, std::string_view text);

struct ScaleEstimate
{
    ScaleConfig config;
    bool valid = false;
    std::string reason; // why invalid or does not fit
    double iterationSeconds = 0;
    double tflopsPerGpu = 0; // Eq. 3 FLOPs / iteration / GPUs
    double samplesPerSecond = 0;
    double peakBytes = 0; // the fullest GPU's (the most of stagePeakBytes)
    std::vector<double> stagePeakBytes; // per pipeline stage, a GPU of it
    bool fits = false;
    bool simulated = false; // the iteration from the event simulation (scale_sim.h), else the closed form
    // Where one iteration goes on the slowest stage (seconds, summing to the iteration).
    double computeSeconds = 0;
    double tensorCommSeconds = 0;
    double pipelineCommSeconds = 0;
    double bubbleSeconds = 0;
    double dataCommSeconds = 0;
    double optimizerSeconds = 0;
};

// The paper's Eq. 3: FLOPs of one iteration with full recomputation, 96 B s l h^2 (1 + s / (6h) +
// V / (16 l h)).
[[nodiscard]] double megatronIterationFlops(const GptShape& model, std::int64_t globalBatch);

// One configuration on `gpus` GPUs of `node`s (bf16 mixed precision, Adam). Invalid (with the
// reason) when the sizes do not divide the model, the batch or the node.
[[nodiscard]] ScaleEstimate estimateScale(const GptShape& model, const ScaleConfig& config, const NodeSpec& node);
// The same with the node's GPUs as `device` (a catalog entry with other constants: a calibration).
[[nodiscard]] ScaleEstimate estimateScale(
    const GptShape& model, const ScaleConfig& config, const NodeSpec& node, const DeviceSpec& device);

struct ScaleSearch
{
    int gpus = 0;
    std::int64_t globalBatch = 0;
    std::vector<ScaleEstimate> ranked; // fitting configurations, fastest first (simulated)
    int evaluated = 0; // by the closed form
    int simulated = 0; // the leaders and each shape's best, by the event simulation (scale_sim.h)
    // Per (t, p, d) searched, in t, then p order: its fastest fitting configuration, or where none
    // fits the one with the least memory (fits false), to show what each shape gives.
    std::vector<ScaleEstimate> bestPerShape;
};
// Every t (dividing the node's GPUs, the heads and the GPUs), p (dividing the
// layers), d = gpus / (t p), micro-batch b in 1, 2, 4, 8, 16 (with d b dividing B), schedule (1F1B,
// interleaved v = 2..8 splitting the layers evenly, kFkB with k = 2 and 4, ZB-H1) and
// recomputation, priced by the closed form; those that fit (memory prunes first), the fastest 32
// (at least `keep`) and each shape's best then simulated (scale_sim.h), kept where they fit by the
// simulator's memory model and ranked by simulated samples per second. `keep` limits the list.
// What every searched configuration uses (sequence parallelism only where t > 1).
struct ScaleFeatures
{
    bool sequenceParallel = false;
    bool zero1 = false;
    bool overlapGradientReduce = false;
};
[[nodiscard]] ScaleSearch searchScale(const GptShape& model, int gpus, std::int64_t globalBatch, const NodeSpec& node,
    std::size_t keep = 20, ScaleFeatures features = {});

} // namespace ps
