// Ada-Grouper's adaptive controller inside a training run (Ada-Grouper §4.4): the run measures
// its transfers (bytes and time on the link of every SEND between devices), and every `interval`
// steps the controller turns the interval's transfers into a bandwidth estimate, simulates the
// run's kFkB candidates (k in `candidates`, same cuts, micro-batches and memory actions) on links
// of that bandwidth, and picks the fastest. The run switches k at the step boundary
// (TrainingRun::setSchedule), without touching parameters. core/plan/grouping.h is the same
// controller over a bandwidth trace in the simulator; here the bandwidth comes from measurement.
// Depends on: runtime/run_prediction.h (the simulator over a run's shape); no Qt, no CUDA.
#pragma once

#include "runtime/run_prediction.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace ps::engine {

struct GroupDecision
{
    std::int64_t step = 0; // after this step
    int k = 1; // for the steps that follow
    double measuredBandwidth = 0; // bytes/s over the interval (0: nothing crossed a link)
    std::vector<std::pair<int, double>> predictedIterationNs; // per candidate k at that bandwidth
};

class GroupSizeController
{
public:
    // `shape`: the run (its schedule is the starting kFkB and its link the nominal one; the
    // controller needs no trace); `measured`: the project's measured CPU profile or null.
    // Throws ps::Error for no candidates, a k over the micro-batches, or an interval below 1.
    GroupSizeController(
        Graph graph, std::optional<Profile> measured, RunShape shape, std::vector<int> candidates, int interval);

    // The k predicted fastest at `bandwidth` bytes/s, with every candidate's simulated iteration.
    [[nodiscard]] GroupDecision choose(double bandwidth) const;
    // Feeds one step's measured events; after every `interval` steps returns the decision (its k
    // may equal the current one).
    std::optional<GroupDecision> observe(std::int64_t step, const std::vector<SimEvent>& events);
    [[nodiscard]] int k() const
    {
        return m_k;
    }
    void setK(int k)
    {
        m_k = k;
    }

private:
    Graph m_graph;
    std::optional<Profile> m_measured;
    RunShape m_shape;
    std::vector<int> m_candidates;
    int m_interval = 1;
    int m_k = 1;
    int m_seen = 0; // steps since the last decision
    double m_bytes = 0; // sent over links since the last decision
    double m_linkSeconds = 0; // their time on the links, latency excluded
};

// The k values kfkb:auto tries for M micro-batches: 1 .. min(M, 8).
[[nodiscard]] std::vector<int> autoGroupSizes(int microBatches);

} // namespace ps::engine
