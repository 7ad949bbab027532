// StageExecutor with chunk-managed model data (PatrickStar): the chunks are built in the order the
// stage's ops first read the parameters (§6.1), each F/B/I/W action's param-reading nodes are the
// moments eviction looks ahead in (§8.1, §8.3), a node's chunks are accessed around its kernel
// (§6.2), and the optimizer step runs where each chunk's optimizer states live (§8.2).
#include "runtime/stage_executor.h"
#include "util/error.h"

#include <algorithm>

namespace ps::engine {

void StageExecutor::useChunks(std::int64_t chunkElements)
{
    if (chunkElements < 0)
        throw Error("the chunk size must not be negative");
    if (m_chunks)
        throw Error("stage " + std::to_string(m_id.value) + ": chunks are switched on before setOptimizer");
    m_chunkElements = chunkElements;
}

void StageExecutor::buildChunks(int optimizerSlots)
{
    if (m_chunks) {
        if (m_chunks->optimizerSlots() != optimizerSlots)
            throw Error("stage " + std::to_string(m_id.value) + ": the chunks hold another optimizer's states");
        return;
    }
    std::vector<ChunkParameterShape> order; // §6.1: the order the ops first read them
    m_chunkIndex.assign(m_paramIds.size(), -1);
    for (std::size_t n = m_begin; n < m_end; ++n) {
        for (auto in : m_graph.nodes()[n].inputs) {
            const auto k = m_paramIndex[in.index()];
            if (k >= 0 && m_chunkIndex[static_cast<std::size_t>(k)] < 0) {
                m_chunkIndex[static_cast<std::size_t>(k)] = static_cast<int>(order.size());
                order.push_back({ in, m_graph.tensor(in).shape });
            }
        }
    }
    m_chunks = std::make_unique<ChunkManager>(order, m_chunkElements, optimizerSlots, m_backend, m_device, m_hostPool);
    for (std::size_t k = 0; k < m_paramIds.size(); ++k)
        m_params[k] = m_chunks->parameter(static_cast<std::size_t>(m_chunkIndex[k]));
    m_nodeChunks.assign(m_end - m_begin, {});
    for (std::size_t n = m_begin; n < m_end; ++n) {
        auto& chunks = m_nodeChunks[n - m_begin];
        for (auto in : m_graph.nodes()[n].inputs) {
            const auto k = m_paramIndex[in.index()];
            const int c =
                k >= 0 ? m_chunks->chunkOf(static_cast<std::size_t>(m_chunkIndex[static_cast<std::size_t>(k)])) : -1;
            if (c >= 0 && std::find(chunks.begin(), chunks.end(), c) == chunks.end())
                chunks.push_back(c);
        }
    }
}

void StageExecutor::setChunkActions(const std::vector<ActionType>& actions)
{
    if (!m_chunks)
        return;
    const auto nodes = m_end - m_begin;
    std::vector<std::vector<int>> moments;
    m_momentOf.clear();
    for (auto type : actions) {
        if (type != ActionType::Forward && type != ActionType::Backward && type != ActionType::BackwardInput
            && type != ActionType::BackwardWeight)
            continue;
        auto& row = m_momentOf.emplace_back(nodes, ChunkManager::kNoUse);
        const bool reverse = type != ActionType::Forward; // backwards visit the nodes last to first
        for (std::size_t i = 0; i < nodes; ++i) {
            const auto local = reverse ? nodes - 1 - i : i;
            if (m_nodeChunks[local].empty())
                continue;
            row[local] = moments.size();
            moments.push_back(m_nodeChunks[local]);
        }
    }
    m_chunks->setMoments(std::move(moments));
}

void StageExecutor::accessNode(std::size_t local)
{
    if (!m_chunks || m_nodeChunks[local].empty())
        return;
    // The moment of this node in the current action; a recompute (or an action the list did not
    // foresee) counts as the last moment seen.
    const auto action = m_chunkAction - 1;
    if (m_chunkAction > 0 && action < m_momentOf.size() && m_momentOf[action][local] != ChunkManager::kNoUse)
        m_moment = m_momentOf[action][local];
    m_chunks->access(m_nodeChunks[local], m_moment);
}

void StageExecutor::releaseNode(std::size_t local)
{
    if (m_chunks && !m_nodeChunks[local].empty())
        m_chunks->release(m_nodeChunks[local]);
}

void StageExecutor::writeInto(const NdArray& target, std::span<const std::byte> bytes)
{
    const auto value = m_backend.fromHost(m_hostPool, target.shape(), DType::F32, bytes);
    NdArray slot = target; // a view: writes land in the chunk, wherever it lives
    m_backend.fill(slot, 0.0F);
    m_backend.accumulate(slot, value);
}

void StageExecutor::chunkOptimizerStep(double lr, float gradScale)
{
    ++m_optimizerSteps;
    if (m_optimizer.kind == "adamw") {
        m_chunks->adamw({ static_cast<float>(lr), static_cast<float>(m_optimizer.beta1),
            static_cast<float>(m_optimizer.beta2), static_cast<float>(m_optimizer.eps),
            static_cast<float>(m_optimizer.weightDecay), gradScale, m_optimizerSteps });
    } else {
        m_chunks->sgd({ static_cast<float>(lr), static_cast<float>(m_optimizer.momentum),
            static_cast<float>(m_optimizer.weightDecay), gradScale, m_optimizerSteps == 1 });
    }
    ++m_version;
    trackVersions();
}

} // namespace ps::engine
