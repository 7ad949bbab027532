#include "runtime/group_controller.h"

#include "util/error.h"
#include "zoo/model_config.h"

#include <algorithm>
#include <limits>
#include <map>

namespace ps::engine {

namespace {

    std::int64_t microBatchOf(const Graph& graph, const RunShape& shape)
    {
        return shape.microBatch > 0 ? shape.microBatch : graph.info().microBatch;
    }

    RunShape shapeOf(RunShape shape, const GroupCandidate& c)
    {
        shape.schedule.kind = ScheduleKind::KFKB;
        shape.schedule.groupSize = c.k;
        shape.schedule.microBatches = c.microBatches;
        shape.microBatch = c.microBatch;
        return shape;
    }

} // namespace

std::string GroupCandidate::label() const
{
    return "k" + std::to_string(k) + " b" + std::to_string(microBatch);
}

GroupSizeController::GroupSizeController(Graph graph, std::optional<Profile> measured, RunShape shape,
    std::vector<GroupCandidate> candidates, int interval, double smoothing)
    : m_graph(std::move(graph))
    , m_measured(std::move(measured))
    , m_shape(std::move(shape))
    , m_candidates(std::move(candidates))
    , m_interval(interval)
    , m_smoothing(smoothing)
    , m_current { m_shape.schedule.groupSize, microBatchOf(m_graph, m_shape), m_shape.schedule.microBatches }
{
    if (m_candidates.empty())
        throw Error("the group-size controller needs at least one candidate k");
    if (m_interval < 1)
        throw Error("the group-size controller's interval must be at least one step");
    if (!(m_smoothing > 0 && m_smoothing <= 1))
        throw Error("the group-size controller's smoothing must be in (0, 1]");
    const auto samples = m_current.microBatch * m_current.microBatches;
    for (const auto& c : m_candidates) {
        if (c.k < 1 || c.k > c.microBatches)
            throw Error("group size k=" + std::to_string(c.k) + " is not in 1.." + std::to_string(c.microBatches)
                + " (the micro-batches of a step)");
        if (c.microBatch * c.microBatches != samples)
            throw Error("candidate " + c.label() + " x " + std::to_string(c.microBatches)
                + " micro-batches is not the run's " + std::to_string(samples) + " samples per step");
    }
    m_shape.schedule.kind = ScheduleKind::KFKB;
    m_shape.link.trace.reset();
}

GroupDecision GroupSizeController::choose(double bandwidth) const
{
    GroupDecision d;
    d.chosen = m_current;
    d.measuredBandwidth = bandwidth;
    auto shape = m_shape;
    if (bandwidth > 0)
        shape.link.bandwidth = bandwidth;
    double best = std::numeric_limits<double>::infinity();
    for (const auto& c : m_candidates) {
        const double ns =
            predictRun(m_graph, m_measured ? &*m_measured : nullptr, shapeOf(shape, c)).simulation.iterationNs;
        d.predictedIterationNs.emplace_back(c, ns);
        if (ns < best) {
            best = ns;
            d.chosen = c;
        }
    }
    return d;
}

std::optional<GroupDecision> GroupSizeController::observe(std::int64_t step, const std::vector<SimEvent>& events)
{
    const auto deviceOf = [&](std::uint32_t stage) {
        return m_shape.stageDevices.empty() ? stage : m_shape.stageDevices.at(stage).value;
    };
    double bytes = 0;
    double linkSeconds = 0;
    for (const auto& e : events) {
        if (e.stream != Stream::Send || e.bytes <= 0 || e.endNs <= e.startNs)
            continue;
        // A SEND between two devices: its event spans its time on the link.
        const auto peer = e.action == ActionType::SendForward ? e.stage.value + 1 : e.stage.value - 1;
        const double onLink = (e.endNs - e.startNs) * 1e-9 - m_shape.link.latencySeconds;
        if (deviceOf(e.stage.value) != deviceOf(peer) && onLink > 0) { // a send within its latency says nothing
            bytes += e.bytes;
            linkSeconds += onLink;
        }
    }
    if (linkSeconds > 0) {
        const double measured = bytes / linkSeconds;
        m_estimate = m_estimate > 0 ? m_smoothing * measured + (1 - m_smoothing) * m_estimate : measured;
    }
    if (++m_seen < m_interval)
        return std::nullopt;
    m_seen = 0;
    auto d = choose(m_estimate);
    d.step = step;
    m_current = d.chosen;
    return d;
}

std::vector<GroupCandidate> autoGroupCandidates(const Graph& graph, const Profile* measured, const RunShape& shape)
{
    const auto b0 = microBatchOf(graph, shape);
    const int m0 = shape.schedule.microBatches;
    const auto samples = b0 * m0;
    std::vector<GroupCandidate> out;
    const bool batchNorm = std::any_of(
        graph.nodes().begin(), graph.nodes().end(), [](const Node& n) { return n.op == OpType::BatchNorm; });
    if (shape.deviceMemoryBytes > 0 && graph.info().family != "onnx" && !batchNorm) {
        std::map<std::pair<int, std::int64_t>, bool> fits; // (k, b) -> predicted to fit
        for (int k = 1; k <= 8; ++k) {
            for (std::int64_t b = samples / k; b >= 1; --b) { // M = samples / b >= k
                if (samples % b != 0)
                    continue;
                const GroupCandidate c { k, b, static_cast<int>(samples / b) };
                auto [it, fresh] = fits.try_emplace({ k, b }, false);
                if (fresh)
                    it->second = predictRun(graph, measured, shapeOf(shape, c)).overflows.empty();
                if (it->second) {
                    out.push_back(c);
                    break;
                }
            }
        }
        if (!out.empty())
            return out;
    }
    for (int k = 1; k <= std::min(m0, 8); ++k)
        out.push_back({ k, b0, m0 });
    return out;
}

void applyGroupCandidate(TrainingRun& run, const GroupCandidate& candidate)
{
    auto spec = run.config().schedule;
    spec.groupSize = candidate.k;
    spec.microBatches = candidate.microBatches;
    if (candidate.microBatch == run.graph().info().microBatch)
        run.setSchedule(spec);
    else
        run.setMicroBatch(buildAtMicroBatch(run.graph(), candidate.microBatch), spec);
}

std::optional<GroupAdaptation> adaptAfterStep(GroupSizeController& controller, TrainingRun& run, const RunStepResult& r)
{
    auto decision = controller.observe(r.step, r.events);
    if (!decision)
        return std::nullopt;
    GroupAdaptation a { std::move(*decision),
        { run.config().schedule.groupSize, run.graph().info().microBatch, run.config().schedule.microBatches } };
    if (a.switched())
        applyGroupCandidate(run, a.decision.chosen);
    return a;
}

} // namespace ps::engine
