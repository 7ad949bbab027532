// Training a language-model graph on one device: sample windows from the token data, forward and
// backward each micro-batch (gradient accumulation), one optimizer step, metrics per step.
//
// The graph must end in a scalar loss (the zoo's models do; an imported ONNX model gets one with
// `pipestudio import --loss`). A language model trains on windows of the token data; any other
// graph on generated inputs (BatchSource, data.h).
// Depends on: executor.h, optimizer.h, data.h; no Qt, no CUDA.
#pragma once

#include "data.h"
#include "executor.h"
#include "optimizer.h"

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace ps::engine {

struct TrainOptions
{
    std::int64_t accumulation = 1; // micro-batches per optimizer step
    OptimizerConfig optimizer; // lr is the peak of the schedule
    // Linear warm-up over warmupSteps, then cosine decay to lr * minLrRatio at decaySteps (0: constant
    // after warm-up), as nanoGPT and most GPT recipes.
    std::int64_t warmupSteps = 0;
    std::int64_t decaySteps = 0;
    double minLrRatio = 0.1;
    std::uint64_t seed = 0; // initialisation, dropout and batch sampling
    int threads = 0; // BLAS threads; 0: OpenBLAS's default
    std::int64_t capacityBytes = 0; // device memory budget; 0: unlimited
};

struct StepResult
{
    std::int64_t step = 0;
    double loss = 0; // mean over the step's micro-batches
    double learningRate = 0;
    double seconds = 0;
    double tokensPerSecond = 0;
    std::int64_t peakBytes = 0;
};

class Trainer
{
public:
    // Throws ps::Error when the graph is not a language model the data can feed (missing inputs,
    // vocabulary larger than the embedding table, no scalar loss).
    Trainer(Graph graph, TokenData data, TrainOptions options);

    StepResult step();
    // The scheduled learning rate of step `step` (1-based).
    [[nodiscard]] double learningRate(std::int64_t step) const;
    [[nodiscard]] GraphExecutor& executor()
    {
        return *m_executor;
    }
    [[nodiscard]] std::int64_t tokensPerStep() const
    {
        return m_source.itemsPerBatch() * m_options.accumulation;
    }
    // Parameter values as fp32 bytes by tensor id (a checkpoint).
    [[nodiscard]] std::vector<std::pair<TensorId, std::vector<std::byte>>> parameterBytes();

private:
    std::unique_ptr<GraphExecutor> m_executor;
    std::unique_ptr<Optimizer> m_optimizer;
    TrainOptions m_options;
    BatchSource m_source;
    std::int64_t m_steps = 0;
};

} // namespace ps::engine
