#include "trainer.h"

#include "cpu/kernels.h"

#include <chrono>
#include <cmath>
#include <span>

namespace ps::engine {

Trainer::Trainer(Graph graph, TokenData data, TrainOptions options)
    : m_options(std::move(options))
    , m_source(graph, std::move(data), m_options.seed + 1)
{
    if (m_options.accumulation < 1)
        throw Error("gradient accumulation needs at least one micro-batch per step");
    setComputeThreads(m_options.threads);
    m_executor = std::make_unique<GraphExecutor>(
        std::move(graph), ExecutorOptions { m_options.seed, m_options.capacityBytes, true });
    m_optimizer = std::make_unique<Optimizer>(*m_executor, m_options.optimizer);
}

double Trainer::learningRate(std::int64_t step) const
{
    return scheduledLearningRate(
        m_options.optimizer.lr, step, m_options.warmupSteps, m_options.decaySteps, m_options.minLrRatio);
}

StepResult Trainer::step()
{
    const auto start = std::chrono::steady_clock::now();
    m_executor->allocator().resetPeak();
    m_executor->zeroGrad();
    double loss = 0;
    for (std::int64_t k = 0; k < m_options.accumulation; ++k) {
        const auto batch = m_source.next();
        const auto& backend = m_executor->backend();
        auto& allocator = m_executor->allocator();
        allocator.setOwner("input batch");
        const auto shapeOf = [this](const std::string& name) -> const Shape& {
            for (const auto& t : m_executor->graph().tensors()) {
                if (t.kind == TensorKind::Input && t.name == name)
                    return t.shape;
            }
            throw Error("the batch has an input '" + name + "' the graph does not read");
        };
        for (const auto& [name, values] : batch.inputs)
            m_executor->setInput(
                name, backend.fromHost(allocator, shapeOf(name), DType::I64, std::as_bytes(std::span(values))));
        for (const auto& [name, values] : batch.floatInputs)
            m_executor->setInput(
                name, backend.fromHost(allocator, shapeOf(name), DType::F32, std::as_bytes(std::span(values))));
        loss += m_executor->forward();
        m_executor->backward();
        m_executor->releaseActivations();
    }
    const double lr = learningRate(m_steps + 1);
    m_optimizer->setLearningRate(lr);
    m_optimizer->step(1.0F / static_cast<float>(m_options.accumulation));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++m_steps;
    return { m_steps, loss / static_cast<double>(m_options.accumulation), lr, seconds,
        static_cast<double>(tokensPerStep()) / seconds, m_executor->allocator().peak() };
}

std::vector<std::pair<TensorId, std::vector<std::byte>>> Trainer::parameterBytes()
{
    std::vector<std::pair<TensorId, std::vector<std::byte>>> out;
    for (auto id : m_executor->parameterIds()) {
        out.emplace_back(id, m_executor->backend().toHost(m_executor->parameter(id)));
    }
    return out;
}

} // namespace ps::engine
