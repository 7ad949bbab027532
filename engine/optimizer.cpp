#include "optimizer.h"

#include <cmath>

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
    m_executor.allocator().setOwner("optimizer state");
    for (auto id : m_params) {
        const auto& shape = m_executor.parameter(id).shape();
        m_first.push_back(NdArray::zeros(m_executor.allocator(), shape));
        if (m_config.kind == "adamw")
            m_second.push_back(NdArray::zeros(m_executor.allocator(), shape));
    }
    m_executor.allocator().setOwner("");
}

void Optimizer::step(float gradScale)
{
    ++m_steps;
    const auto lr = static_cast<float>(m_config.lr);
    const auto wd = static_cast<float>(m_config.weightDecay);
    const auto b1 = static_cast<float>(m_config.beta1);
    const auto b2 = static_cast<float>(m_config.beta2);
    const auto eps = static_cast<float>(m_config.eps);
    const auto correction1 = 1.0F - std::pow(b1, static_cast<float>(m_steps));
    const auto correction2Sqrt = std::sqrt(1.0F - std::pow(b2, static_cast<float>(m_steps)));
    const auto momentum = static_cast<float>(m_config.momentum);
    for (std::size_t k = 0; k < m_params.size(); ++k) {
        auto& p = m_executor.parameter(m_params[k]);
        const auto& g = m_executor.gradient(m_params[k]);
        float* w = p.f32();
        const float* gr = g.f32();
        float* m = m_first[k].f32();
        const auto n = p.numel();
        if (m_config.kind == "adamw") {
            float* v = m_second[k].f32();
            for (std::int64_t i = 0; i < n; ++i) { // torch.optim.AdamW (decoupled decay, then Adam)
                const float gi = gr[i] * gradScale;
                w[i] *= 1.0F - lr * wd;
                m[i] = b1 * m[i] + (1.0F - b1) * gi;
                v[i] = b2 * v[i] + (1.0F - b2) * gi * gi;
                const float denom = std::sqrt(v[i]) / correction2Sqrt + eps;
                w[i] -= lr / correction1 * m[i] / denom;
            }
        } else {
            for (std::int64_t i = 0; i < n; ++i) { // torch.optim.SGD (dampening 0, buffer = g on step 1)
                const float gi = gr[i] * gradScale + wd * w[i];
                m[i] = m_steps == 1 ? gi : momentum * m[i] + gi;
                w[i] -= lr * m[i];
            }
        }
    }
}

} // namespace ps::engine
