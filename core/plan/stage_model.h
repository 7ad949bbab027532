// What the planners ask of a candidate stage: its time, its memory on the device under the
// schedule, and what the memory optimizer must do to make it fit.
//
// A StageModel precomputes per-node quantities at one micro-batch size so that any contiguous
// node range can be evaluated in time linear in its length (saved storages deduplicated as in
// computeStageCosts) and the bytes crossing any cut in O(1).
// Depends on: plan/partition.h, sim/memory_model.h, cluster/.
#pragma once

#include "cluster/cluster.h"
#include "cost/autocast.h"
#include "graph/op_cost.h"
#include "plan/partition.h"
#include "plan/range_facts.h"
#include "schedule/message_wait.h"
#include "sim/memory_model.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace ps {

struct PlannerLimits
{
    double memoryLimitBytes = 0; // per device; 0: the device's capacity
    bool allowSwap = true;
    bool allowRecompute = true;
    // GPipe's (torchgpipe's checkpoint="always") rematerialisation: every stage keeps only its
    // input per micro-batch and re-runs its whole forward before each backward, whether or not it
    // needs to; the swap/recompute optimizer is not used.
    bool checkpointStages = false;
    // With checkpointStages: false leaves the last stage out (FTPipe §4.2.1: it keeps its
    // activations, its backward follows its forward at once, so recomputing saves nothing).
    bool checkpointLastStage = true;
};

// One saved storage of a stage: the candidates of the memory optimizer (DawnPiper §4.3).
struct SavedTensorInfo
{
    TensorId root; // the storage
    double bytes = 0; // one micro-batch
    double forwardEndNs = 0; // when its last forward use ends, from the stage's start
    double backwardUseNs = 0; // when backward first needs it
    double recomputeNs = 0; // forward time of its producer (Capuchin's recompute cost)
};

struct StageEvaluation
{
    StageCost cost;
    double staticBytes = 0; // parameters, gradients, optimizer states, stashed weights, workspace
    // One message each way along the chain: the previous stage's activations, the next's gradients
    // (a dataflow partition's direct traffic is in staticBytes instead).
    double receivedForwardBytes = 0;
    double receivedBackwardBytes = 0;
    double peakBytes = 0; // with the memory plan applied
    double timeNs = 0; // forward + backward per micro-batch + memory-optimization overhead
    double overheadNs = 0;
    StageMemoryPlan memoryPlan;
    bool fits = false;
    double overBytes = 0; // when it does not fit even after optimization
};

class StageModel
{
public:
    // `directSends`: the graph is a dataflow partition's node order (graphInNodeOrder), so a stage
    // receives only what its own nodes read and sends only what later nodes read of its own.
    StageModel(const Graph& graph, const Profile& profile, const ScheduleSpec& schedule, const Cluster& cluster,
        double microBatch, const PlannerLimits& limits, bool directSends = false);

