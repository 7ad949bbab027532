// Event-driven simulation of one training iteration: the schedule's action lists executed over
// a cluster. Each device has a compute stream and copy streams (to and from host, for swap);
// transfers between stages occupy a directed channel (contention: FIFO per channel) with the
// link's bandwidth, latency and optional bandwidth trace. Sends are asynchronous, receives block
// (Ada-Grouper §5.3). Stage costs with per-stage sends (a dataflow partition, FTPipe §4) send
// to every consumer stage directly over the link between their devices (free on one device),
// and a receive waits for every producer stage. Output: events, memory over time, iteration
// time, bubble fraction, throughput, peak memory and an OOM flag per device.
// Depends on: cluster/, plan/partition.h, schedule/, sim/memory_model.h.
#pragma once

#include "cluster/cluster.h"
#include "sim/memory_model.h"

#include <string>
#include <vector>

namespace ps {

enum class Stream { Compute, CopyToHost, CopyFromHost, Send };

struct SimEvent
{
    DeviceId device;
    Stream stream = Stream::Compute;
    ActionType action = ActionType::Forward;
    StageId stage;
    MicroBatchId microBatch;
    double startNs = 0;
    double endNs = 0;
    double bytes = 0; // transferred bytes for Send and copy events
    DeviceId peer {}; // Send events: the receiving device
};

struct DeviceSimResult
{
    double busyNs = 0; // compute stream busy time
    double peakBytes = 0;
    // With SimulationOptions::timedPeak: the peak with each message from its simulated arrival, what
    // this timing gives (peakBytes, with messagesAtEarliest, is the most any timing gives).
    double timedPeakBytes = 0;
    // The most bytes held at once for anything but messages received and not yet taken in (a
    // maximum of its own, maybe at another moment than peakBytes'): what does not depend on how
    // far senders run ahead of this device.
    double peakWithoutMessagesBytes = 0;
    double capacityBytes = 0;
    bool outOfMemory = false;
    DeviceMemory memory; // breakdown at the peak (static parts + peak activations)
    std::vector<MemoryPoint> memoryCurve;
};

struct SimulationOptions
{
    bool optimizerStep = true; // include OPT_STEP time
    bool communication = true; // false: transfers take no time (analysis of pure compute balance)
    // Where on the cluster's bandwidth traces the iteration starts (an iteration later in a run).
    double traceOffsetSeconds = 0;
    // true: a message counts at its receiver from the earliest moment any durations let it arrive
    // (the engine's channels copy onto the receiver as the sender sends, so how many wait depends
    // on how far senders run ahead; the peak is the most any timing gives). false: from its
    // simulated arrival (runtimes that receive at the schedule's step, as Megatron-LM's batched
    // isend/irecv does).
    bool messagesAtEarliest = true;
    bool timedPeak = false; // also DeviceSimResult::timedPeakBytes (a second walk of the memory)
};

struct SimulationResult
{
    std::string scheduleName;
    int stages = 0;
    int microBatches = 0;
    double microBatchSize = 0;
    double iterationNs = 0; // first action start to last action end
    double steadyIterationNs = 0; // async schedules: time per M micro-batches in steady state
    double bubbleFraction = 0; // mean idle share of the compute streams over the iteration
    double samplesPerSecond = 0;
    bool anyOutOfMemory = false;
    std::vector<DeviceSimResult> devices;
    std::vector<SimEvent> events;
};

struct SimulationInput
{
    const Schedule& schedule; // compute-only or lowered; lowered here if needed
    const std::vector<StageCost>& stages;
    const Cluster& cluster;
    TrainingSetup setup;
    double microBatchSize = 1;
    std::vector<StageMemoryPlan> memoryPlans; // per stage; empty: keep every activation
    SimulationOptions options;
};

// Throws ps::Error when the schedule deadlocks or does not fit the cluster (more devices than
// the cluster has), naming the device and action.
[[nodiscard]] SimulationResult simulate(const SimulationInput& input);

// Chrome trace JSON (chrome://tracing, Perfetto): one process per device, one thread per stream.
[[nodiscard]] std::string toChromeTrace(const SimulationResult& result);
// Metrics (no events) as JSON, for the CLI and the project store.
[[nodiscard]] std::string simulationSummaryJson(const SimulationResult& result);

[[nodiscard]] std::string_view toString(Stream stream);

} // namespace ps
