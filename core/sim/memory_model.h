// Per-device memory under a schedule: parameters, gradients, optimizer states, stashed weight
// versions (PipeDream), activations of the micro-batches in flight, and workspace; with the
// reductions swap and recompute decisions buy.
//
// In-flight counts follow the schedules (Ada-Grouper §3.2, DawnPiper §B.1): GPipe holds M,
// 1F1B min(S-s, M), kFkB min(k(S-s), M); PipeDream stashes min(S-s, M) weight versions.
// The exact count is read off the action list, so any imported schedule is modelled too.
// Depends on: plan/partition.h, schedule/, cost/training_setup.h.
#pragma once

#include "cost/training_setup.h"
#include "plan/partition.h"
#include "schedule/schedule.h"

#include <cstdint>
#include <vector>

namespace ps {

// What the memory optimizer decided for one stage, per micro-batch.
struct StageMemoryPlan
{
    double swappedBytes = 0; // saved activations moved to host after F and back before B
    double recomputedBytes = 0; // saved activations dropped after F and recomputed before B
    double recomputeNs = 0; // forward time of the recomputed part
    // Which saved storages (their root tensors) the bytes above are: what the engine swaps and
    // drops. Empty with non-zero bytes for plans stored before the tensors were recorded.
    std::vector<TensorId> swappedTensors;
    std::vector<TensorId> recomputedTensors;
    // Stage inputs from other stages the recompute reads that no node of the stage saves (so not
    // in activationBytes): kept from F to B besides what the stage saves, one micro-batch.
    double keptInputBytes = 0;
};

struct DeviceMemory
{
    double parameters = 0; // weights the kernels read (+ fp32 master weights)
    // estimateDeviceMemory: every parameter's gradient, and the schedule's peak of in-flight
    // activations (an upper bound). A simulation's breakdown holds both at the device's peak
    // instead: gradients exist from a stage's first weight-gradient pass to its OPT_STEP.
    double gradients = 0;
    double optimizerStates = 0;
    double stashedWeights = 0; // older weight versions (PipeDream)
    double activations = 0;
    double workspace = 0;
    double messages = 0; // a simulation's breakdown: boundary tensors received and not yet taken in
    int peakInFlight = 0; // most micro-batches between F and B at once (summed over the device's stages)

    [[nodiscard]] double staticBytes() const
    {
        return parameters + gradients + optimizerStates + stashedWeights + workspace;
    }
    [[nodiscard]] double total() const
    {
        return staticBytes() + activations + messages;
    }
};

struct MemoryPoint
{
    double timeNs = 0;
    double bytes = 0; // allocated on the device from this time on
};

// A change of a device's memory in a simulation and what it is for (swaps count as activations).
enum class MemoryKind : std::uint8_t { Activations, Gradients, Messages };
struct MemoryDelta
{
    double timeNs;
    double bytes;
    MemoryKind kind;
    // Among changes at one time, lower first (the simulator: 2i + 1 for action i's own changes,
    // 2i for a message that can arrive before action i starts).
    std::uint64_t order = 0;
};

// A device's memory over time: `base` bytes from `startNs`, then the deltas in time order (a
// stable sort by time, then `order`: changes at one time and order apply in the order made). Its
// peak, with the gradients and messages held then.
struct MemoryWalk
{
    std::vector<MemoryPoint> curve;
    double peakBytes = 0;
    double gradientsAtPeak = 0;
    double messagesAtPeak = 0;
    double peakWithoutMessagesBytes = 0; // the highest level of everything but messages
};
[[nodiscard]] MemoryWalk walkMemory(std::vector<MemoryDelta> deltas, double base, double startNs);

// Inserts the memory-optimization actions a plan needs: SWAP_OUT right after a stage's F,
// SWAP_IN one compute action before its B (so the copy overlaps compute), RECOMPUTE right
// before its B. Stages whose plan is empty are left as they are.
[[nodiscard]] Schedule withMemoryActions(const Schedule& schedule, const std::vector<StageMemoryPlan>& plans);
[[nodiscard]] bool hasMemoryActions(const Schedule& schedule);

// The closed-form in-flight count of stage `stage` (0-based) for generated schedules.
[[nodiscard]] int inFlightMicroBatches(const ScheduleSpec& spec, int stage);
// Weight versions stage `stage` keeps: 1, or min(S - s, M) under PipeDream's weight stashing.
[[nodiscard]] int weightVersions(const ScheduleSpec& spec, int stage);
// Peak number of micro-batches whose forward ran and whose (input-gradient) backward has not, per
// stage, read off the action list.
[[nodiscard]] std::vector<int> peakInFlightFromActions(const Schedule& schedule);

// Memory of every device: static parts from the stages it hosts, activations from walking its
// action list with each stage's kept bytes (activation bytes minus swapped and recomputed).
[[nodiscard]] std::vector<DeviceMemory> estimateDeviceMemory(const Schedule& schedule,
    const std::vector<StageCost>& stages, const TrainingSetup& setup, const std::vector<StageMemoryPlan>& plans = {});

} // namespace ps
