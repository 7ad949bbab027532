// What a graph's structure implies for its node ranges, shared by every StageModel planned on that
// graph whatever the micro-batch, schedule, device or profile: op costs, the gradient flow, and
// per range [begin, end) the backward's working set (whole and zero-bubble's B and W) and the output
// gradients a split B holds for W, in bytes of one micro-batch at the graph's own batch. The
// planners evaluate the same ranges at many micro-batch sizes (maxbatch's bisection, search's
// sizes, several algorithms): each is computed once per graph revision (Graph::revision), where
// each StageModel computed it again. Thread-safe; the last few graphs' facts are kept.
// Depends on: graph (Graph, op_cost).
#pragma once

#include "graph/graph.h"
#include "graph/op_cost.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ps {

class RangeFacts
{
public:
    // The facts of `graph` as it is now (made on first use of its revision).
    [[nodiscard]] static std::shared_ptr<const RangeFacts> of(const Graph& graph);

    explicit RangeFacts(const Graph& graph);

    [[nodiscard]] std::uint64_t revision() const
    {
        return m_revision;
    }
    [[nodiscard]] const std::vector<OpCost>& costs() const
    {
        return m_costs;
    }
    [[nodiscard]] const GradientFlow& flow() const
    {
        return m_flow;
    }
    // backwardWorkingProfile and weightGradHeldBytes of `graph` (the one these facts are of), memoised.
    // The profiles are shared, not copied: planners ask for them once per range and micro-batch size.
    [[nodiscard]] std::shared_ptr<const WorkingProfile> backwardWorking(
        const Graph& graph, std::size_t begin, std::size_t end, BackwardPass pass, bool growingGradients = false) const;
    [[nodiscard]] std::int64_t weightGradHeld(const Graph& graph, std::size_t begin, std::size_t end) const;
    // weightPassProfile, memoised likewise.
    [[nodiscard]] std::shared_ptr<const WorkingProfile> weightPass(
        const Graph& graph, std::size_t begin, std::size_t end) const;

private:
    enum class Kind : std::uint64_t { Full, InputOnly, WeightHeld, FullGrowing, WeightPass };
    template <typename Compute>
    [[nodiscard]] std::shared_ptr<const WorkingProfile> memo(
        Kind kind, std::size_t begin, std::size_t end, Compute compute) const;
    void checkRevision(const Graph& graph) const;

    std::uint64_t m_revision;
    std::vector<OpCost> m_costs;
    GradientFlow m_flow;
    mutable std::mutex m_mutex;
    mutable std::unordered_map<std::uint64_t, std::shared_ptr<const WorkingProfile>> m_memo;
};

} // namespace ps
