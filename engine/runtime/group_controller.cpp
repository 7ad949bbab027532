#include "runtime/group_controller.h"

#include "util/error.h"

#include <algorithm>
#include <limits>

namespace ps::engine {

GroupSizeController::GroupSizeController(
    Graph graph, std::optional<Profile> measured, RunShape shape, std::vector<int> candidates, int interval)
    : m_graph(std::move(graph))
    , m_measured(std::move(measured))
    , m_shape(std::move(shape))
    , m_candidates(std::move(candidates))
    , m_interval(interval)
    , m_k(m_shape.schedule.groupSize)
{
    if (m_candidates.empty())
        throw Error("the group-size controller needs at least one candidate k");
    if (m_interval < 1)
        throw Error("the group-size controller's interval must be at least one step");
    for (int k : m_candidates) {
        if (k < 1 || k > m_shape.schedule.microBatches)
            throw Error("group size k=" + std::to_string(k) + " is not in 1.."
                + std::to_string(m_shape.schedule.microBatches) + " (the micro-batches of a step)");
    }
    m_shape.schedule.kind = ScheduleKind::KFKB;
    m_shape.link.trace.reset();
}

GroupDecision GroupSizeController::choose(double bandwidth) const
{
    GroupDecision d;
    d.k = m_k;
    d.measuredBandwidth = bandwidth;
    auto shape = m_shape;
    if (bandwidth > 0)
        shape.link.bandwidth = bandwidth;
    double best = std::numeric_limits<double>::infinity();
    for (int k : m_candidates) {
        shape.schedule.groupSize = k;
        const double ns = predictRun(m_graph, m_measured ? &*m_measured : nullptr, shape).simulation.iterationNs;
        d.predictedIterationNs.emplace_back(k, ns);
        if (ns < best) {
            best = ns;
            d.k = k;
        }
    }
    return d;
}

std::optional<GroupDecision> GroupSizeController::observe(std::int64_t step, const std::vector<SimEvent>& events)
{
    const auto deviceOf = [&](std::uint32_t stage) {
        return m_shape.stageDevices.empty() ? stage : m_shape.stageDevices.at(stage).value;
    };
    for (const auto& e : events) {
        if (e.stream != Stream::Send || e.bytes <= 0 || e.endNs <= e.startNs)
            continue;
        // A SEND between two devices: its event spans its time on the link.
        const auto peer = e.action == ActionType::SendForward ? e.stage.value + 1 : e.stage.value - 1;
        if (deviceOf(e.stage.value) != deviceOf(peer)) {
            m_bytes += e.bytes;
            m_linkSeconds += std::max(0.0, (e.endNs - e.startNs) * 1e-9 - m_shape.link.latencySeconds);
        }
    }
    if (++m_seen < m_interval)
        return std::nullopt;
    const double bandwidth = m_linkSeconds > 0 ? m_bytes / m_linkSeconds : 0;
    m_seen = 0;
    m_bytes = 0;
    m_linkSeconds = 0;
    auto d = choose(bandwidth);
    d.step = step;
    m_k = d.k;
    return d;
}

std::vector<int> autoGroupSizes(int microBatches)
{
    std::vector<int> ks;
    for (int k = 1; k <= std::min(microBatches, 8); ++k)
        ks.push_back(k);
    return ks;
}

} // namespace ps::engine
