// Optimizers over a GraphExecutor's parameters: SGD with momentum and AdamW, with PyTorch's update
// rules (torch.optim.SGD, torch.optim.AdamW) so runs can be checked against it step by step.
// Depends on: executor.h; no Qt, no CUDA.
#pragma once

#include "executor.h"

#include <string>
#include <vector>

namespace ps::engine {

struct OptimizerConfig
{
    std::string kind = "adamw"; // "adamw" or "sgd"
    double lr = 1e-3;
    double beta1 = 0.9; // AdamW
    double beta2 = 0.999;
    double eps = 1e-8;
    double weightDecay = 0.01; // decoupled for AdamW, added to the gradient for SGD
    double momentum = 0.9; // SGD
};

class Optimizer
{
public:
    // Throws ps::Error for an unknown kind or a non-positive learning rate.
    Optimizer(GraphExecutor& executor, OptimizerConfig config);

    // One update from the accumulated gradients, each multiplied by gradScale first (1 / micro-batches
    // for an average over accumulated micro-batches). State lives on the executor's allocator.
    void step(float gradScale = 1.0F);
    [[nodiscard]] int steps() const
    {
        return m_steps;
    }
    // The learning rate of the next steps (a schedule sets it before each step).
    void setLearningRate(double lr)
    {
        m_config.lr = lr;
    }
    [[nodiscard]] const OptimizerConfig& config() const
    {
        return m_config;
    }

private:
    GraphExecutor& m_executor;
    OptimizerConfig m_config;
    std::vector<TensorId> m_params;
    std::vector<NdArray> m_first; // AdamW m, SGD momentum buffer
    std::vector<NdArray> m_second; // AdamW v
    int m_steps = 0;
};

} // namespace ps::engine
