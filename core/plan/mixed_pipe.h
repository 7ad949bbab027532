// FTPipe's Mixed-pipe partitioning (Eliad et al., "Fine-tuning giant neural networks on commodity
// hardware with automatic pipeline model parallelism", USENIX ATC'21, §4.1).
//
// The graph is cut into L > P blocks that may sit anywhere in it, not into P contiguous layers:
// preprocessing (§4.1 step 1a) merges nodes that make bad borders, coarsening (1b) contracts the
// graph into about L blocks under a memory cap, LPT (step 2) balances the blocks' compute over
// the P devices, the blocks of each device merge into as few stages as acyclicity allows, and
// refinement (step 3) moves border nodes between stages while Eq. 1's period improves. Several
// L (2P, 3P, 4P) and coarsenings compete; the simulated iteration picks the winner (§4 "throughput
// analysis via simulation"). Stages recompute from their border inputs except the last (§4.2.1),
// so the partition is repeated with the last stage's profile until it stops changing (§4.3).
//
// The result is a dataflow Plan: a node order in which every stage is contiguous, the stages in
// a topological order of the stage graph, and a stage-to-device map with several, possibly
// non-adjacent, stages per device. Every place the paper leaves a choice open is marked [gap] in
// mixed_pipe.cpp and mixed_pipe_dag.cpp.
// Depends on: plan/planner.h, sim/simulator.h.
#pragma once

#include "plan/planner.h"

#include <optional>
#include <string>
#include <vector>

namespace ps {

struct MixedPipeOptions
{
    std::vector<int> blockCounts; // L tried (§4.1 "L = 2P, 3P, ..."); empty: 2P, 3P and 4P
    int fixPointIterations = 3; // §4.3: partitions with the last stage's profile until it holds
    int refinePasses = 16; // step 3: passes over the border nodes (each stops early without a move)
};

// One (L, coarsening, fix-point round) the search tried.
struct MixedPipeCandidate
{
    int blocks = 0; // L asked for
    int stages = 0; // after forming stages per device (0: LPT found no device with room)
    std::string coarsening; // "by-scope", "centers-spread", "centers-heaviest"
    int round = 0; // fix-point round, from 0
    bool checkpointing = true; // stages keep only border inputs and recompute (FTPipe §4.2.1)
    double memoryShare = 1; // of the device memory the heuristics planned with
    double periodNs = 0; // Eq. 1: the slowest device's summed stage periods
    double iterationNs = 0; // simulated (0 when infeasible)
    bool feasible = false;
    double interDeviceBytes = 0; // per sample, between stages on different devices (§5.3's volume)
    double samplesPerSecond = 0; // simulated; what the search ranks feasible candidates by
};

struct MixedPipeResult
{
    Plan plan; // the best candidate: feasible first, then by simulated throughput
    std::vector<MixedPipeCandidate> candidates;
};

// Eq. 1: T_i = C + max(0, T_comm_fwd - C) + max(0, T_comm_bwd - C), with C the stage's forward
// plus backward (recomputation included): communication hides behind compute up to C each way.
[[nodiscard]] double ftpipeStagePeriodNs(double computeNs, double commForwardNs, double commBackwardNs);

// Activations and gradients a plan sends between stages on different devices, per sample (FTPipe
// §5.3 counts inter-GPU volume only; a same-device stage-to-stage hand-over is not sent).
[[nodiscard]] double interDeviceBytesPerSample(const Plan& plan);

struct LptBlock
{
    double computeNs = 0;
    double memoryBytes = 0;
};

// Step 2, Longest-Processing-Time first: blocks by compute, largest first, each to the least
// loaded device with room under `memoryCapBytes` (ties: the lower device). nullopt when a block
// fits no device.
[[nodiscard]] std::optional<std::vector<DeviceId>> assignLongestFirst(
    const std::vector<LptBlock>& blocks, int devices, double memoryCapBytes);

// Whether the stage graph (an edge s -> t when a node of s feeds a node of t) has no cycle.
[[nodiscard]] bool stageGraphIsAcyclic(const Graph& graph, const std::vector<StageId>& stageOfNode);

// The plan of any acyclic node-to-stage map with a device per stage: stages renumbered in a
// topological order of the stage graph (ties: the stage holding the earlier node first), each
// evaluated by `model`'s memory optimizer over that node order, direct sends between stages, and
// feasibility checked per device (its stages' memory summed, the largest transient once).
// Throws ps::Error naming the stage when a stage is empty or the stage graph has a cycle.
[[nodiscard]] Plan evaluateDataflowPlan(const StageModel& model, const std::vector<StageId>& stageOfNode,
    const std::vector<DeviceId>& stageDevices, const std::string& algorithm);

// The whole search on `model`'s graph, profile, cluster and schedule (its stage count is the
// number of devices P). Throws detail::Cancelled (findPlan's "cancelled") when options.cancel
// is set.
[[nodiscard]] MixedPipeResult planMixedPipe(
    const StageModel& model, const PlannerOptions& options, const MixedPipeOptions& mixed = {});

} // namespace ps
