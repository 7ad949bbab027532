#include "sim/memory_model.h"

#include <algorithm>

namespace ps {
namespace {

    StageMemoryPlan planFor(const std::vector<StageMemoryPlan>& plans, std::size_t stage)
    {
        return stage < plans.size() ? plans[stage] : StageMemoryPlan {};
    }

    double keptBytes(const StageCost& c, const StageMemoryPlan& p)
    {
        return std::max(0.0, c.activationBytes - p.swappedBytes - p.recomputedBytes) + p.keptInputBytes;
    }

    bool freesActivations(ActionType t)
    {
        return t == ActionType::Backward || t == ActionType::BackwardInput || t == ActionType::BackwardWeight;
    }

    // Bytes a backward-type action frees for its micro-batch: B frees everything; a split B frees
    // what W does not read; W frees the rest.
    // A split B frees what only it read but keeps the output gradients W reads until W.
    double freedBy(ActionType t, const StageCost& c, double kept)
    {
        const double wOnly = std::min(c.weightGradOnlyBytes, kept);
        if (t == ActionType::BackwardInput)
            return kept - wOnly - c.weightGradHeldBytes;
        if (t == ActionType::BackwardWeight)
            return wOnly + c.weightGradHeldBytes;
        return kept;
    }

    bool isBackwardStart(ActionType t)
    {
        return t == ActionType::Backward || t == ActionType::BackwardInput;
    }

    bool isComputeAction(ActionType t)
    {
        return t == ActionType::Forward || t == ActionType::Backward || t == ActionType::BackwardInput
            || t == ActionType::BackwardWeight || t == ActionType::OptimizerStep;
    }

