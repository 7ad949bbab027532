#include "optimizer.h"

namespace ps::engine {

Optimizer::Optimizer(GraphExecutor& executor, OptimizerConfig config)
    : m_executor(executor)
    , m_config(std::move(config))
    , m_params(executor.parameterIds())
{
    if (m_config.kind != "adamw" && m_config.kind != "sgd")
        throw Error("unknown optimizer '" + m_config.kind + "' (adamw or sgd)");
    if (!(m_config.lr > 0))
        throw Error("the learning rate must be positive, got " + std::to_string(m_config.lr));
    const auto& backend = m_executor.backend();
    m_executor.allocator().setOwner("optimizer state");
    for (auto id : m_params) {
        const auto& shape = m_executor.parameter(id).shape();
        m_first.push_back(backend.zeros(m_executor.allocator(), shape));
        if (m_config.kind == "adamw")
            m_second.push_back(backend.zeros(m_executor.allocator(), shape));
    }
    m_executor.allocator().setOwner("");
}

void Optimizer::step(float gradScale)
{
    ++m_steps;
    const auto& backend = m_executor.backend();
    const AdamWUpdate adamw { static_cast<float>(m_config.lr), static_cast<float>(m_config.beta1),
        static_cast<float>(m_config.beta2), static_cast<float>(m_config.eps), static_cast<float>(m_config.weightDecay),
        gradScale, m_steps };
    const SgdUpdate sgd { static_cast<float>(m_config.lr), static_cast<float>(m_config.momentum),
        static_cast<float>(m_config.weightDecay), gradScale, m_steps == 1 };
    std::vector<Backend::AdamWSlot> slots;
    for (std::size_t k = 0; k < m_params.size(); ++k) {
        auto& p = m_executor.parameter(m_params[k]);
        const auto& g = m_executor.gradient(m_params[k]);
        if (m_config.kind == "adamw")
            slots.push_back({ &p, &g, &m_first[k], &m_second[k] });
        else
            backend.sgd(p, g, m_first[k], sgd);
    }
    if (!slots.empty())
        backend.adamwAll(slots, adamw); // one launch per many parameters on a GPU
}

} // namespace ps::engine
