// The recompute a stage's memory plan implies, as the runtime runs it
// (engine/runtime/stage_recompute.cpp): the producers of the dropped storages run again and, for
// every input no node of the stage saves, that input's producer in turn, each node once; the
// stage's inputs from other stages that this reaches stay from forward to backward.
#include "plan/stage_model.h"
#include "sim/memory_model.h"

#include <algorithm>
#include <utility>

namespace ps {

void StageModel::accountRecompute(std::size_t begin, std::size_t end, int stage, StageEvaluation& e) const
{
    auto& plan = e.memoryPlan;
    if (plan.recomputedTensors.empty())
        return;
    const auto tensors = m_graph.tensorCount();
    for (auto* marks : { &m_recomputeSaved, &m_recomputeSavedRoot, &m_recomputeKept })
        marks->resize(tensors, 0);
    if (++m_recomputeGeneration == 0) {
        for (auto* marks : { &m_recomputeSaved, &m_recomputeSavedRoot, &m_recomputeKept })
            std::fill(marks->begin(), marks->end(), 0);
        m_recomputeGeneration = 1;
    }
    const auto gen = m_recomputeGeneration;
    for (std::size_t n = begin; n < end; ++n) {
        for (auto t : m_costs[n].savedTensors) { // tensors, as the runtime keeps them
            m_recomputeSaved[t.index()] = gen;
            m_recomputeSavedRoot[m_root[t.index()].index()] = gen; // their storages, in activationBytes
        }
    }
    const auto producedHere = [&](TensorId t) {
        const auto p = m_graph.tensor(t).producer;
        return p.valid() && p.index() >= begin && p.index() < end;
    };
    std::vector<char> run(end - begin, 0);
    std::vector<std::size_t> work;
    for (auto root : plan.recomputedTensors) {
        if (producedHere(root))
            work.push_back(m_graph.tensor(root).producer.index());
    }
    double ns = 0;
    double keptBytes = 0;
    while (!work.empty()) {
        const auto n = work.back();
        work.pop_back();
        if (std::exchange(run[n - begin], 1) != 0)
            continue;
        ns += m_nodeFwd[n];
        for (auto in : m_graph.nodes()[n].inputs) {
            // The loader's data a recompute reads is kept per micro-batch like a stage input
            // (parameters and constants are there anyway).
            const auto kind = m_graph.tensor(in).kind;
            if (kind != TensorKind::Activation && kind != TensorKind::Input)
                continue;
            const auto root = m_root[in.index()];
            if (!producedHere(in)) {
                if (m_recomputeSavedRoot[root.index()] != gen
                    && std::exchange(m_recomputeKept[root.index()], gen) != gen)
                    keptBytes += tensorBytes(root);
            } else if (m_recomputeSaved[in.index()] != gen) {
                work.push_back(m_graph.tensor(in).producer.index());
            }
        }
    }
    plan.keptInputBytes = keptBytes;
    const double extra = std::max(0.0, ns - plan.recomputeNs); // nodes beyond the producers
    plan.recomputeNs += extra;
    e.overheadNs += extra;
    e.timeNs += extra;
    e.peakBytes = peakUnder(e, stage, plan);
    e.fits = e.peakBytes <= m_capacity;
    e.overBytes = e.fits ? 0 : e.peakBytes - m_capacity;
}

std::vector<std::size_t> recomputedNodes(const Graph& graph, const std::vector<OpCost>& costs, std::size_t begin,
    std::size_t end, const std::vector<TensorId>& roots)
{
    std::vector<char> saved(graph.tensorCount(), 0);
    for (std::size_t n = begin; n < end; ++n) {
        for (auto t : costs[n].savedTensors)
            saved[t.index()] = 1;
    }
    const auto producedHere = [&](TensorId t) {
        const auto p = graph.tensor(t).producer;
        return graph.tensor(t).kind == TensorKind::Activation && p.valid() && p.index() >= begin && p.index() < end;
    };
    std::vector<char> run(end - begin, 0);
    std::vector<std::size_t> work;
    for (auto root : roots) {
        if (root.index() < graph.tensorCount() && producedHere(root))
            work.push_back(graph.tensor(root).producer.index());
    }
    while (!work.empty()) {
        const auto n = work.back();
        work.pop_back();
        if (std::exchange(run[n - begin], 1) != 0)
            continue;
        for (auto in : graph.nodes()[n].inputs) {
            if (producedHere(in) && saved[in.index()] == 0)
                work.push_back(graph.tensor(in).producer.index());
        }
    }
    std::vector<std::size_t> out;
    for (std::size_t n = begin; n < end; ++n) {
        if (run[n - begin] != 0)
            out.push_back(n);
    }
    return out;
}

} // namespace ps
