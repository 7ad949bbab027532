// Partition search: where to cut the pipeline and what to swap or recompute so every stage fits
// and the slowest stage is as fast as possible.
//
// Algorithms: DawnPiper's binary partitioning (BiPar + AdjacentPartition over the cut positions
// between the compute- and memory-balanced ones, Theorem 4.1, Algorithm 1, appendix B) alone
// ("dawnpiper-paper") or as a portfolio ("dawnpiper": BiPar and four other seeds, each refined by
// sliding cuts; the plan records which seed won), PipeDream's
// dynamic program (memory-unaware as in its paper, and a memory-checked variant), GPipe's equal
// number of layers per stage (torchgpipe's balance by count), compute-balanced, memory-balanced
// (Algorithm 2, generalised: equal per-device peak under the schedule), an exact exhaustive
// search for small graphs, and FTPipe's Mixed-pipe (§4.1, plan/mixed_pipe.h: more stages than
// devices, any acyclic node-to-stage map, non-adjacent stages sharing a device). All return the
// same Plan value.
// Depends on: plan/stage_model.h.
#pragma once

#include "plan/stage_model.h"

#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class PlanAlgorithm {
    DawnPiper,
    DawnPiperPaper,
    PipeDream,
    PipeDreamMemory,
    GPipe,
    ComputeBalanced,
    MemoryBalanced,
    Exhaustive,
    MixedPipe
};

struct PlannerOptions
{
    PlanAlgorithm algorithm = PlanAlgorithm::DawnPiper;
    PlannerLimits limits;
    std::function<void(double)> progress; // fraction done, from the calling thread
    const std::atomic<bool>* cancel = nullptr; // set to stop; the search returns "cancelled"
    std::size_t maxCandidates = 48; // DawnPiper: cut positions tried per boundary
    std::size_t widenCandidates = 2; // DawnPiper: nodes added on both sides of [rho_cb, rho_mb]
    std::size_t refineReach = 4; // DawnPiper: nodes each cut may slide in the refinement pass (0: off)
    // DawnPiper: where the transfers a schedule waits on are material, rank the portfolio's
    // finalists by their simulated iteration (off where only feasibility counts: findMaxMicroBatch).
    bool rankBySimulation = true;
};

struct PlanSimulation
{
    double iterationNs = 0;
    double samplesPerSecond = 0;
    double bubbleFraction = 0;
    double peakBytes = 0; // the largest device's
    bool outOfMemory = false; // the simulator's memory timeline passed a device's capacity
};

struct Plan
{
    std::string algorithm;
    Partition partition;
    ScheduleSpec schedule;
    double microBatch = 1;
    std::vector<StageEvaluation> stages;
    // The objective: max over stages of time incl. memory-optimization overhead (over devices of
    // their stages' summed time when stages share a device).
    double slowestStageNs = 0;
    bool feasible = false;
    std::string reason; // why not feasible: the stage and how many bytes over, or "cancelled"
    double searchSeconds = 0;
    // The dawnpiper portfolio's winning seed ("bipar", "greedy-bisection", "equal-layers",
    // "memory-balanced", "compute-balanced"), with " narrowed" when its cuts were moved to narrow
    // waists, " refined" when sliding cuts improved it, " (simulated)" when the simulation chose it;
    // Mixed-pipe's chosen block count and coarsening ("L=16 by-scope").
    std::string seed;
    // The device of every stage (Mixed-pipe: several, possibly non-adjacent, stages per device).
    // Empty: stage i runs on device i.
    std::vector<DeviceId> stageDevices;
    // Filled by searchPlans for a feasible plan: its iteration simulated with communication.
    std::optional<PlanSimulation> simulation;

    [[nodiscard]] std::vector<StageMemoryPlan> memoryPlans() const;
    [[nodiscard]] int deviceCount() const;
    // "16 stages on 8 devices, stage:device 0:0 1:1 2:0 ...": the map, for plans with one.
    [[nodiscard]] std::string stageDevicesText() const;
};

// The plan's schedule as action lists per device: generated per stage and, with a stage-to-device
// map, merged onto the devices (placeStages).
[[nodiscard]] Schedule planSchedule(const Plan& plan);