    // Just after the last compute action before `index`: the swap-in then overlaps the wait for
    // the gradient (and the transfers) instead of stalling the backward that needs it.
    std::size_t prefetchPoint(const std::vector<Action>& seq, std::size_t index)
    {
        for (std::size_t i = index; i-- > 0;) {
            if (isComputeAction(seq[i].type))
                return i + 1;
        }
        return 0;
    }

} // namespace

bool hasMemoryActions(const Schedule& schedule)
{
    for (const auto& d : schedule.devices) {
        for (const auto& a : d) {
            if (a.type == ActionType::SwapOut || a.type == ActionType::SwapIn || a.type == ActionType::Recompute)
                return true;
        }
    }
    return false;
}

Schedule withMemoryActions(const Schedule& schedule, const std::vector<StageMemoryPlan>& plans)
{
    Schedule out { schedule.spec, {}, schedule.stageDevices };
    for (const auto& device : schedule.devices) {
        std::vector<Action> seq;
        for (const auto& a : device) {
            const auto p = planFor(plans, a.stage.index());
            if (isBackwardStart(a.type)) {
                if (p.swappedBytes > 0) {
                    auto at = prefetchPoint(seq, seq.size());
                    // Never before this micro-batch's own SWAP_OUT.
                    for (std::size_t i = 0; i < seq.size(); ++i) {
                        if (seq[i].type == ActionType::SwapOut && seq[i].stage == a.stage
                            && seq[i].microBatch == a.microBatch)
                            at = std::max(at, i + 1);
                    }
                    seq.insert(
                        seq.begin() + static_cast<std::ptrdiff_t>(at), { ActionType::SwapIn, a.stage, a.microBatch });
                }
                if (p.recomputedBytes > 0 || p.recomputeNs > 0)
                    seq.push_back({ ActionType::Recompute, a.stage, a.microBatch });
            }
            seq.push_back(a);
            if (a.type == ActionType::Forward && p.swappedBytes > 0)
                seq.push_back({ ActionType::SwapOut, a.stage, a.microBatch });
        }
        out.devices.push_back(std::move(seq));
    }
    return out;
}

int inFlightMicroBatches(const ScheduleSpec& spec, int stage)
{
    const int S = spec.stages;
    const int M = spec.microBatches;
    switch (spec.kind) {
    case ScheduleKind::GPipe:
        return M;
    case ScheduleKind::KFKB:
        return std::min(spec.groupSize * (S - stage), M);
    default: // 1F1B, PipeDream, ZB-H1 (W keeps only the weight-gradient inputs longer)
        return std::min(S - stage, M);
    }
}

int weightVersions(const ScheduleSpec& spec, int stage)
{
    return spec.kind == ScheduleKind::PipeDream ? std::min(spec.stages - stage, spec.microBatches) : 1;
}

std::vector<int> peakInFlightFromActions(const Schedule& schedule)
{
    std::vector<int> live(static_cast<std::size_t>(schedule.spec.stages), 0);
    std::vector<int> peak(live.size(), 0);
    for (const auto& device : schedule.devices) {
        for (const auto& a : device) {
            auto& l = live[a.stage.index()];
            if (a.type == ActionType::Forward)
                peak[a.stage.index()] = std::max(peak[a.stage.index()], ++l);
            else if (a.type == ActionType::Backward || a.type == ActionType::BackwardInput)
                --l; // after a split backward only W's inputs stay, counted in bytes not micro-batches
        }
    }
    return peak;
}

MemoryWalk walkMemory(std::vector<MemoryDelta> deltas, double base, double startNs)
{
    std::stable_sort(deltas.begin(), deltas.end(), [](const auto& a, const auto& b) {
        return a.timeNs < b.timeNs || (a.timeNs == b.timeNs && a.order < b.order);
    });
    MemoryWalk walk;
    double level = base;
    double gradients = 0;
    double messages = 0;
    walk.curve.push_back({ startNs, level });
    walk.peakBytes = level;
    walk.peakWithoutMessagesBytes = level;
    for (const auto& delta : deltas) {
        level += delta.bytes;
        gradients += delta.kind == MemoryKind::Gradients ? delta.bytes : 0;
        messages += delta.kind == MemoryKind::Messages ? delta.bytes : 0;
        walk.curve.push_back({ delta.timeNs, level });
        walk.peakWithoutMessagesBytes = std::max(walk.peakWithoutMessagesBytes, level - messages);
        if (level > walk.peakBytes) {
            walk.peakBytes = level;
            walk.gradientsAtPeak = gradients;
            walk.messagesAtPeak = messages;
        }
    }
    return walk;
}

std::vector<DeviceMemory> estimateDeviceMemory(const Schedule& schedule, const std::vector<StageCost>& stages,
    const TrainingSetup& setup, const std::vector<StageMemoryPlan>& plans)
{
    const auto perParam = bytesPerParameter(setup);
    std::vector<DeviceMemory> devices(schedule.devices.size());
    std::vector<char> splitsBackward(stages.size(), 0); // runs B and W (zero bubble)
    for (const auto& device : schedule.devices) {
        for (const auto& a : device) {
            if (a.type == ActionType::BackwardInput && a.stage.index() < stages.size())
                splitsBackward[a.stage.index()] = 1;
        }
    }
    for (std::size_t s = 0; s < stages.size(); ++s) {
        auto& d = devices[schedule.deviceOf(StageId(static_cast<std::uint32_t>(s))).index()];
        const auto params = static_cast<double>(stages[s].parameterCount);
        d.parameters += params * (perParam.weights + perParam.masterWeights);
        d.gradients += params * perParam.gradients;
        d.optimizerStates += params * perParam.optimizerStates;
        d.stashedWeights += params * perParam.weights * (weightVersions(schedule.spec, static_cast<int>(s)) - 1);
        // B's and W's own working sets are not static: the simulator counts each while it runs.
        d.workspace = std::max(d.workspace,
            splitsBackward[s] ? stages[s].splitWorkspaceBytes
                    - std::max(stages[s].inputPassExtraBytes, stages[s].weightPassExtraBytes)
                              : stages[s].workspaceBytes);
    }
    for (std::size_t dev = 0; dev < schedule.devices.size(); ++dev) {
        double live = 0;
        int liveCount = 0;
        for (const auto& a : schedule.devices[dev]) {
            const auto s = a.stage.index();
            if (s >= stages.size())
                continue;
            const double kept = keptBytes(stages[s], planFor(plans, s));
            if (a.type == ActionType::Forward) {
                live += kept;
                ++liveCount;
                devices[dev].activations = std::max(devices[dev].activations, live);
                devices[dev].peakInFlight = std::max(devices[dev].peakInFlight, liveCount);
            } else if (freesActivations(a.type)) {
                live -= freedBy(a.type, stages[s], kept);
                liveCount -= a.type == ActionType::BackwardWeight ? 0 : 1;
                devices[dev].activations = std::max(devices[dev].activations, live);
            }
        }
    }
    return devices;
}

} // namespace ps