    [[nodiscard]] std::size_t nodeCount() const
    {
        return m_nodeFwd.size();
    }
    [[nodiscard]] double capacityBytes() const
    {
        return m_capacity;
    }
    // Nodes [begin, end) as stage `stage` (0-based) of the pipeline. Remembered: the searches ask
    // for the same ranges again and again (a refinement moves one cut and re-scores every stage, a
    // bisection re-tries the same runs under another target), so a range is computed once; the
    // memory is bounded (kEvaluationCacheLimit entries, then the cache starts over). Like the
    // rest of a StageModel, not for concurrent use: each search thread builds its own.
    [[nodiscard]] StageEvaluation evaluate(std::size_t begin, std::size_t end, int stage) const;
    // The same computation, never from or into the cache.
    [[nodiscard]] StageEvaluation evaluateUncached(std::size_t begin, std::size_t end, int stage) const;
    // StageCost::firstBackwardExtraBytes of nodes [begin, end) whose working set is `workspaceBytes`:
    // what the first backward after an optimizer step adds (its gradients allocated as they grow),
    // as computeStageCosts sets it. Only a simulation needs it (evaluate leaves it 0).
    [[nodiscard]] double firstBackwardExtraBytes(std::size_t begin, std::size_t end, double workspaceBytes) const;
    // Off: evaluate() computes every range afresh (the slow path the tests hold the cache against).
    void setEvaluationCache(bool enabled)
    {
        m_cacheEvaluations = enabled;
        m_evaluations.clear();
    }
    // A lower bound of any stage's peak over nodes [begin, end) as stage `stage`: the weights,
    // gradients and optimizer states of the parameters whose first reader is in the range (each
    // counted once however many nodes read it; swap and recompute move activations only).
    [[nodiscard]] double minimumStaticBytes(std::size_t begin, std::size_t end, int stage) const
    {
        return staticBytesFor(m_prefixFirstParams[end] - m_prefixFirstParams[begin], stage);
    }
    // Whether some partition into stages() contiguous stages could fit, by minimumStaticBytes: if
    // not, no partition fits and the planners need not search. Each stage, in order, takes the
    // longest run whose bound fits (possibly none), which reaches at least as far as any partition
    // with the same stages (empty ones allowed) can: exact for that relaxation, so never a false no.
    [[nodiscard]] bool parametersCanFit() const;
    static constexpr std::size_t kEvaluationCacheLimit = 1 << 14;
    // Forward+backward time of nodes [begin, end), no memory optimization (prefix sums).
    [[nodiscard]] double computeNs(std::size_t begin, std::size_t end) const;
    // Memory of nodes [begin, end) as stage `stage`, no optimization: parameters and activations
    // from prefix sums (shared storages may count twice; used to place balanced cuts).
    [[nodiscard]] double approxMemoryBytes(std::size_t begin, std::size_t end, int stage) const;
    // Activation bytes crossing a cut before node `cut`, one micro-batch, forward direction.
    [[nodiscard]] double cutBytes(std::size_t cut) const;
    // The part of cutBytes(cut) whose gradient comes back in the backward pass.
    [[nodiscard]] double cutGradBytes(std::size_t cut) const;
    [[nodiscard]] int stages() const
    {
        return m_schedule.stages;
    }
    [[nodiscard]] const ScheduleSpec& schedule() const
    {
        return m_schedule;
    }
    [[nodiscard]] double microBatch() const
    {
        return m_microBatch;
    }
    [[nodiscard]] const Graph& graph() const
    {
        return m_graph;
    }
    [[nodiscard]] const Profile& profile() const
    {
        return m_profile;
    }
    [[nodiscard]] const Cluster& cluster() const
    {
        return m_cluster;
    }
    [[nodiscard]] const PlannerLimits& limits() const
    {
        return m_limits;
    }
    [[nodiscard]] double nodeForwardNs(std::size_t node) const
    {
        return m_nodeFwd[node];
    }
    [[nodiscard]] double nodeBackwardNs(std::size_t node) const
    {
        return m_nodeBwd[node];
    }
    // Saved activation bytes of nodes [begin, end), one micro-batch (prefix sums, as
    // approxMemoryBytes).
    [[nodiscard]] double savedBytes(std::size_t begin, std::size_t end) const
    {
        return m_prefixSaved[end] - m_prefixSaved[begin];
    }
    // Weights, gradients and optimizer states of the parameters nodes [begin, end) read, as stage
    // `stage`.
    [[nodiscard]] double parameterStateBytes(std::size_t begin, std::size_t end, int stage) const
    {
        return staticBytesFor(m_prefixParams[end] - m_prefixParams[begin], stage);
    }
    // A tensor's bytes at the planned micro-batch and precision.
    [[nodiscard]] double tensorBytes(TensorId tensor) const;

private:
    void precomputeNodes();
    void precomputeCuts();
    [[nodiscard]] double staticBytesFor(double parameterCount, int stage) const;
    // The stage's peak under `p`, an upper bound of what the simulator walks (by up to the message
    // an action takes in): its static bytes, the most its in-flight micro-batches' kept bytes and
    // the messages that can wait beside them hold at once (the schedule's WaitPoints), and the
    // swap/recompute buffers.
    [[nodiscard]] double peakUnder(const StageEvaluation& e, int stage, const StageMemoryPlan& p) const;
    void optimizeMemory(std::size_t begin, std::size_t end, int stage, StageEvaluation& e) const;
    void checkpointStage(std::size_t begin, std::size_t end, int stage, StageEvaluation& e) const;
    // The plan's recompute as the runtime runs it (stage_recompute.cpp): the stage inputs it keeps
    // net of the recomputed bytes, the nodes it re-runs beyond the producers in its time.
    void accountRecompute(std::size_t begin, std::size_t end, int stage, StageEvaluation& e) const;
    // Chooses swaps and recomputes until the stage's peak is at most `target` bytes; fits is judged
    // against the stage's memory limit (the device's capacity unless PlannerLimits sets one).
    void applyPolicy(
        const std::vector<SavedTensorInfo>& saved, int stage, bool useSwap, double target, StageEvaluation& e) const;
    [[nodiscard]] std::vector<SavedTensorInfo> savedTensors(std::size_t begin, std::size_t end) const;
    void setDirectTraffic(std::size_t begin, std::size_t end, StageEvaluation& e) const;
    void setWorkingSets(std::size_t begin, std::size_t end, bool cpuScratch, StageCost& c) const;

