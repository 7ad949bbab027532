// The memory side of a stage: its peak under a memory plan (in-flight micro-batches, the messages
// the schedule lets wait beside them, swap and recompute buffers) and the swap/recompute policy
// that makes a stage fit (DawnPiper §4.3).
#include "plan/stage_model.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

namespace ps {
namespace {

    constexpr double kImpossible = std::numeric_limits<double>::infinity();

    // `saved` by descending key, and the keys in that order. Each key is computed once; sorting
    // indices by the keys makes std::sort's comparisons, and so its order, those of sorting the
    // storages with the key computed in the comparison.
    template <typename Key>
    std::pair<std::vector<SavedTensorInfo>, std::vector<double>> byDescendingKey(
        const std::vector<SavedTensorInfo>& saved, const Key& keyOf)
    {
        std::vector<double> key(saved.size());
        for (std::size_t i = 0; i < saved.size(); ++i)
            key[i] = keyOf(saved[i]);
        std::vector<std::size_t> order(saved.size());
        std::iota(order.begin(), order.end(), std::size_t { 0 });
        std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key[a] > key[b]; });
        std::pair<std::vector<SavedTensorInfo>, std::vector<double>> out;
        out.first.reserve(saved.size());
        out.second.reserve(saved.size());
        for (const auto i : order) {
            out.first.push_back(saved[i]);
            out.second.push_back(key[i]);
        }
        return out;
    }

    // A storage the memory policy may swap or recompute: its index, which, what it costs and saves.
    struct PolicyChoice
    {
        std::size_t index;
        bool swap;
        double cost;
        double saving;
    };

} // namespace

double StageModel::peakUnder(const StageEvaluation& e, int stage, const StageMemoryPlan& p) const
{
    const double kept = std::max(0.0, e.cost.activationBytes - p.swappedBytes - p.recomputedBytes) + p.keptInputBytes;
    // After a split backward's B a micro-batch keeps what its W reads until W ends (the simulator's
    // weight-gradient inputs and the output gradients held for W).
    const double forW = std::min(e.cost.weightGradOnlyBytes, e.cost.activationBytes) + e.cost.weightGradHeldBytes;
    double held = 0;
    if (m_directSends) {
        held = m_stageInFlight.at(static_cast<std::size_t>(stage)) * kept;
    } else {
        for (const auto& w : m_waitPoints.at(static_cast<std::size_t>(stage)))
            held = std::max(held,
                w.inFlight * kept + w.forwardMessages * e.receivedForwardBytes
                    + w.backwardMessages * e.receivedBackwardBytes + w.weightPending * forW);
    }
    return e.staticBytes + held + 2 * p.swappedBytes + p.recomputedBytes;
}

// Capuchin's policy as DawnPiper uses it (§4.3): swap while transfers hide behind compute, then
// take swap or recompute by smaller overhead, best memory saving per second first, until the
// stage fits. O(n log n) in the number of saved storages. Because a swapped byte saves less at
// the peak than a recomputed one (one copy is in transit and one is being prefetched), the
// recompute-only policy is tried as well and the cheaper plan that fits is kept.
void StageModel::optimizeMemory(std::size_t begin, std::size_t end, int stage, StageEvaluation& e) const
{
    const auto candidates = savedTensors(begin, end);
    StageEvaluation best = e;
    bool haveBest = false;
    const auto keepBetter = [&](const StageEvaluation& trial) {
        const bool better = !haveBest || (trial.fits && !best.fits)
            || (trial.fits == best.fits
                && (trial.fits ? trial.overheadNs < best.overheadNs : trial.overBytes < best.overBytes));
        if (better) {
            best = trial;
            haveBest = true;
        }
        return trial.fits;
    };
    for (const bool useSwap : { true, false }) {
        if ((useSwap && !m_limits.allowSwap) || (!useSwap && !m_limits.allowRecompute))
            continue;
        // The stage inputs a recompute reaches are kept with every micro-batch in flight
        // (accountRecompute): where they push the plan over, the policy aims that much lower and
        // runs again, until it fits, it runs out of choices, or after a few aims; then once more
        // with every choice taken (aim 0), so that a stage fits whenever its whole recompute does.
        double target = m_capacity;
        for (int round = 0; round < 5; ++round) {
            StageEvaluation trial = e;
            applyPolicy(candidates, stage, useSwap, target, trial);
            const bool reached = trial.peakBytes <= target; // else it ran out of choices: aiming lower cannot help
            accountRecompute(begin, end, stage, trial);
            const bool fits = keepBetter(trial);
            if (fits || !reached || trial.memoryPlan.keptInputBytes <= 0)
                break;
            target = round < 3 ? std::max(0.0, target - trial.overBytes) : 0.0;
        }
    }
    if (haveBest) {
        e = best;
    } else {
        e.overBytes = e.peakBytes - m_capacity;
    }
}

