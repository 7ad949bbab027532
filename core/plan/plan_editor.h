// The state behind the GUI's partition editor: a partition being edited by hand, re-evaluated
// (memory optimizer + simulator) after every edit. Plain C++ so the CLI, the tests and the
// benchmark drive exactly what the GUI shows; the GUI adds undo and widgets on top.
//
// A dataflow plan (FTPipe's Mixed-pipe) is edited the same way over its own node order: its
// stages stay contiguous in that order, so moving a cut keeps the stage graph acyclic, and every
// stage keeps its device (several, possibly non-adjacent, stages share one). Positions (cuts,
// legalRange, model()) then count in that order.
// Depends on: plan/planner.h, plan/mixed_pipe.h, sim/simulator.h.
#pragma once

#include "plan/planner.h"
#include "sim/simulator.h"

#include <memory>
#include <string_view>

namespace ps {

// What the editor edits. A dataflow partition (its nodeOrder set) needs the device of every
// stage; otherwise stageDevices is empty and stage i runs on device i.
struct Placement
{
    Partition partition;
    std::vector<DeviceId> stageDevices {};

    bool operator==(const Placement&) const = default;
};

// The placement a stored plan's JSON (planToJson) describes: its cuts and, for a dataflow plan,
// its node order and stage-to-device map. Throws ps::Error when the JSON is not a plan or its
// cuts do not fit `nodeCount` nodes.
[[nodiscard]] Placement placementFromPlanJson(std::string_view json, std::size_t nodeCount);

struct EditorSnapshot
{
    Plan plan; // stage times, memory and memory plans for the current cuts
    SimulationResult simulation; // one iteration with those memory plans
    std::vector<StageCost> stageCosts;
};

class PlanEditor
{
public:
    // `graph` and `profile` must outlive the editor. `shape` gives the device kind, devices per
    // node and links; the cluster grows to one device per pipeline device of the schedule.
    PlanEditor(const Graph& graph, const Profile& profile, Cluster shape, ScheduleSpec schedule, double microBatch,
        PlannerLimits limits = {});
    PlanEditor(const Graph& graph, const Profile& profile, const DeviceSpec& device, ScheduleSpec schedule,
        double microBatch, PlannerLimits limits = {});

    [[nodiscard]] const Partition& partition() const
    {
        return m_placement.partition;
    }
    [[nodiscard]] const Placement& placement() const
    {
        return m_placement;
    }
    // Stages share devices (a dataflow plan): add/remove keep the map, a split stage's new half
    // stays on its device.
    [[nodiscard]] bool dataflow() const
    {
        return m_placement.partition.dataflow();
    }
    [[nodiscard]] const EditorSnapshot& snapshot() const
    {
        return m_snapshot;
    }
    [[nodiscard]] const ScheduleSpec& schedule() const
    {
        return m_schedule;
    }
    [[nodiscard]] double microBatch() const
    {
        return m_microBatch;
    }
    [[nodiscard]] const Cluster& cluster() const
    {
        return m_cluster;
    }
    // The stage model over the positions the editor cuts (a dataflow plan: its node order).
    [[nodiscard]] const StageModel& model() const
    {
        return *m_model;
    }

    // Where boundary `boundary` (1..S-1: the first node of that stage) may go: between its
    // neighbours, so no stage becomes empty.
    [[nodiscard]] std::pair<std::size_t, std::size_t> legalRange(int boundary) const;
    // Moves a boundary to `node`, clamped into its legal range; returns the node it landed on.
    std::size_t moveBoundary(int boundary, std::size_t node);
    // Replaces the whole partition (from the planner, a stored plan or undo); throws if invalid.
    void setPartition(const Partition& partition);
    // The same with a stage-to-device map (a Mixed-pipe plan); throws ps::Error when the map does
    // not give every stage a device, the node order is not topological, or stages form a cycle.
    void setPlacement(const Placement& placement);
    // Splits the slowest stage at its compute midpoint / merges stage `boundary` into the one before.
    void addStage();
    void removeStage(int boundary);
    // What addStage() / removeStage() would produce, without applying it (for undoable edits).
    [[nodiscard]] Placement withAddedStage() const;
    [[nodiscard]] Placement withoutStage(int boundary) const;
    void setSchedule(const ScheduleSpec& schedule);
    void setMicroBatch(double microBatch);

private:
    void rebuildModel();
    void recompute();
    void recomputeDataflow();
    [[nodiscard]] int deviceCount() const;

    const Graph& m_graph;
    const Profile& m_profile;
    Cluster m_shape;
    ScheduleSpec m_schedule;
    double m_microBatch;
    PlannerLimits m_limits;
    Cluster m_cluster;
    std::unique_ptr<StageModel> m_model; // over m_graph, or over the dataflow order
    // Dataflow plans only: the model over m_graph the evaluation starts from, and the graph and
    // profile renumbered in the plan's order that m_model refers to.
    std::unique_ptr<StageModel> m_graphModel;
    std::unique_ptr<Graph> m_orderedGraph;
    std::unique_ptr<Profile> m_orderedProfile;
    Placement m_placement;
    EditorSnapshot m_snapshot;
};

} // namespace ps
