// Internal to the planner: the search helpers and baseline partitioners DawnPiper and the
// public entry points share (plan/planner.h is the API).
#pragma once

#include "plan/planner.h"

#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace ps::detail {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Thrown inside a search when its cancel flag is set; findPlan turns it into "cancelled".
struct Cancelled
{
};

class Search
{
public:
    Search(const StageModel& model, const PlannerOptions& options)
        : m_model(model)
        , m_options(options)
    {
    }
    void checkCancel() const
    {
        if (m_options.cancel && m_options.cancel->load(std::memory_order_relaxed))
            throw Cancelled {};
    }
    void report(double fraction) const
    {
        if (m_options.progress)
            m_options.progress(fraction);
    }
    const StageModel& m_model;
    const PlannerOptions& m_options;
};

// Sum of bytes over capacity (0 when every stage fits) and the slowest stage, compared in that order.
struct Score
{
    double overBytes;
    double slowestNs;
    double slowestComputeNs = 0; // the slowest stage's time without the transfers it waits on
    bool operator<(const Score& o) const
    {
        return overBytes != o.overBytes ? overBytes < o.overBytes : slowestNs < o.slowestNs;
    }
};

// Each stage's time plus the boundary transfer its schedule waits on (exposedTransferNs, the larger
// of the stage's two boundaries).
Score scoreOf(const StageModel& m, const std::vector<std::size_t>& starts);
// Per micro-batch, how long a synchronous pipeline waits on the transfers across the cut before
// node `cut` (stage `stage` on its left): 1F1B's steady state (interleaved's, ZB-H1's) sends a
// micro-batch's activations and receives its gradient between a stage's forward and its backward,
// so each cycle grows by the round trip; kFkB overlaps it with the rest of a group of k (one round
// trip per group); GPipe, PipeDream and FTPipe's asynchronous pipeline keep other micro-batches'
// compute behind the transfers (0). Nominal link bandwidth, no traces.
double exposedTransferNs(const StageModel& m, std::size_t cut, int stage);
// The round trips per micro-batch exposedTransferNs charges under `spec` (1, 1/k, or 0).
double transferWaitShare(const ScheduleSpec& spec);
// Each cut moved to the cut that sends the fewest bytes both ways (activations and their gradient)
// within `window` nodes either side (ties: the nearest), left to right, keeping every stage
// non-empty (a window that overlaps the previous moved cut is clipped to after it).
std::vector<std::size_t> narrowWaistCuts(
    const StageModel& m, const std::vector<std::size_t>& starts, std::size_t window);
// Hill-climbs over moves of one cut or of a run of neighbouring cuts by up to `reach` nodes.
std::vector<std::size_t> refineBoundaries(const Search& search, std::vector<std::size_t> starts, std::size_t reach);
std::vector<std::size_t> greedyBisection(const Search& search);
std::vector<std::size_t> pipeDreamCuts(const Search& search, bool memoryChecked);
std::vector<std::size_t> equalLayerCuts(const StageModel& m);
std::vector<std::size_t> memoryBalancedStarts(const StageModel& m, std::size_t b, std::size_t e, int first, int last);
// A greedy fill of nodes [b, e) into stages first..last under a per-device peak `target`: whether
// the last stage fits it, and the stage starts.
using MemoryFill = std::function<std::pair<bool, std::vector<std::size_t>>(double target)>;
// The starts `fill` gives at the smallest target it fits, bisected (50 steps) between 0 and the
// largest peak of all of [b, e) on one stage.
std::vector<std::size_t> smallestFittingFill(
    const StageModel& m, std::size_t b, std::size_t e, int first, int last, const MemoryFill& fill);
std::vector<std::size_t> memoryBalancedCuts(const StageModel& m);
std::vector<std::size_t> exhaustiveStarts(const Search& search);
std::vector<double> nodeComputeTimes(const StageModel& m);

} // namespace ps::detail
