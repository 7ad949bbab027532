#include "plan/plan_editor.h"

#include "plan/mixed_pipe.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace ps {

Placement placementFromPlanJson(std::string_view json, std::size_t nodeCount)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (!j.is_object() || !j.contains("cuts"))
        throw Error("stored plan: not a plan's JSON (no cuts)");
    Placement placement { partitionFromCuts(j.value("cuts", std::string()), nodeCount, j.value("stages", 1)), {} };
    if (j.contains("node_order")) { // a dataflow plan: its cuts count in its own order
        for (const auto& n : j.at("node_order"))
            placement.partition.nodeOrder.emplace_back(n.get<std::uint32_t>());
        for (const auto& d : j.value("stage_devices", nlohmann::json::array()))
            placement.stageDevices.emplace_back(d.get<std::uint32_t>());
    }
    return placement;
}

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
    m_placement.partition = computeBalancedPartition(times, m_schedule.stages);
    recompute();
}

int PlanEditor::deviceCount() const
{
    if (m_placement.stageDevices.empty())
        return m_schedule.devices();
    std::uint32_t count = 0;
    for (auto d : m_placement.stageDevices)
        count = std::max(count, d.value + 1);
    return static_cast<int>(count);
}

void PlanEditor::rebuildModel()
{
    const int devices = deviceCount();
    m_cluster = m_shape;
    m_cluster.devicesPerNode = std::max(1, std::min(m_cluster.devicesPerNode, devices));
    m_cluster.nodes = (devices + m_cluster.devicesPerNode - 1) / m_cluster.devicesPerNode;
    m_cluster.name = std::to_string(devices) + " x " + m_shape.device.id;
    if (m_limits.memoryLimitBytes > 0) // the simulator flags OOM against the same limit the planner used
        m_cluster.device.memoryBytes = static_cast<std::int64_t>(m_limits.memoryLimitBytes);
    m_model = std::make_unique<StageModel>(m_graph, m_profile, m_schedule, m_cluster, m_microBatch, m_limits);
    m_graphModel.reset();
    m_orderedGraph.reset();
    m_orderedProfile.reset();
}

void PlanEditor::recompute()
{
    if (dataflow()) {
        recomputeDataflow();
        return;
    }
    m_snapshot.plan = evaluatePlan(*m_model, m_placement.partition, "manual");
    m_snapshot.stageCosts.clear();
    const auto& starts = m_placement.partition.stageStarts;
    for (std::size_t i = 0; i < m_snapshot.plan.stages.size(); ++i) {
        auto cost = m_snapshot.plan.stages[i].cost;
        const auto end = i + 1 < starts.size() ? starts[i + 1] : m_graph.nodeCount();
        cost.firstBackwardExtraBytes = m_model->firstBackwardExtraBytes(starts[i], end, cost.workspaceBytes);
        m_snapshot.stageCosts.push_back(cost);
    }
    const auto schedule = generateSchedule(m_schedule);
    m_snapshot.simulation = simulate({ schedule, m_snapshot.stageCosts, m_cluster, m_profile.setup, m_microBatch,
        m_snapshot.plan.memoryPlans(), {} });
}

// A dataflow plan is evaluated from its node-to-stage map (FTPipe §4.1: per device, its stages'
// memory summed) and simulated with direct sends, as the planner does (simulatePlan). The
// evaluation lists each stage's nodes in graph order, so the editor takes that order back and
// rebuilds the model its positions refer to.
void PlanEditor::recomputeDataflow()
{
    if (!m_graphModel) {
        m_graphModel = std::move(m_model);
        m_orderedGraph.reset();
    }
    const auto n = m_graph.nodeCount();
    auto plan =
        evaluateDataflowPlan(*m_graphModel, stageOfNodes(m_placement.partition, n), m_placement.stageDevices, "manual");
    m_placement = { plan.partition, plan.stageDevices };
    m_model.reset(); // it refers to the previous ordered graph
    m_orderedGraph = std::make_unique<Graph>(graphInNodeOrder(m_graph, plan.partition.nodeOrder));
    m_orderedProfile = std::make_unique<Profile>(profileInNodeOrder(m_profile, plan.partition.nodeOrder));
    m_model = std::make_unique<StageModel>(
        *m_orderedGraph, *m_orderedProfile, m_schedule, m_cluster, m_microBatch, m_limits, true);
    m_snapshot.stageCosts = computeStageCosts(m_graph, m_profile, plan.partition, m_microBatch);
    m_snapshot.simulation = simulate({ planSchedule(plan), m_snapshot.stageCosts, m_cluster, m_profile.setup,
        m_microBatch, plan.memoryPlans(), {} });
    m_snapshot.plan = std::move(plan);
}

