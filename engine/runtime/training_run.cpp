#include "runtime/training_run.h"

#include "cpu/kernels.h"
#include "cpu/thread_affinity.h"
#include "executor.h"
#include "util/error.h"

#include <charconv>
#include <cmath>

namespace ps::engine {
namespace {

    int hardwareCores()
    {
        return static_cast<int>(allowedCores().size());
    }

} // namespace

int threadsPerDevice(std::size_t devices)
{
    return std::max(1, hardwareCores() / static_cast<int>(std::max<std::size_t>(devices, 1)));
}

std::vector<RuntimeDevice> makeDevices(std::string_view spec, std::int64_t memoryBytes)
{
    int count = 1;
    const auto colon = spec.find(':');
    const auto kind = spec.substr(0, colon);
    if (kind != "cpu")
        throw Error("device '" + std::string(spec) + "': this build runs pipelines on CPU devices (cpu or cpu:N)");
    if (colon != std::string_view::npos) {
        const auto digits = spec.substr(colon + 1);
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
        if (ec != std::errc() || ptr != digits.data() + digits.size() || count < 1 || count > 256)
            throw Error("device '" + std::string(spec) + "': expected cpu:N with N between 1 and 256");
    }
    if (memoryBytes < 0)
        throw Error("device memory must not be negative");
    const auto cores = allowedCores();
    const int share = threadsPerDevice(static_cast<std::size_t>(count));
    std::vector<RuntimeDevice> devices;
    for (int d = 0; d < count; ++d) {
        RuntimeDevice dev;
        dev.name = count == 1 && colon == std::string_view::npos ? "cpu" : "cpu:" + std::to_string(d);
        dev.backend = &cpuBackend();
        dev.memory = std::make_unique<Allocator>(dev.name, memoryBytes);
        if (count > 1) { // one device uses the whole machine; several split it
            for (int c = 0; c < share; ++c)
                dev.cores.push_back(cores[static_cast<std::size_t>(d * share + c) % cores.size()]);
        }
        devices.push_back(std::move(dev));
    }
    return devices;
}

Schedule runtimeSchedule(const RunConfig& config)
{
    if (config.schedule.kind == ScheduleKind::FTPipeAsync) // planned and simulated in core only
        throw Error("the pipeline runtime does not run ftpipe-async (one weight version with recompute inside "
                    "B); plan and simulate it, or train with pipedream or a synchronous schedule");
    auto schedule = generateSchedule(config.schedule);
    if (!config.stageDevices.empty()) {
        if (config.schedule.kind == ScheduleKind::Interleaved)
            throw Error("interleaved schedules place their stages round robin; give no stage-to-device map");
        schedule = placeStages(schedule, config.stageDevices);
    }
    const bool anyMemory = std::any_of(config.memory.begin(), config.memory.end(),
        [](const StageMemoryPlan& p) { return !p.swappedTensors.empty() || !p.recomputedTensors.empty(); });
    if (anyMemory) {
        auto plans = config.memory;
        for (auto& p : plans) { // the actions are inserted for the tensors the engine can act on
            p.swappedBytes = p.swappedTensors.empty() ? 0 : std::max(p.swappedBytes, 1.0);
            p.recomputedBytes = p.recomputedTensors.empty() ? 0 : std::max(p.recomputedBytes, 1.0);
            if (p.recomputedTensors.empty())
                p.recomputeNs = 0;
        }
        schedule = withMemoryActions(schedule, plans);
    }
    return schedule;
}

TrainingRun::TrainingRun(Graph graph, TokenData data, std::vector<RuntimeDevice> devices, RunConfig config)
    : m_graph(std::move(graph))
    , m_devices(std::move(devices))
    , m_config(std::move(config))
    , m_source(m_graph, std::move(data), m_config.seed + 1)
{
    // One device uses OpenBLAS's threads; several split their GEMMs over their own cores' teams
    // (PipelineRunner), so OpenBLAS runs single-threaded in each team member.
    setComputeThreads(m_devices.size() == 1 ? threadsPerDevice(1) : 1);
    PipelineSpec spec { m_config.partition, runtimeSchedule(m_config), m_config.memory };
    RunnerOptions options { m_config.seed, m_config.optimizer, true, m_config.link, m_config.chunks };
    m_runner = std::make_unique<PipelineRunner>(m_graph, std::move(spec), m_devices, options);
    // The same initial values as the single-device executor (graph values, else its seeded draws).
    GraphExecutor init(m_graph, ExecutorOptions { m_config.seed, 0, true });
    for (auto id : m_runner->parameterIds())
        m_runner->setParameter(id, init.backend().toHost(init.parameter(id)));
}

void TrainingRun::setSchedule(const ScheduleSpec& schedule)
{
    auto next = m_config;
    next.schedule = schedule;
    m_runner->setSchedule(runtimeSchedule(next));
    m_config = std::move(next);
}

double TrainingRun::learningRate(std::int64_t step) const
{
    return scheduledLearningRate(
        m_config.optimizer.lr, step, m_config.warmupSteps, m_config.decaySteps, m_config.minLrRatio);
}

std::vector<HostBatch> TrainingRun::sampleStep()
{
    std::vector<HostBatch> batches(static_cast<std::size_t>(m_config.schedule.microBatches));
    for (auto& b : batches)
        b = m_source.next();
    return batches;
}

RunStepResult TrainingRun::step()
{
    const auto batches = sampleStep();
    const double lr = learningRate(m_steps + 1);
    auto r = m_runner->run(batches, lr, m_steps);
    ++m_steps;
    RunStepResult out;
    out.step = m_steps;
    out.loss = r.loss;
    out.learningRate = lr;
    out.seconds = r.seconds;
    out.tokensPerSecond = static_cast<double>(tokensPerStep()) / r.seconds;
    out.devicePeakBytes = std::move(r.devicePeakBytes);
    out.devicePeakByUse = std::move(r.devicePeakByUse);
    out.deviceBusyNs = std::move(r.deviceBusyNs);
    out.events = std::move(r.events);
    out.transferredBytes = r.transferredBytes;
    out.deviceChunks = std::move(r.deviceChunks);
    return out;
}

RunCheckpoint TrainingRun::checkpoint() const
{
    RunCheckpoint c;
    c.step = m_steps;
    c.optimizerSteps = m_runner->stages().front()->optimizerSteps();
    for (auto id : m_runner->parameterIds()) {
        c.parameters.emplace_back(id, m_runner->parameterBytes(id));
        c.optimizerState.emplace_back(id, m_runner->optimizerState(id));
    }
    return c;
}

bool TrainingRun::restore(const RunCheckpoint& checkpoint)
{
    for (const auto& [id, bytes] : checkpoint.parameters) {
        if (id.index() >= m_graph.tensorCount() || m_graph.tensor(id).kind != TensorKind::Parameter)
            throw Error("the checkpoint does not fit the project's model (tensor " + std::to_string(id.value) + ")");
        m_runner->setParameter(id, bytes);
    }
    const auto slots = m_config.optimizer.kind == "adamw" ? 2U : 1U;
    const bool sameOptimizer = !checkpoint.optimizerState.empty()
        && std::all_of(checkpoint.optimizerState.begin(), checkpoint.optimizerState.end(),
            [&](const auto& s) { return s.second.size() == slots; });
    if (sameOptimizer) {
        for (const auto& [id, state] : checkpoint.optimizerState)
            m_runner->setOptimizerState(id, state, checkpoint.optimizerSteps);
    }
    for (std::int64_t s = m_steps; s < checkpoint.step; ++s)
        (void)sampleStep(); // the data stream continues where the checkpointed run stopped
    m_steps = checkpoint.step;
    return sameOptimizer;
}

} // namespace ps::engine