void StageModel::applyPolicy(
    const std::vector<SavedTensorInfo>& saved, int stage, bool useSwap, double target, StageEvaluation& e) const
{
    const int inFlight = inFlightMicroBatches(m_schedule, stage);
    const double period = e.cost.forwardNs + e.cost.backwardNs; // one micro-batch per period in steady state
    // In the warm-up forwards run back to back, so a swap-out only frees memory before the peak if
    // the copy stream keeps up with the forwards: the hidden budget is one forward per micro-batch.
    const double swapBudget = e.cost.forwardNs;
    const double gap = (inFlight - 1) * period; // other micro-batches run between a F and its B
    const double hostBandwidth = m_cluster.device.hostLink.bandwidth;
    const bool swapAllowed = useSwap && m_limits.allowSwap && inFlight > 2;
    const auto freeTime = [&](const SavedTensorInfo& s) {
        const double swap = 1e9 * s.bytes / hostBandwidth;
        return s.backwardUseNs + gap - s.forwardEndNs - 2 * swap;
    };
    const auto ordered = byDescendingKey(saved, freeTime);
    const auto& candidates = ordered.first;
    const auto& free = ordered.second; // free[i]: candidates[i]'s free time
    StageMemoryPlan plan;
    double overhead = 0;
    double streamBusy = 0; // copy-stream time per micro-batch already used
    const auto peak = [&] { return peakUnder(e, stage, plan); };
    std::vector<bool> used(candidates.size(), false);
    for (std::size_t i = 0; i < candidates.size() && peak() > target && swapAllowed; ++i) {
        const double swap = 1e9 * candidates[i].bytes / hostBandwidth;
        if (free[i] < 0 || streamBusy + swap > swapBudget)
            continue;
        plan.swappedBytes += candidates[i].bytes;
        plan.swappedTensors.push_back(candidates[i].root);
        streamBusy += swap;
        used[i] = true;
    }
    // What remains: the cheaper of a stalled swap and a recompute, most bytes saved per second first.
    std::vector<PolicyChoice> choices;
    for (std::size_t i = 0; i < candidates.size(); ++i) {
        if (used[i])
            continue;
        const auto& s = candidates[i];
        // A swap past the copy budget would not free memory before the peak: not a candidate.
        const bool swapFits = streamBusy + 1e9 * s.bytes / hostBandwidth <= swapBudget;
        const double swapCost = swapAllowed && swapFits ? std::max(0.0, -free[i]) : kImpossible;
        const double recomputeCost = m_limits.allowRecompute ? s.recomputeNs : kImpossible;
        const bool swap = swapCost <= recomputeCost;
        const double cost = std::min(swapCost, recomputeCost);
        const double saving = s.bytes * (swap ? inFlight - 2 : inFlight - 1);
        if (std::isfinite(cost) && saving > 0)
            choices.push_back({ i, swap, cost, saving });
    }
    std::sort(choices.begin(), choices.end(), [](const PolicyChoice& a, const PolicyChoice& b) {
        return a.saving * b.cost > b.saving * a.cost; // saving/cost descending without dividing by 0
    });
    for (const auto& ch : choices) {
        if (peak() <= target)
            break;
        const auto& s = candidates[ch.index];
        if (ch.swap && streamBusy + 1e9 * s.bytes / hostBandwidth > swapBudget)
            continue; // earlier choices used up the copy budget
        if (ch.swap) {
            plan.swappedBytes += s.bytes;
            plan.swappedTensors.push_back(s.root);
            streamBusy += 1e9 * s.bytes / hostBandwidth;
        } else {
            plan.recomputedBytes += s.bytes;
            plan.recomputedTensors.push_back(s.root);
            plan.recomputeNs += s.recomputeNs;
        }
        overhead += ch.cost;
    }
    e.memoryPlan = plan;
    e.overheadNs = overhead;
    e.timeNs = period + overhead;
    e.peakBytes = peak();
    e.fits = e.peakBytes <= m_capacity;
    e.overBytes = e.fits ? 0 : e.peakBytes - m_capacity;
}

} // namespace ps
