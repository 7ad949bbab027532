// The schedule runner's parameters and optimizer state by tensor id, for checkpoints: a tied
// parameter lives on several stages, each keeping its copy (set on all, read from the first).
// Part of PipelineRunner (runtime/pipeline_runner.h).
#include "runtime/pipeline_runner.h"
#include "util/error.h"

#include <algorithm>

namespace ps::engine {

void PipelineRunner::setParameter(TensorId id, std::span<const std::byte> bytes)
{
    for (auto& s : m_stages) {
        const auto& ids = s->parameterIds();
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            s->setParameter(id, bytes);
    }
}

std::vector<TensorId> PipelineRunner::parameterIds() const
{
    std::vector<TensorId> ids;
    for (const auto& s : m_stages) {
        for (auto id : s->parameterIds()) {
            if (std::find(ids.begin(), ids.end(), id) == ids.end())
                ids.push_back(id);
        }
    }
    std::sort(ids.begin(), ids.end());
    return ids;
}

std::vector<std::byte> PipelineRunner::parameterBytes(TensorId id) const
{
    for (const auto& s : m_stages) {
        const auto& ids = s->parameterIds();
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            return s->parameterBytes(id);
    }
    throw Error("no stage holds parameter '" + m_graph.tensor(id).name + "'");
}

std::vector<std::vector<std::byte>> PipelineRunner::optimizerState(TensorId id) const
{
    for (const auto& s : m_stages) {
        const auto& ids = s->parameterIds();
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            return s->optimizerState(id);
    }
    throw Error("no stage holds parameter '" + m_graph.tensor(id).name + "'");
}

void PipelineRunner::setOptimizerState(TensorId id, const std::vector<std::vector<std::byte>>& state, int steps)
{
    for (auto& s : m_stages) {
        const auto& ids = s->parameterIds();
        if (std::find(ids.begin(), ids.end(), id) != ids.end())
            s->setOptimizerState(id, state, steps);
    }
}

} // namespace ps::engine
