#include "trainer.h"

#include "cpu/kernels.h"

#include <chrono>
#include <cmath>
#include <span>

namespace ps::engine {

Trainer::Trainer(Graph graph, TokenData data, TrainOptions options)
    : m_data(std::move(data))
    , m_options(std::move(options))
    , m_sampler(m_options.seed + 1)
{
    const auto shape = languageModelShape(graph, m_data);
    if (m_options.accumulation < 1)
        throw Error("gradient accumulation needs at least one micro-batch per step");
    m_batch = shape.batch;
    m_seq = shape.sequence;
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
        std::vector<std::int64_t> ids(static_cast<std::size_t>(m_batch * m_seq)); // (B, T) on the host
        std::vector<std::int64_t> labels(ids.size());
        m_data.sample(m_sampler, m_batch, m_seq, ids.data(), labels.data());
        const auto& backend = m_executor->backend();
        auto& allocator = m_executor->allocator();
        allocator.setOwner("input batch");
        auto idsOnDevice = backend.fromHost(allocator, { m_batch, m_seq }, DType::I64, std::as_bytes(std::span(ids)));
        auto labelsOnDevice =
            backend.fromHost(allocator, { m_batch, m_seq }, DType::I64, std::as_bytes(std::span(labels)));
        m_executor->setInput("input_ids", std::move(idsOnDevice));
        m_executor->setInput("labels", std::move(labelsOnDevice));
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
