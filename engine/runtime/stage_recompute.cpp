// StageExecutor's recompute: before a micro-batch's backward, the storages its forward dropped are
// computed again. The nodes that run are the dropped storages' producers and, for every input that
// no backward keeps, that input's producer in turn (stage_state.cpp's m_recomputeFinds), in node
// order, each once; what they produce besides the dropped storages lives only until its last
// reader among them, as in the forward.
#include "runtime/stage_executor.h"
#include "runtime/stage_micro_batch.h"
#include "util/error.h"

#include <algorithm>
#include <random>
#include <utility>

namespace ps::engine {

void StageExecutor::recompute(MicroBatchId mb)
{
    const MemoryUseScope use(MemoryUse::Activations);
    auto& s = state(mb, "recompute");
    applyPending(s, mb);
    if (!m_memory.swappedTensors.empty()) // a recompute may read a swapped storage: have it back
        settleSwaps(s);
    if (s.dropped.empty())
        return;
    const auto run = recomputeNodes(s);
    // The last node of the recompute that reads each value it produces (none: not kept past it).
    std::unordered_map<std::uint32_t, std::size_t> lastReader;
    for (std::size_t local = 0; local < run.size(); ++local) {
        if (run[local] == 0)
            continue;
        for (auto in : m_graph.nodes()[m_begin + local].inputs) {
            if (m_recomputeFinds[in.index()] == 0)
                lastReader[in.value] = local;
        }
    }
    std::unordered_map<std::uint32_t, NdArray> recomputed; // by tensor id, until their last reader
    m_device.setOwner("recompute");
    for (std::size_t local = 0; local < run.size(); ++local) {
        if (run[local] == 0)
            continue;
        const auto& node = m_graph.nodes()[m_begin + local];
        NodeValues fresh;
        {
            const NodeAccess access(*this, local); // its parameters on the device (chunks)
            for (std::size_t j = 0; j < node.inputs.size(); ++j)
                fresh.in.push_back(recomputeInput(s, local, j, recomputed));
            KernelContext ctx { m_device, rngFor(mb, node), true, m_gemm }; // the forward's dropout mask again
            m_backend.forward(node, fresh, ctx);
        }
        for (std::size_t k = 0; k < node.outputs.size(); ++k) {
            const auto t = node.outputs[k];
            if (std::find(s.dropped.begin(), s.dropped.end(), t) != s.dropped.end()) {
                auto array = s.values[static_cast<std::size_t>(slotOf(t))];
                if (!array.resident())
                    array.refill(fresh.out[k]);
            } else if (const auto it = lastReader.find(t.value); it != lastReader.end() && it->second > local) {
                recomputed[t.value] = fresh.out[k];
            }
        }
        for (auto in : node.inputs) {
            if (const auto it = lastReader.find(in.value); it != lastReader.end() && it->second == local)
                recomputed.erase(in.value);
        }
    }
    m_device.setOwner("");
    // The refilled storages live on in the nodes that read them in backward, which release each as
    // the model counts it (after its first reader's backward); the value table lets go of them.
    for (auto root : s.dropped)
        s.values[static_cast<std::size_t>(slotOf(root))] = NdArray();
    s.dropped.clear();
}

void StageExecutor::keepRecomputeInputs(std::vector<char>& keep)
{
    // A recompute re-runs the producers of the dropped storages from what backward keeps anyway;
    // an input nothing keeps is recomputed from its own producer in turn, back to the stage's
    // inputs from other stages, which stay (so the stage holds what the memory model counts).
    const auto producedHere = [&](TensorId t) {
        const auto p = m_graph.tensor(t).producer;
        return m_graph.tensor(t).kind == TensorKind::Activation && p.valid() && p.index() >= m_begin
            && p.index() < m_end;
    };
    std::vector<char> visited(m_end - m_begin, 0);
    std::vector<std::size_t> work;
    for (auto root : m_memory.recomputedTensors) {
        if (root.index() < keep.size() && producedHere(root))
            work.push_back(m_graph.tensor(root).producer.index());
    }
    while (!work.empty()) {
        const auto n = work.back();
        work.pop_back();
        if (std::exchange(visited[n - m_begin], 1) != 0)
            continue;
        for (auto in : m_graph.nodes()[n].inputs) {
            if (!producedHere(in))
                keep[in.index()] = 1;
            else if (keep[in.index()] == 0)
                work.push_back(m_graph.tensor(in).producer.index());
        }
    }
    m_recomputeFinds.assign(m_graph.tensorCount(), 0);
    for (const auto& t : m_graph.tensors())
        m_recomputeFinds[t.id.index()] = keep[t.id.index()] != 0 || !producedHere(t.id) ? 1 : 0;
}

std::vector<char> StageExecutor::recomputeNodes(const MicroBatch& s) const
{
    std::vector<char> run(m_end - m_begin, 0);
    std::vector<std::size_t> work;
    for (auto root : s.dropped)
        work.push_back(m_graph.tensor(root).producer.index() - m_begin);
    while (!work.empty()) {
        const auto local = work.back();
        work.pop_back();
        if (std::exchange(run[local], 1) != 0)
            continue;
        for (auto in : m_graph.nodes()[m_begin + local].inputs) {
            if (m_recomputeFinds[in.index()] == 0)
                work.push_back(m_graph.tensor(in).producer.index() - m_begin);
        }
    }
    return run;
}

NdArray StageExecutor::recomputeInput(
    MicroBatch& s, std::size_t local, std::size_t j, const std::unordered_map<std::uint32_t, NdArray>& recomputed) const
{
    const auto& node = m_graph.nodes()[m_begin + local];
    const auto t = node.inputs[j];
    if (const auto it = recomputed.find(t.value); it != recomputed.end())
        return it->second;
    if (const auto& kept = s.nodes[local].in[j]; kept.resident())
        return kept;
    if (const auto slot = slotOf(t); slot >= 0 && s.values[static_cast<std::size_t>(slot)].resident())
        return s.values[static_cast<std::size_t>(slot)]; // a dropped storage refilled earlier
    throw Error("stage " + std::to_string(m_id.value) + ": recompute of '" + node.name + "' reads '"
        + m_graph.tensor(t).name + "', which is neither kept nor recomputed");
}

} // namespace ps::engine