std::pair<std::size_t, std::size_t> PlanEditor::legalRange(int boundary) const
{
    const auto& starts = m_placement.partition.stageStarts;
    if (boundary < 1 || boundary >= m_placement.partition.stageCount())
        throw Error("partition editor: there is no boundary " + std::to_string(boundary));
    const auto b = static_cast<std::size_t>(boundary);
    const auto next = b + 1 < starts.size() ? starts[b + 1] : m_graph.nodeCount();
    return { starts[b - 1] + 1, next - 1 };
}

std::size_t PlanEditor::moveBoundary(int boundary, std::size_t node)
{
    const auto [lo, hi] = legalRange(boundary);
    const auto snapped = std::clamp(node, lo, hi);
    auto& slot = m_placement.partition.stageStarts[static_cast<std::size_t>(boundary)];
    if (slot != snapped) {
        slot = snapped;
        recompute();
    }
    return snapped;
}

void PlanEditor::setPartition(const Partition& partition)
{
    setPlacement({ partition, {} });
}

void PlanEditor::setPlacement(const Placement& placement)
{
    const auto& partition = placement.partition;
    checkPartition(partition, m_graph.nodeCount());
    if (partition.dataflow() && placement.stageDevices.size() != static_cast<std::size_t>(partition.stageCount()))
        throw Error("partition editor: a plan with its own node order needs a device for each of its "
            + std::to_string(partition.stageCount()) + " stages, got " + std::to_string(placement.stageDevices.size()));
    // Cuts moved within the same stages and devices keep the model (an edit re-runs only the
    // evaluation and the simulation); a new stage count or device map rebuilds it.
    const bool rebuild = partition.stageCount() != m_schedule.stages
        || placement.stageDevices != m_placement.stageDevices || partition.dataflow() != dataflow();
    const auto previous = m_placement;
    const auto previousSchedule = m_schedule;
    try {
        m_schedule.stages = partition.stageCount();
        m_placement = placement;
        if (rebuild)
            rebuildModel(); // the device count follows the map
        recompute();
    } catch (...) { // an invalid order or a cyclic map: the editor keeps what it showed
        m_schedule = previousSchedule;
        m_placement = previous;
        rebuildModel();
        recompute();
        throw;
    }
}

void PlanEditor::addStage()
{
    setPlacement(withAddedStage());
}

Placement PlanEditor::withAddedStage() const
{
    const auto& partition = m_placement.partition;
    if (static_cast<std::size_t>(partition.stageCount()) >= m_graph.nodeCount())
        throw Error("partition editor: every node is already its own stage");
    const auto& stages = m_snapshot.plan.stages;
    std::size_t slowest = stages.size();
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto size =
            partition.stageEnd(StageId(static_cast<std::uint32_t>(s)), m_graph.nodeCount()) - partition.stageStarts[s];
        if (size > 1 && (slowest == stages.size() || stages[slowest].timeNs < stages[s].timeNs))
            slowest = s;
    }
    const auto begin = partition.stageStarts[slowest];
    const auto end = partition.stageEnd(StageId(static_cast<std::uint32_t>(slowest)), m_graph.nodeCount());
    auto cut = begin + 1;
    while (cut + 1 < end && m_model->computeNs(begin, cut) < m_model->computeNs(cut, end))
        ++cut;
    auto next = m_placement;
    const auto at = static_cast<std::ptrdiff_t>(slowest) + 1;
    next.partition.stageStarts.insert(next.partition.stageStarts.begin() + at, cut);
    if (!next.stageDevices.empty()) // the new half stays on the split stage's device
        next.stageDevices.insert(next.stageDevices.begin() + at, next.stageDevices[slowest]);
    return next;
}

Placement PlanEditor::withoutStage(int boundary) const
{
    (void)legalRange(boundary);
    auto next = m_placement;
    next.partition.stageStarts.erase(next.partition.stageStarts.begin() + boundary);
    if (!next.stageDevices.empty()) // merged into the stage before: its device
        next.stageDevices.erase(next.stageDevices.begin() + boundary);
    return next;
}

void PlanEditor::removeStage(int boundary)
{
    setPlacement(withoutStage(boundary));
}

void PlanEditor::setSchedule(const ScheduleSpec& schedule)
{
    auto s = schedule;
    s.stages = m_placement.partition.stageCount();
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
