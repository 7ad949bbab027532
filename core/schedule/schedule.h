// Pipeline schedules as data: per device an ordered list of actions. The same lists drive the
// simulator and the engine, and round-trip through PyTorch pipelining's schedule CSV.
//
// Generators: GPipe, 1F1B (DAPPLE / PipeDream-flush), interleaved 1F1B (Megatron, v chunks per
// device), kFkB (Ada-Grouper §3.2: k copies of 1F1B cross-merged; k=1 is 1F1B, k=M is GPipe),
// PipeDream async 1F1B with weight stashing, zero-bubble ZB-H1 (B split into input-gradient B
// and weight-gradient W), and FTPipe's asynchronous schedule (ATC'21 §4.2: a stage of depth d
// runs d + 1 forwards, then alternates backward and forward, updating its one weight version
// every A micro-batches). Depends on: ids.h only.
#pragma once

#include "ids.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class ActionType {
    Forward, // F
    Backward, // full backward (B)
    BackwardInput, // input gradient only (zero-bubble B; PyTorch "I")
    BackwardWeight, // weight gradient (zero-bubble W)
    SendForward, // SEND_F: activations to the next stage
    RecvForward, // RECV_F
    SendBackward, // SEND_B: gradients to the previous stage
    RecvBackward, // RECV_B
    SwapOut, // SWAP_OUT: saved activations to host memory after F
    SwapIn, // SWAP_IN: back before B
    Recompute, // RECOMPUTE: rerun the dropped part of F before B
    OptimizerStep, // OPT_STEP
};

struct Action
{
    ActionType type = ActionType::Forward;
    StageId stage;
    MicroBatchId microBatch; // invalid for OPT_STEP of a synchronous schedule

    bool operator==(const Action&) const = default;
};

enum class ScheduleKind { GPipe, OneFOneB, Interleaved, KFKB, PipeDream, ZeroBubbleH1, FTPipeAsync, Custom };

struct ScheduleSpec
{
    ScheduleKind kind = ScheduleKind::OneFOneB;
    int stages = 1; // model stages (chunks); devices = stages / virtualStages
    int microBatches = 1; // M
    int groupSize = 1; // kFkB k; ftpipe-async: micro-batches per optimizer step (A)
    int virtualStages = 1; // interleaved v: stages per device

    [[nodiscard]] int devices() const
    {
        return kind == ScheduleKind::Interleaved ? stages / virtualStages : stages;
    }
    bool operator==(const ScheduleSpec&) const = default;
};

struct Schedule
{
    ScheduleSpec spec;
    std::vector<std::vector<Action>> devices; // per device, in execution order
    // The device of every stage; empty: stage % devices (one stage per device, or interleaved's
    // round robin). FTPipe's Mixed-pipe places non-adjacent stages on one device.
    std::vector<DeviceId> stageDevices;

    [[nodiscard]] DeviceId deviceOf(StageId stage) const
    {
        if (!stageDevices.empty())
            return stageDevices[stage.index()];
        return DeviceId(stage.value % static_cast<std::uint32_t>(devices.size()));
    }
    [[nodiscard]] bool splitBackward() const; // has BackwardInput/BackwardWeight
    // Weights change within the iteration, without a flush: PipeDream (stashed versions) and
    // FTPipe (one version; its non-last stages recompute inside B from their border inputs).
    [[nodiscard]] bool asyncWeights() const
    {
        return spec.kind == ScheduleKind::PipeDream || spec.kind == ScheduleKind::FTPipeAsync;
    }
    [[nodiscard]] std::size_t actionCount() const;
};

// "gpipe", "1f1b", "kfkb:2", "interleaved:2", "zb-h1", "pipedream", "ftpipe-async[:A]" (A:
// micro-batches per optimizer step, default all of them); throws listing the forms.
[[nodiscard]] ScheduleSpec parseScheduleSpec(std::string_view text, int stages, int microBatches);
[[nodiscard]] std::string scheduleName(const ScheduleSpec& spec);

// The compute actions (F, B or B/W, and OPT_STEP) of every device. Throws ps::Error for
// impossible parameters (k > M, M not divisible by the devices for interleaved, ...).
[[nodiscard]] Schedule generateSchedule(const ScheduleSpec& spec);
// Places the stages of a one-stage-per-device schedule on devices by `stageDevices` (one entry
// per stage, every device in 0..D-1 used): each device's list merges its stages' lists in an order
// the dependencies allow (a forward after the previous stage's, a backward after the next stage's),
// backward first when both are ready. Throws ps::Error for a map of the wrong size or an unused device.
[[nodiscard]] Schedule placeStages(const Schedule& perStage, const std::vector<DeviceId>& stageDevices);
// What placing the stages of a dataflow partition (FTPipe's Mixed-pipe) needs to know: which
// stages a stage's forward waits for, which its backward waits for, and how long each takes.
struct StageFlow
{
    std::vector<std::vector<StageId>> producers; // by stage: a forward waits for their forwards
    std::vector<std::vector<StageId>> consumers; // by stage: a backward waits for their backwards
    std::vector<double> forwardNs, backwardNs; // by stage, one micro-batch (B with its recompute)
};
// placeStages for a dataflow partition: each device's order is a greedy list schedule over the
// stages' real dependencies and times; the action that can start first runs first (ties:
// backward, then the lower stage), each stage keeping its own list's order. FTPipe runs a stage
// "when its inputs are made available" (§4.1); this is that rule, frozen into action lists.
[[nodiscard]] Schedule placeStages(
    const Schedule& perStage, const std::vector<DeviceId>& stageDevices, const StageFlow& flow);
// Adds SEND/RECV around the compute actions (lowering, as PyTorch's _add_send_recv).
[[nodiscard]] Schedule withCommunication(const Schedule& schedule);
// Has SEND/RECV actions (lowered).
[[nodiscard]] bool hasCommunication(const Schedule& schedule);

[[nodiscard]] std::string_view actionCode(ActionType type); // "F", "I", "SEND_F", ...
[[nodiscard]] std::string formatAction(const Action& action); // "1F3"
[[nodiscard]] std::optional<Action> parseAction(std::string_view text);

} // namespace ps
