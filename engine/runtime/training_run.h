// A training run: the object `pipestudio train`, `pipestudio demo` and the GUI's launcher share.
// It owns the token data, the devices, the pipeline runner over the plan's stages, the learning-rate
// schedule and the step count; it produces one result per optimizer step and checkpoints that hold
// parameters, optimizer moments and the step, so a resumed run continues the same learning-rate
// schedule and Adam state. One device with one stage is the plain single-device path: there the M
// micro-batches of a step are gradient accumulation, drawing the same data in the same order as
// the pipeline does.
// Depends on: runtime/pipeline_runner.h, data.h, executor.h (initial parameters); no Qt, no CUDA.
#pragma once

#include "data.h"
#include "runtime/pipeline_runner.h"

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace ps::engine {

// A --devices text, parsed: "cpu" (one device), "cpu:N" (N devices sharing the cores), "cuda" or
// "cuda:G" (GPU G), "cuda:0,cuda:1" (a device per GPU), "cuda:GxK" (GPU G split into K virtual
// stage devices, so every schedule runs on one real GPU). Throws ps::Error naming the text.
struct RuntimeDeviceSpec
{
    bool cuda = false;
    int cpuDevices = 1;
    std::vector<int> gpus; // cuda: the GPUs, in stage-device order
    int split = 1; // cuda: virtual devices per GPU
};
[[nodiscard]] RuntimeDeviceSpec parseDeviceSpec(std::string_view spec);
// The names makeDevices gives the devices of `spec` ("cpu", "cpu:1", "cuda:0", "cuda:0.1" for the
// second half of a split GPU), without touching a device.
[[nodiscard]] std::vector<std::string> runtimeDeviceNames(std::string_view spec);

// The devices of `spec`, each with `memoryBytes` of capacity (0: unlimited on the CPU; a split
// GPU's share of its memory). CPU devices are each confined to an equal share of the cores.
// Throws ps::Error saying why a GPU cannot be used (a build without CUDA, no NVIDIA driver, no
// such GPU).
[[nodiscard]] std::vector<RuntimeDevice> makeDevices(std::string_view spec, std::int64_t memoryBytes);
// BLAS threads per device for `devices` CPU devices on this machine (cores / devices, at least 1).
[[nodiscard]] int threadsPerDevice(std::size_t devices);

struct RunConfig
{
    ScheduleSpec schedule; // stages, micro-batches M, kind
    Partition partition; // one range per stage
    std::vector<DeviceId> stageDevices; // empty: stage % devices
    std::vector<StageMemoryPlan> memory; // per stage; empty: keep everything
    StageOptimizerConfig optimizer;
    std::int64_t warmupSteps = 0;
    std::int64_t decaySteps = 0; // cosine decay to lr * minLrRatio at this step; 0: constant
    double minLrRatio = 0.1;
    std::uint64_t seed = 0; // initialisation, dropout and sampling
    LinkEmulation link; // between the devices; off: memory speed
    ChunkOptions chunks; // PatrickStar chunk managers for parameters and optimizer states
    GemmPrecision gemm = GemmPrecision::Fp32; // tf32 and bf16 on CUDA devices only (refused on CPU ones)
    ActionTracer* tracer = nullptr; // times the actions on the devices (RunnerOptions::tracer); not owned
};

struct RunStepResult
{
    std::int64_t step = 0;
    double loss = 0;
    double learningRate = 0;
    double seconds = 0;
    double tokensPerSecond = 0;
    std::vector<std::int64_t> devicePeakBytes;
    std::vector<MemoryByUse> devicePeakByUse;
    std::vector<std::int64_t> devicePeakWithoutMessages; // messages waiting at a receiver aside
    std::vector<double> deviceBusyNs;
    std::vector<SimEvent> events;
    std::int64_t transferredBytes = 0;
    std::vector<ChunkStats> deviceChunks; // per device, with chunks
    std::int64_t tracedActions = 0; // events timed by the config's tracer
};

struct RunCheckpoint
{
    std::int64_t step = 0;
    int optimizerSteps = 0;
    std::vector<std::pair<TensorId, std::vector<std::byte>>> parameters;
    // Per parameter: AdamW m and v (SGD: its momentum buffer).
    std::vector<std::pair<TensorId, std::vector<std::vector<std::byte>>>> optimizerState;
};

class TrainingRun
{
public:
    // Throws ps::Error when the graph has no scalar loss or the data cannot feed it, or the plan cannot
    // run on the devices (naming the stage or device).
    TrainingRun(Graph graph, TokenData data, std::vector<RuntimeDevice> devices, RunConfig config);
    // The runner holds references to the graph and devices held here.
    TrainingRun(const TrainingRun&) = delete;
    TrainingRun& operator=(const TrainingRun&) = delete;

    // `timed` false: the step's timeline is not wanted (PipelineRunner::run), so GPU workers do not
    // wait for or trace their devices; the result has no busy times and no events but link sends
    // and swaps.
    RunStepResult step(bool timed = true);
    [[nodiscard]] double learningRate(std::int64_t step) const;
    [[nodiscard]] std::int64_t stepsDone() const
    {
        return m_steps;
    }
    [[nodiscard]] std::int64_t tokensPerStep() const
    {
        return m_source.itemsPerBatch() * m_config.schedule.microBatches;
    }
    [[nodiscard]] const BatchSource& batchSource() const
    {
        return m_source;
    }
    // From the next step on, runs `schedule` (same stages, devices and micro-batches; Ada-Grouper's
    // controller changes k this way). Parameters and optimizer state are untouched. Throws
    // ps::Error when the schedule cannot replace the current one.
    void setSchedule(const ScheduleSpec& schedule);
    // From the next step on, runs `graph`, the run's model at another micro-batch size b, with
    // `schedule`'s M micro-batches (Ada-Grouper's controller switching (k, b) at a fixed global
    // batch): parameters, optimizer state, step count and the data stream carry over. Throws
    // ps::Error, the run unchanged, when the graph is another model, M x b differs from the run's
    // samples per step, or the model has batch norm (its statistics would restart); a failure
    // while building the new pipeline puts the old one back and rethrows.
    void setMicroBatch(Graph graph, const ScheduleSpec& schedule);
    [[nodiscard]] RunCheckpoint checkpoint() const;
    // Parameters, optimizer state and step count from a checkpoint; the sampler is advanced past the
    // steps already taken so the data continues where the checkpointed run stopped. Returns false
    // when the optimizer state was not restored (none stored, or another optimizer's).
    bool restore(const RunCheckpoint& checkpoint);

    [[nodiscard]] PipelineRunner& runner()
    {
        return *m_runner;
    }
    [[nodiscard]] const Graph& graph() const
    {
        return m_graph;
    }
    [[nodiscard]] const std::vector<RuntimeDevice>& devices() const
    {
        return m_devices;
    }
    [[nodiscard]] const RunConfig& config() const
    {
        return m_config;
    }

private:
    std::vector<HostBatch> sampleStep();
    void makeRunner();

    Graph m_graph;
    std::vector<RuntimeDevice> m_devices;
    RunConfig m_config;
    BatchSource m_source;
    std::unique_ptr<PipelineRunner> m_runner;
    std::int64_t m_steps = 0;
};

// The schedule a run executes: the generated compute actions, placed by the stage -> device map
// when one is given, with the memory plans' SWAP/RECOMPUTE actions.
[[nodiscard]] Schedule runtimeSchedule(const RunConfig& config);

// What a run's configuration departs from in the method its schedule names, one line each (empty:
// nothing): ftpipe-async without FTPipe's checkpointing (§4.2.1: every stage but the last
// recomputes from its border inputs inside B, with the weights of that moment) on some stage.
[[nodiscard]] std::vector<std::string> scheduleWarnings(const RunConfig& config);

} // namespace ps::engine
