// The state behind the GUI's partition editor: a partition being edited by hand, re-evaluated
// (memory optimizer + simulator) after every edit. Plain C++ so the CLI, the tests and the
// benchmark drive exactly what the GUI shows; the GUI adds undo and widgets on top.
// Depends on: plan/planner.h, sim/simulator.h.
#pragma once

#include "plan/planner.h"
#include "sim/simulator.h"

#include <memory>

namespace ps {

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
        return m_partition;
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
    // Splits the slowest stage at its compute midpoint / merges stage `boundary` into the one before.
    void addStage();
    void removeStage(int boundary);
    // The partition addStage() would produce, without applying it (for undoable edits).
    [[nodiscard]] Partition withAddedStage() const;
    void setSchedule(const ScheduleSpec& schedule);
    void setMicroBatch(double microBatch);

private:
    void rebuildModel();
    void recompute();

    const Graph& m_graph;
    const Profile& m_profile;
    Cluster m_shape;
    ScheduleSpec m_schedule;
    double m_microBatch;
    PlannerLimits m_limits;
    Cluster m_cluster;
    std::unique_ptr<StageModel> m_model;
    Partition m_partition;
    EditorSnapshot m_snapshot;
};

} // namespace ps