[[nodiscard]] std::string_view toString(PlanAlgorithm algorithm);
[[nodiscard]] PlanAlgorithm parsePlanAlgorithm(std::string_view text);
[[nodiscard]] const std::vector<PlanAlgorithm>& allPlanAlgorithms();
// Why `algorithm` cannot plan a graph of `nodes` nodes into `stages` stages ("" where it can):
// exhaustive search is limited to 80 nodes and 5 stages.
[[nodiscard]] std::string outOfReach(PlanAlgorithm algorithm, std::size_t nodes, int stages);
// "all" for such a problem: every algorithm that can plan it.
[[nodiscard]] std::vector<PlanAlgorithm> everyPlanAlgorithmFor(std::size_t nodes, int stages);

// Runs one algorithm. Never throws for an infeasible problem: the Plan says why.
[[nodiscard]] Plan findPlan(const StageModel& model, const PlannerOptions& options);
// Evaluates given cuts with the memory optimizer (the editor and the baselines use this).
[[nodiscard]] Plan evaluatePlan(const StageModel& model, const Partition& partition, const std::string& algorithm);

[[nodiscard]] std::string planToJson(const Plan& plan);

} // namespace ps

namespace ps {

struct MaxBatchResult
{
    int microBatch = 0; // 0: not even micro-batch 1 fits
    Plan plan; // the plan at that size
};

// The largest micro-batch size for which `options.algorithm` finds a feasible plan: doubling,
// then bisection, using the profile's linear model for every size (DawnPiper §5.2's metric).
// With `threads` above 1 (0: util/parallel.h's default), up to that many sizes are tried side by
// side each round (the next powers of two, then points splitting the interval evenly), as many as
// cores are idle (idleSearchThreads): fewer rounds, the same answer where feasibility is monotone
// in the size, whatever the thread count.
[[nodiscard]] MaxBatchResult findMaxMicroBatch(const Graph& graph, const Profile& profile, const ScheduleSpec& schedule,
    const Cluster& cluster, const PlannerOptions& options, int upperLimit = 1 << 14, int threads = 1);

} // namespace ps

namespace ps {

struct SearchRequest
{
    std::vector<ScheduleSpec> schedules; // e.g. 1f1b and kfkb:2..4
    std::vector<PlanAlgorithm> algorithms;
    double microBatch = 1;
    // More than one size: each is tried. With a global batch, a schedule's micro-batch count is
    // globalBatch / size (sizes that do not divide it, or leave fewer micro-batches than stages
    // where the schedule needs them, are skipped); without, every schedule keeps its own count.
    std::vector<double> microBatchSizes;
    double globalBatch = 0;
    PlannerLimits limits;
    DeviceSpec device;
    // The devices and links to plan on (its device kind the profile's); absent: `device` x the
    // schedule's devices, 8 to a node (makeCluster). searchPlans throws when it has fewer devices
    // than a schedule needs.
    std::optional<Cluster> cluster;
    // Threads for the (schedule, size) points, which are independent; 0: defaultSearchThreads().
    // The result does not depend on it.
    int threads = 0;
    // Called with each plan as soon as it is found and simulated (from the search's threads, one
    // call at a time, under a lock), before the whole list is ranked: the studio shows results as
    // they stream in. It must return quickly and not throw (a throw fails the whole search).
    std::function<void(const Plan&)> onPlan;
};

// The search's ranking: feasible first, then more samples per second (simulated with
// communication), then the faster slowest stage.
[[nodiscard]] bool rankedBefore(const Plan& a, const Plan& b);

// One iteration of a feasible plan simulated with communication on `cluster` (its stage-to-device
// map applied, dataflow sends direct).
[[nodiscard]] PlanSimulation simulatePlan(
    const Plan& plan, const Graph& graph, const Profile& profile, const Cluster& cluster);

// Every (schedule, micro-batch size, algorithm), each plan simulated with communication on
// `device` x the schedule's devices and ranked: feasible first, then by samples per second (at
// one size and count: the shortest iteration), then by the slowest stage. `progress` gets the
// overall fraction (from the search's threads, never decreasing); a set `cancel` returns what
// finished so far. The CLI's `plan` and `search`
// and the studio's auto-search all rank through this.
[[nodiscard]] std::vector<Plan> searchPlans(const Graph& graph, const Profile& profile, const SearchRequest& request,
    const std::function<void(double)>& progress = {}, const std::atomic<bool>* cancel = nullptr);

} // namespace ps
