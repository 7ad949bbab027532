// Ada-Grouper's adaptive controller inside a training run (Ada-Grouper §4.4): the run measures
// its transfers (bytes and time on the link of every SEND between devices); after each step the
// controller folds the step's bandwidth into a moving average, and every `interval` steps it
// simulates the run's (k, b) candidates (same cuts and memory actions; the global batch fixed, so
// M = global batch / b) on links of that bandwidth and picks the fastest. The run switches at the
// step boundary: k alone through TrainingRun::setSchedule, b (and with it M) through
// TrainingRun::setMicroBatch, parameters and optimizer state untouched. core/plan/grouping.h is
// the same controller over a bandwidth trace in the simulator; here the bandwidth is measured.
// Depends on: runtime/run_prediction.h (the simulator over a run's shape); no Qt, no CUDA.
#pragma once

#include "runtime/run_prediction.h"
#include "runtime/training_run.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ps::engine {

// kFkB with group size k over M micro-batches of b samples each.
struct GroupCandidate
{
    int k = 1;
    std::int64_t microBatch = 1; // b
    int microBatches = 1; // M

    [[nodiscard]] std::string label() const; // "k2 b4"
    bool operator==(const GroupCandidate&) const = default;
};

struct GroupDecision
{
    std::int64_t step = 0; // after this step
    GroupCandidate chosen; // for the steps that follow
    double measuredBandwidth = 0; // bytes/s, the moving average it chose at (0: nothing crossed a link yet)
    std::vector<std::pair<GroupCandidate, double>> predictedIterationNs; // per candidate at that bandwidth
};

class GroupSizeController
{
public:
    // `shape`: the run (its schedule is the starting kFkB and its link the nominal one; the
    // controller needs no trace); `measured`: the project's measured profile or null;
    // `smoothing`: the newest step's weight in the moving average of the measured bandwidth.
    // Throws ps::Error for no candidates, a candidate with k over its M or another global batch
    // than the run's, an interval below 1 or a smoothing outside (0, 1].
    GroupSizeController(Graph graph, std::optional<Profile> measured, RunShape shape,
        std::vector<GroupCandidate> candidates, int interval, double smoothing = 0.5);

    // The candidate predicted fastest at `bandwidth` bytes/s, with every candidate's simulated
    // iteration.
    [[nodiscard]] GroupDecision choose(double bandwidth) const;
    // Feeds one step's measured events; after every `interval` steps returns the decision (its
    // candidate may be the current one).
    std::optional<GroupDecision> observe(std::int64_t step, const std::vector<SimEvent>& events);
    [[nodiscard]] const GroupCandidate& current() const
    {
        return m_current;
    }
    void setCurrent(const GroupCandidate& candidate)
    {
        m_current = candidate;
    }
    [[nodiscard]] double bandwidthEstimate() const
    {
        return m_estimate;
    }

private:
    Graph m_graph;
    std::optional<Profile> m_measured;
    RunShape m_shape;
    std::vector<GroupCandidate> m_candidates;
    int m_interval = 1;
    double m_smoothing = 0.5;
    GroupCandidate m_current;
    int m_seen = 0; // steps since the last decision
    double m_estimate = 0; // moving average of the steps' measured bandwidth (0: none yet)
};

// The candidates kfkb:auto tries for a run of `shape` (its samples per step G = M x b fixed). With
// a device memory cap and a zoo model (rebuilt at any micro-batch size), Ada-Grouper's memory-limit
// curve (§3.2): for each k in 1..8, the largest b dividing G with M = G / b >= k whose run is
// predicted to fit every device. Otherwise (no cap, an imported model traced at one size, a model
// with batch norm, whose statistics a new b would restart, or nothing fits) the run's b and M with
// k = 1..min(M, 8).
[[nodiscard]] std::vector<GroupCandidate> autoGroupCandidates(
    const Graph& graph, const Profile* measured, const RunShape& shape);

// Runs `candidate` from the run's next step on: k alone through TrainingRun::setSchedule, b (with M)
// on the model rebuilt at that micro-batch size (buildAtMicroBatch) through setMicroBatch.
void applyGroupCandidate(TrainingRun& run, const GroupCandidate& candidate);

// What one step's observation did: the controller's decision and the candidate the run had before.
struct GroupAdaptation
{
    GroupDecision decision;
    GroupCandidate before;
    [[nodiscard]] bool switched() const
    {
        return decision.chosen != before;
    }
};

// The controller observes step `r`'s measured events; where it decides another candidate than the
// run's, the run switches to it at this step boundary. nullopt between decisions.
std::optional<GroupAdaptation> adaptAfterStep(
    GroupSizeController& controller, TrainingRun& run, const RunStepResult& r);

} // namespace ps::engine
