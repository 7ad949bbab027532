#include "runtime/tied_gradients.h"

#include <algorithm>

namespace ps::engine {

TiedGradients::TiedGradients(const std::vector<std::unique_ptr<StageExecutor>>& stages, AbortSignal& abort)
    : m_abort(abort)
{
    std::map<std::uint32_t, std::vector<std::size_t>> holders;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        for (auto id : stages[s]->parameterIds())
            holders[id.value].push_back(s);
    }
    for (auto& [id, list] : holders) {
        if (list.size() <= 1)
            continue;
        m_holders[id] = list;
        for (auto s : list)
            m_deposits[id][s]; // every slot made here: deposits never change the maps' shape
    }
}

void TiedGradients::reset()
{
    const std::lock_guard lock(m_mutex);
    for (auto& [id, byStage] : m_deposits) {
        for (auto& [s, d] : byStage)
            d.filled = false;
    }
}

void TiedGradients::deposit(const StageExecutor& stage, const Backend& backend)
{
    for (auto id : stage.parameterIds()) {
        if (!m_holders.contains(id.value))
            continue;
        auto& d = m_deposits.at(id.value).at(stage.id().index());
        const auto& g = stage.gradient(id);
        d.present = g.defined();
        if (d.present) {
            d.bytes.resize(static_cast<std::size_t>(g.bytes()));
            backend.copyToHost(g, d.bytes);
        }
    }
    {
        const std::lock_guard lock(m_mutex);
        for (auto id : stage.parameterIds()) {
            if (m_holders.contains(id.value))
                m_deposits.at(id.value).at(stage.id().index()).filled = true;
        }
    }
    m_ready.notify_all();
}

void TiedGradients::apply(StageExecutor& stage, const Backend& backend, const Graph& graph)
{
    for (auto id : stage.parameterIds()) {
        if (!m_holders.contains(id.value))
            continue;
        const auto& deposits = m_deposits.at(id.value); // std::map: stage order
        std::unique_lock lock(m_mutex);
        if (!m_abort.wait(m_ready, lock, [&] {
                return std::all_of(deposits.begin(), deposits.end(), [](const auto& d) { return d.second.filled; });
            }))
            throw Aborted("aborted while summing the gradients of tied parameter '" + graph.tensor(id).name + "'");
        lock.unlock(); // complete: not written again this step
        stage.allocator().setOwner("gradients");
        auto sum = sumInStageOrder(stage, backend, id, graph.tensor(id).shape, deposits);
        stage.allocator().setOwner("");
        if (sum.defined())
            stage.setGradient(id, sum);
    }
}

NdArray TiedGradients::sumInStageOrder(StageExecutor& stage, const Backend& backend, TensorId id, const Shape& shape,
    const std::map<std::size_t, Deposit>& deposits)
{
    std::vector<std::pair<std::size_t, const Deposit*>> terms;
    for (const auto& [s, d] : deposits) {
        if (d.present)
            terms.emplace_back(s, &d);
    }
    const auto own = stage.id().index();
    auto& scratch = stage.allocator();
    if (terms.empty()) // no holder's backward reached it: a zero gradient, as for an unused parameter
        return backend.zeros(scratch, shape);
    const auto ownAt =
        std::find_if(terms.begin(), terms.end(), [&](const auto& t) { return t.first == own; }) - terms.begin();
    if (ownAt <= 1 && ownAt < std::ssize(terms)) {
        NdArray sum = stage.gradient(id); // shares the gradient's storage
        for (std::size_t i = 0; i < terms.size(); ++i) {
            if (static_cast<std::ptrdiff_t>(i) != ownAt)
                backend.accumulateFromHost(sum, terms[i].second->bytes, scratch);
        }
        return {};
    }
    auto sum = backend.fromHost(scratch, shape, DType::F32, terms[0].second->bytes);
    for (std::size_t i = 1; i < terms.size(); ++i) {
        if (static_cast<std::ptrdiff_t>(i) == ownAt)
            backend.accumulate(sum, stage.gradient(id));
        else
            backend.accumulateFromHost(sum, terms[i].second->bytes, scratch);
    }
    return sum;
}

} // namespace ps::engine
