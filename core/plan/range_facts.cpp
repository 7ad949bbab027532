#include "plan/range_facts.h"

#include "util/error.h"

#include <algorithm>
#include <string>

namespace ps {

namespace {

    constexpr std::size_t kKeptGraphs = 4;
    constexpr std::size_t kMemoLimit = std::size_t { 1 } << 20; // ranges per graph, then it starts over

} // namespace

std::shared_ptr<const RangeFacts> RangeFacts::of(const Graph& graph)
{
    static std::mutex mutex;
    static std::vector<std::shared_ptr<const RangeFacts>> kept; // most recently used last
    {
        const std::lock_guard lock(mutex);
        const auto it =
            std::find_if(kept.begin(), kept.end(), [&](const auto& f) { return f->revision() == graph.revision(); });
        if (it != kept.end()) {
            auto found = *it;
            kept.erase(it);
            kept.push_back(found);
            return found;
        }
    }
    auto made = std::make_shared<const RangeFacts>(graph); // outside the lock: other graphs go on
    const std::lock_guard lock(mutex);
    const auto raced =
        std::find_if(kept.begin(), kept.end(), [&](const auto& f) { return f->revision() == graph.revision(); });
    if (raced != kept.end())
        return *raced; // another thread made them meanwhile: one copy is shared
    kept.push_back(made);
    if (kept.size() > kKeptGraphs)
        kept.erase(kept.begin());
    return made;
}

RangeFacts::RangeFacts(const Graph& graph)
    : m_revision(graph.revision())
    , m_costs(computeOpCosts(graph))
    , m_flow(gradientFlow(graph))
{
}

template <typename Compute>
std::shared_ptr<const WorkingProfile> RangeFacts::memo(
    Kind kind, std::size_t begin, std::size_t end, Compute compute) const
{
    const auto key = (static_cast<std::uint64_t>(begin) << 35) ^ (static_cast<std::uint64_t>(end) << 3)
        ^ static_cast<std::uint64_t>(kind);
    {
        const std::lock_guard lock(m_mutex);
        if (const auto it = m_memo.find(key); it != m_memo.end())
            return it->second;
    }
    auto value = std::make_shared<const WorkingProfile>(compute());
    const std::lock_guard lock(m_mutex);
    if (m_memo.size() >= kMemoLimit)
        m_memo.clear();
    m_memo.emplace(key, value);
    return value;
}

void RangeFacts::checkRevision(const Graph& graph) const
{
    if (graph.revision() != m_revision)
        throw Error("internal: range facts of graph revision " + std::to_string(m_revision) + " asked about revision "
            + std::to_string(graph.revision()));
}

std::shared_ptr<const WorkingProfile> RangeFacts::backwardWorking(
    const Graph& graph, std::size_t begin, std::size_t end, BackwardPass pass, bool growingGradients) const
{
    checkRevision(graph);
    const bool growing = growingGradients && pass == BackwardPass::Full;
    const auto kind = pass == BackwardPass::InputOnly ? Kind::InputOnly : (growing ? Kind::FullGrowing : Kind::Full);
    return memo(kind, begin, end, [&] { return backwardWorkingProfile(graph, m_flow, begin, end, pass, growing); });
}

std::int64_t RangeFacts::weightGradHeld(const Graph& graph, std::size_t begin, std::size_t end) const
{
    checkRevision(graph);
    return memo(Kind::WeightHeld, begin, end, [&] {
        return WorkingProfile { weightGradHeldBytes(graph, m_flow, begin, end), {}, {} };
    })->bytes;
}

std::shared_ptr<const WorkingProfile> RangeFacts::weightPass(
    const Graph& graph, std::size_t begin, std::size_t end) const
{
    checkRevision(graph);
    return memo(Kind::WeightPass, begin, end, [&] { return weightPassProfile(graph, m_flow, begin, end); });
}

} // namespace ps