    const Graph& m_graph;
    const Profile& m_profile;
    ScheduleSpec m_schedule;
    Cluster m_cluster; // a copy: callers pass temporaries (makeCluster(...)); found by the asan preset
    double m_microBatch;
    PlannerLimits m_limits;
    bool m_directSends;
    double m_capacity;
    double m_scale; // graph micro-batch -> planned micro-batch
    AutocastPlan m_autocast; // tensor types under mixed precision (bytes per tensor, saved half copies)
    double m_workScale; // working gradients and scratch: the precision's activation scale
    std::shared_ptr<const RangeFacts> m_facts; // the graph's, shared with every model planned on it
    const std::vector<OpCost>& m_costs; // m_facts's
    const GradientFlow& m_flow; // m_facts's: the backward's working set, last readers of parameters
    std::vector<std::size_t> m_firstReader; // by tensor: node index + 1 of its first reader
    std::vector<TensorId> m_root; // storage root per tensor
    std::vector<double> m_nodeFwd, m_nodeBwd, m_nodeW; // ns at m_microBatch
    std::vector<double> m_prefixCompute, m_prefixParams, m_prefixSaved;
    std::vector<double> m_prefixFirstParams; // parameters counted at their first reader only
    std::vector<double> m_stageBytesPerParameter; // by stage
    std::vector<int> m_stageInFlight; // by stage
    std::vector<std::vector<WaitPoint>> m_waitPoints; // by stage (chains only): schedule/message_wait.h
    std::vector<double> m_cutBytes; // index c: bytes crossing the cut before node c
    std::vector<double> m_cutGradBytes; // the part of m_cutBytes whose gradient flows back
    mutable std::vector<std::uint32_t> m_stamp; // per tensor: last evaluation that counted it
    mutable std::uint32_t m_generation = 0;
    mutable std::vector<std::uint32_t> m_savedStamp; // per tensor: last savedTensors call that listed it
    mutable std::vector<std::size_t> m_savedPosition; // per tensor: its index in that call's list
    mutable std::uint32_t m_savedGeneration = 0;
    // accountRecompute's marks per tensor (its call's generation): saved by the stage, a saved
    // storage, a stage input the recompute keeps.
    mutable std::vector<std::uint32_t> m_recomputeSaved, m_recomputeSavedRoot, m_recomputeKept;
    mutable std::uint32_t m_recomputeGeneration = 0;
    struct RangeKey
    {
        std::size_t begin, end;
        int stage;
        bool operator==(const RangeKey&) const = default;
    };
    struct RangeHash
    {
        std::size_t operator()(const RangeKey& k) const noexcept
        {
            return std::hash<std::size_t> {}(
                (k.begin * 0x9E3779B97F4A7C15ULL) ^ (k.end << 20) ^ static_cast<std::size_t>(k.stage));
        }
    };
    mutable std::unordered_map<RangeKey, StageEvaluation, RangeHash> m_evaluations;
    bool m_cacheEvaluations = true;
};

// The nodes of [begin, end) a recompute of the storages `roots` re-runs, ascending, as the runtime
// runs it (engine/runtime/stage_recompute.cpp): their producers and, for every input no node of
// the range saves, that input's producer in turn. `costs`: computeOpCosts(graph).
[[nodiscard]] std::vector<std::size_t> recomputedNodes(const Graph& graph, const std::vector<OpCost>& costs,
    std::size_t begin, std::size_t end, const std::vector<TensorId>& roots);

} // namespace ps
