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
    PlanAlgorithm algorithm = PlanAlgorithm::DawnPiper;
    PlannerLimits limits;
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
    double estimatedFraction = 1; // the bandwidth share the controller saw when it chose (1: fixed k)
};

struct GroupingRun
{
    std::vector<GroupingStep> steps;
    double totalSeconds = 0;
    [[nodiscard]] int switches() const;
};

// Runs `iterations` iterations on the cluster's traces. Every `interval` iterations the controller
// samples the current bandwidth share of the links (what a runtime measures from its recent
// transfers), simulates every candidate on links held at that share and keeps the fastest.
[[nodiscard]] GroupingRun adaptiveGrouping(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const std::vector<GroupingCandidate>& candidates, int iterations, int interval);
// The same run with one candidate throughout (k fixed, e.g. 1F1B's k = 1), for comparison.
[[nodiscard]] GroupingRun fixedGrouping(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const GroupingCandidate& candidate, int iterations);

} // namespace ps
