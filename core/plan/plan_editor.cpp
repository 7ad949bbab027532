#include "plan/plan_editor.h"

#include "util/error.h"

#include <algorithm>

namespace ps {

PlanEditor::PlanEditor(const Graph& graph, const Profile& profile, const DeviceSpec& device, ScheduleSpec schedule,
    double microBatch, PlannerLimits limits)
    : PlanEditor(graph, profile, makeCluster(device, 8), schedule, microBatch, limits) // 8 devices per node
{
}

PlanEditor::PlanEditor(const Graph& graph, const Profile& profile, Cluster shape, ScheduleSpec schedule,
    double microBatch, PlannerLimits limits)
    : m_graph(graph)
    , m_profile(profile)
    , m_shape(std::move(shape))
    , m_schedule(schedule)
    , m_microBatch(microBatch)
    , m_limits(limits)
{
    rebuildModel();
    std::vector<double> times;
    for (std::size_t n = 0; n < m_model->nodeCount(); ++n)
        times.push_back(m_model->computeNs(n, n + 1));
    m_partition = computeBalancedPartition(times, m_schedule.stages);
    recompute();
}

void PlanEditor::rebuildModel()
{
    const int devices = m_schedule.devices();
    m_cluster = m_shape;
    m_cluster.devicesPerNode = std::max(1, std::min(m_cluster.devicesPerNode, devices));
    m_cluster.nodes = (devices + m_cluster.devicesPerNode - 1) / m_cluster.devicesPerNode;
    m_cluster.name = std::to_string(devices) + " x " + m_shape.device.id;
    if (m_limits.memoryLimitBytes > 0) // the simulator flags OOM against the same limit the planner used
        m_cluster.device.memoryBytes = static_cast<std::int64_t>(m_limits.memoryLimitBytes);
    m_model = std::make_unique<StageModel>(m_graph, m_profile, m_schedule, m_cluster, m_microBatch, m_limits);
}

void PlanEditor::recompute()
{
    m_snapshot.plan = evaluatePlan(*m_model, m_partition, "manual");
    m_snapshot.stageCosts.clear();
    for (const auto& s : m_snapshot.plan.stages)
        m_snapshot.stageCosts.push_back(s.cost);
    const auto schedule = generateSchedule(m_schedule);
    m_snapshot.simulation = simulate({ schedule, m_snapshot.stageCosts, m_cluster, m_profile.setup, m_microBatch,
        m_snapshot.plan.memoryPlans(), {} });
}

std::pair<std::size_t, std::size_t> PlanEditor::legalRange(int boundary) const
{
    const auto& starts = m_partition.stageStarts;
    if (boundary < 1 || boundary >= m_partition.stageCount())
        throw Error("partition editor: there is no boundary " + std::to_string(boundary));
    const auto b = static_cast<std::size_t>(boundary);
    const auto next = b + 1 < starts.size() ? starts[b + 1] : m_graph.nodeCount();
    return { starts[b - 1] + 1, next - 1 };
}

std::size_t PlanEditor::moveBoundary(int boundary, std::size_t node)
{
    const auto [lo, hi] = legalRange(boundary);
    const auto snapped = std::clamp(node, lo, hi);
    auto& slot = m_partition.stageStarts[static_cast<std::size_t>(boundary)];
    if (slot != snapped) {
        slot = snapped;
        recompute();
    }
    return snapped;
}

void PlanEditor::setPartition(const Partition& partition)
{
    checkPartition(partition, m_graph.nodeCount());
    if (partition.stageCount() != m_schedule.stages) {
        m_schedule.stages = partition.stageCount();
        rebuildModel();
    }
    m_partition = partition;
    recompute();
}

void PlanEditor::addStage()
{
    setPartition(withAddedStage());
}

Partition PlanEditor::withAddedStage() const
{
    if (static_cast<std::size_t>(m_partition.stageCount()) >= m_graph.nodeCount())
        throw Error("partition editor: every node is already its own stage");
    const auto& stages = m_snapshot.plan.stages;
    std::size_t slowest = stages.size();
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto size = m_partition.stageEnd(StageId(static_cast<std::uint32_t>(s)), m_graph.nodeCount())
            - m_partition.stageStarts[s];
        if (size > 1 && (slowest == stages.size() || stages[slowest].timeNs < stages[s].timeNs))
            slowest = s;
    }
    const auto begin = m_partition.stageStarts[slowest];
    const auto end = m_partition.stageEnd(StageId(static_cast<std::uint32_t>(slowest)), m_graph.nodeCount());
    auto cut = begin + 1;
    while (cut + 1 < end && m_model->computeNs(begin, cut) < m_model->computeNs(cut, end))
        ++cut;
    auto next = m_partition;
    next.stageStarts.insert(next.stageStarts.begin() + static_cast<std::ptrdiff_t>(slowest) + 1, cut);
    return next;
}

void PlanEditor::removeStage(int boundary)
{
    (void)legalRange(boundary);
    auto next = m_partition;
    next.stageStarts.erase(next.stageStarts.begin() + boundary);
    setPartition(next);
}

void PlanEditor::setSchedule(const ScheduleSpec& schedule)
{
    auto s = schedule;
    s.stages = m_partition.stageCount();
    m_schedule = s;
    rebuildModel();
    recompute();
}

void PlanEditor::setMicroBatch(double microBatch)
{
    if (!(microBatch > 0))
        throw Error("partition editor: the micro-batch size must be positive");
    m_microBatch = microBatch;
    rebuildModel();
    recompute();
}

} // namespace ps
