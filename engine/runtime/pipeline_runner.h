// The schedule runner: one worker thread per device executes that device's action list from core's
// Schedule exactly as the simulator reads it (F, B, I/W, SEND/RECV, SWAP_OUT/SWAP_IN, RECOMPUTE,
// OPT_STEP), over stage executors holding the plan's node ranges, with in-process channels between
// stages and, on a device whose stages swap, two copy streams beside the worker. Every action's
// start and end is recorded in the simulator's event format, so a measured iteration lines up
// with a predicted one action by action. Between devices, channels may emulate a link's bandwidth,
// latency and bandwidth trace (runtime/emulated_link.h).
//
// Synchronous schedules (GPipe, 1F1B, kFkB, interleaved, ZB-H1) accumulate gradients over the
// M micro-batches and update once at OPT_STEP (gradient scale 1/M), which reproduces single-device
// training with gradient accumulation. Tied parameters held by several stages get the sum of
// their gradients before the update, so their copies stay equal. PipeDream updates a stage after
// each of its backwards, with weight stashing (an update writes a new version; the in-flight
// micro-batches keep the one their forward read); tied copies there update independently.
// Depends on: runtime/stage_executor.h, runtime/channel.h, core (Schedule, Partition, SimEvent).
#pragma once

#include "cpu/gemm_team.h"
#include "plan/partition.h"
#include "runtime/action_tracer.h"
#include "runtime/channel.h"
#include "runtime/stage_executor.h"
#include "schedule/schedule.h"
#include "sim/simulator.h"

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ps::engine {

class TiedGradients;

// A device the runtime runs stages on: its backend, its memory (capacity enforced by the
// allocator) and, for CPU devices, the cores its worker is confined to (its GEMMs are split across
// a team of one thread per core; its elementwise kernels run on the worker).
struct RuntimeDevice
{
    std::string name; // "cpu:0"
    const Backend* backend = nullptr;
    std::unique_ptr<Allocator> memory;
    std::vector<int> cores; // empty: not pinned
};

// What to run: the stages' node ranges, the schedule's compute (and memory) actions per device with
// its stage -> device map, and each stage's memory plan (which storages it swaps or recomputes).
struct PipelineSpec
{
    Partition partition;
    Schedule schedule;
    std::vector<StageMemoryPlan> memory; // per stage; empty: keep everything
};

struct RunnerOptions
{
    std::uint64_t seed = 0; // dropout masks
    StageOptimizerConfig optimizer;
    bool recordEvents = true;
    LinkEmulation link; // between every two devices, one per direction; off: memory speed
    // PatrickStar chunks: the first iteration is the warm-up (every chunk on the host, §8.1);
    // after it each device's margin takes chunks home to the device (§8.2).
    ChunkOptions chunks;
    GemmPrecision gemm = GemmPrecision::Fp32; // where the backend has the choice (CUDA)
    // Times each action on the device (a GPU's kernel trace); not owned. Without one, the worker
    // waits for its device after every action and the host clock times it.
    ActionTracer* tracer = nullptr;
};

struct IterationResult
{
    double loss = 0; // mean over the micro-batches
    std::vector<double> microBatchLosses;
    double seconds = 0;
    std::vector<SimEvent> events; // times from the iteration's start
    std::vector<std::int64_t> devicePeakBytes;
    std::vector<MemoryByUse> devicePeakByUse; // what the peak bytes were for
    std::vector<std::int64_t> devicePeakWithoutMessages; // Allocator::peakWithoutMessages
    std::vector<double> deviceBusyNs; // compute actions only
    std::int64_t transferredBytes = 0;
    std::vector<ChunkStats> deviceChunks; // per device, with chunks: placement and this iteration's moves
    std::int64_t tracedActions = 0; // events timed by the options' tracer (the rest: the host clock)
};

class PipelineRunner
{
public:
    // Throws ps::Error naming the stage or device for a spec that cannot run (a partition that does
    // not match the graph, a schedule with more devices than given, a node without a kernel).
    PipelineRunner(const Graph& graph, PipelineSpec spec, std::vector<RuntimeDevice>& devices, RunnerOptions options);
    ~PipelineRunner();
    PipelineRunner(const PipelineRunner&) = delete;
    PipelineRunner& operator=(const PipelineRunner&) = delete;

    // Parameter values (fp32 bytes by tensor id) for every stage holding the parameter.
    void setParameter(TensorId id, std::span<const std::byte> bytes);
    // A parameter's value from the first stage holding it.
    [[nodiscard]] std::vector<std::byte> parameterBytes(TensorId id) const;
    [[nodiscard]] std::vector<TensorId> parameterIds() const;
    [[nodiscard]] std::vector<std::vector<std::byte>> optimizerState(TensorId id) const;
    void setOptimizerState(TensorId id, const std::vector<std::vector<std::byte>>& state, int steps);

    // One pass over every device's action list: `batches` holds the M micro-batches' data.
    // Throws ps::Error naming device, stage and action when a worker fails (out of memory, ...).
    // `timed` false: nobody wants this iteration's timeline, so GPU workers neither wait for their
    // device after each action nor trace it (the iteration runs as fast as it can, and its time
    // still ends when every device is done); the result then has no busy times and no events
    // except sends over an emulated link (their times are the link's) and swaps (their copy
    // streams time them).
    IterationResult run(const std::vector<HostBatch>& batches, double lr, std::int64_t iteration, bool timed = true);

    [[nodiscard]] const Schedule& schedule() const
    {
        return m_schedule;
    }
    // Runs `schedule` from the next iteration on (Ada-Grouper switches k this way): the same
    // stages on the same devices and the same micro-batches in another order, so parameters,
    // optimizer state and channels stay. Throws ps::Error naming what differs otherwise.
    void setSchedule(const Schedule& schedule);
    [[nodiscard]] const std::vector<std::unique_ptr<StageExecutor>>& stages() const
    {
        return m_stages;
    }

private:
    void runDevice(std::size_t device, const std::vector<HostBatch>& batches, double lr, IterationResult& result);
    void makeStages();
    void makeChannels();
    void makeCopyStreams();
    void runWorkers(const std::vector<HostBatch>& batches, double lr, IterationResult& result,
        std::vector<std::exception_ptr>& errors, std::vector<std::vector<SimEvent>>& events);
    static void rethrowFirstCause(const std::vector<std::exception_ptr>& errors);
    // Waits for the device's queued copies and adds them to its events.
    void finishCopies(std::size_t device, IterationResult& result);
    // Waits for every device's queued work; a failure that surfaces only now names the device.
    void synchronizeAll();
    // With a tracer: waits for every device, then gives the actions' events the tracer's spans.
    void applyTracedSpans(IterationResult& result, std::vector<std::vector<SimEvent>>& events);
    struct ActionOutcome
    {
        std::int64_t bytes = 0; // sent
        std::optional<EmulatedLink::Transfer> transfer; // a send's time on an emulated link
    };
    ActionOutcome runAction(
        std::size_t device, const Action& a, const std::vector<HostBatch>& batches, double lr, IterationResult& result);
    [[nodiscard]] Channel& channel(StageId from, StageId to);
    // `s` with its SEND/RECV actions (as it is when it has them already).
    [[nodiscard]] static Schedule withChannels(const Schedule& s);
    void setChunkActions();
    // §8.2 after the warm-up iteration: per device, chunks go home to the device while the
    // margin over the measured peak non-model bytes has room; the rest caches uploads.
    void placeChunks();
    [[nodiscard]] std::vector<ChunkStats> chunkCounts();

    const Graph& m_graph;
    PipelineSpec m_spec;
    Schedule m_schedule; // lowered: with SEND/RECV
    std::vector<RuntimeDevice>& m_devices;
    RunnerOptions m_options;
    Allocator m_hostPool; // the first device's backend's host staging memory (pinned for a GPU)
    // Per device, when a stage swaps: the copy streams (a swap-in may wait on the swap-out stream,
    // so the swap-in streams are destroyed first).
    // Per device: another device of the run shares its GPU (cuda:GxK), hence its stream, which runs
    // work in launch order: a worker far ahead would queue its later actions before the other
    // device's critical path, so these wait after each action, timed or not (on an H100, 1F1B on
    // cuda:0x2: 24.2 ms a step waiting, 33.5 ms not).
    std::vector<bool> m_sharedStream;
    std::vector<std::unique_ptr<CopyStream>> m_toHost;
    std::vector<std::unique_ptr<CopyStream>> m_fromHost;
    std::vector<std::unique_ptr<GemmTeam>> m_teams; // per device pinned to more than one core
    std::vector<std::unique_ptr<StageExecutor>> m_stages;
    std::map<std::pair<std::size_t, std::size_t>, std::unique_ptr<EmulatedLink>> m_links; // (from, to) device
    std::vector<std::unique_ptr<Channel>> m_forward; // stage s -> s+1
    std::vector<std::unique_ptr<Channel>> m_backward; // stage s+1 -> s
    std::unique_ptr<AbortSignal> m_abort;
    std::unique_ptr<TiedGradients> m_tied;
    std::vector<char> m_deposited; // per stage: tied gradients handed in this iteration
    // Per device, this iteration: the tracer id of each action event (0: keep the host times).
    std::vector<std::vector<std::uint64_t>> m_eventIds;
    std::int64_t m_transferred = 0; // channel bytes before this iteration
    std::int64_t m_iteration = 0;
    bool m_timed = true; // this iteration's timeline is wanted (run's `timed`)
    bool m_chunksPlaced = false;
    std::chrono::steady_clock::time_point m_start;
};

} // namespace ps::engine
