// Ada-Grouper's adaptive kFkB (Wang et al., "Ada-Grouper"): at a fixed global batch, each group
// size k has a point on the memory-limit curve, the largest micro-batch size whose kFkB(k) plan
// fits (§3.2: grouping k micro-batches keeps k in flight per stage, so a larger k trades memory for
// overlap of communication with compute). The candidates are ranked by the simulated iteration
// with communication; under a changing network (§4.4's preempted links, a BandwidthTrace) an
// adaptive controller re-estimates them every interval from the bandwidth it sees and switches k
// at an iteration boundary.
// Depends on: plan/planner.h, sim/simulator.h.
#pragma once

#include "plan/planner.h"
#include "sim/simulator.h"

#include <optional>
#include <vector>

namespace ps {

struct GroupingRequest
{
    int stages = 4;
    double globalBatch = 0; // samples per iteration; a micro-batch size must divide it
    int maxK = 8;
    // > 0: every k runs micro-batch groupBatch / k, so k in-flight groups hold about the same
    // activations (Ada-Grouper §6's granularity test: b = 6/k); 0: the memory-limit curve's largest.
    double groupBatch = 0;
    // With groupBatch: micro-batches of whole samples, the largest size that divides the global
    // batch and is at most groupBatch / k (1.5 becomes 1).
    bool wholeMicroBatches = false;
    PlanAlgorithm algorithm = PlanAlgorithm::DawnPiper;
    PlannerLimits limits;
    // Given: every k runs these cuts (Ada-Grouper compiles its stages once and varies only (k, b));
    // the memory optimizer still plans each. Absent: each k is partitioned by `algorithm`.
    std::optional<Partition> partition;
};

struct GroupingCandidate
{
    int k = 1;
    Plan plan; // its schedule (kfkb:k, M = globalBatch / microBatch) and micro-batch; simulated
};

// One candidate per k in 1..maxK that fits at some micro-batch size (or at groupBatch / k), in order of the simulated
// iteration time (shortest first), simulated at `traceOffsetSeconds` on the cluster's traces.
// Throws ps::Error when the global batch is not positive.
[[nodiscard]] std::vector<GroupingCandidate> groupingCandidates(const Graph& graph, const Profile& profile,
    const Cluster& cluster, const GroupingRequest& request, double traceOffsetSeconds = 0);

// The candidate's iteration simulated on `cluster` starting `offsetSeconds` into its traces.
[[nodiscard]] double groupingIterationNs(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const GroupingCandidate& candidate, double offsetSeconds);

struct GroupingStep
{
    int iteration = 0;
    double startSeconds = 0;
    int k = 1;
    double microBatch = 1;
    double iterationSeconds = 0;
    double estimatedFraction = 1; // the controller's estimate when it chose (1: fixed k)
    double measuredFraction = 1; // the share this iteration's transfers measured
};

struct GroupingRun
{
    std::vector<GroupingStep> steps;
    double totalSeconds = 0;
    [[nodiscard]] int switches() const;
};

// The bandwidth share an iteration's transfers saw, as a runtime measures it from their timings:
// their time at the links' nominal bandwidth over the time they took (latency excluded). 1 when
// nothing crossed a link.
[[nodiscard]] double measuredBandwidthShare(const SimulationResult& iteration, const Cluster& cluster);

// Runs `iterations` iterations on the cluster's traces. After each iteration the controller folds
// the share its transfers measured into a moving average (weight `smoothing` for the newest
// iteration; Ada-Grouper §4.4 estimates communication from recent transfers); every `interval`
// iterations it simulates every candidate on links held at that estimate and switches to the
// fastest (k and its micro-batch size) at the iteration boundary. Before any measurement it
// assumes the nominal bandwidth.
[[nodiscard]] GroupingRun adaptiveGrouping(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const std::vector<GroupingCandidate>& candidates, int iterations, int interval, double smoothing = 0.5);
// The same run with one candidate throughout (k fixed, e.g. 1F1B's k = 1), for comparison.
[[nodiscard]] GroupingRun fixedGrouping(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const GroupingCandidate& candidate, int iterations);

} // namespace ps
