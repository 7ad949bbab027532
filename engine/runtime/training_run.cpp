#include "runtime/training_run.h"

#include "cpu/kernels.h"
#include "cpu/thread_affinity.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "executor.h"
#include "util/error.h"

#include <algorithm>
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

namespace {

    int parseCount(std::string_view digits, std::string_view spec, const char* expected, int max)
    {
        int value = -1;
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
        if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || value < 0 || value > max)
            throw Error("device '" + std::string(spec) + "': expected " + expected);
        return value;
    }

    constexpr const char* kCudaForms = "cuda, cuda:G, cuda:0,cuda:1 or cuda:GxK (GPU G as K stage devices)";

} // namespace

RuntimeDeviceSpec parseDeviceSpec(std::string_view spec)
{
    RuntimeDeviceSpec d;
    if (spec == "cpu")
        return d;
    if (spec.starts_with("cpu:")) {
        d.cpuDevices = parseCount(spec.substr(4), spec, "cpu:N with N between 1 and 256", 256);
        if (d.cpuDevices < 1)
            throw Error("device '" + std::string(spec) + "': expected cpu:N with N between 1 and 256");
        return d;
    }
    if (!spec.starts_with("cuda"))
        throw Error("device '" + std::string(spec) + "': expected cpu, cpu:N, " + kCudaForms);
    d.cuda = true;
    if (spec == "cuda") {
        d.gpus = { 0 };
        return d;
    }
    std::string_view rest = spec;
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        const auto item = rest.substr(0, comma);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        if (!item.starts_with("cuda:"))
            throw Error("device '" + std::string(spec) + "': expected " + kCudaForms);
        auto body = item.substr(5);
        const auto x = body.find('x');
        const int gpu = parseCount(body.substr(0, x), spec, kCudaForms, 1023);
        if (x != std::string_view::npos) {
            if (!d.gpus.empty() || comma != std::string_view::npos)
                throw Error("device '" + std::string(spec) + "': a split GPU (cuda:GxK) is the only device of a run");
            d.split = parseCount(body.substr(x + 1), spec, "cuda:GxK with K between 1 and 64", 64);
            if (d.split < 1)
                throw Error("device '" + std::string(spec) + "': expected cuda:GxK with K between 1 and 64");
        }
        if (std::find(d.gpus.begin(), d.gpus.end(), gpu) != d.gpus.end())
            throw Error("device '" + std::string(spec) + "': GPU " + std::to_string(gpu) + " is named twice");
        d.gpus.push_back(gpu);
    }
    return d;
}

std::vector<std::string> runtimeDeviceNames(std::string_view spec)
{
    const auto parsed = parseDeviceSpec(spec);
    std::vector<std::string> names;
    if (parsed.cuda) {
        for (const int gpu : parsed.gpus) {
            for (int k = 0; k < parsed.split; ++k)
                names.push_back("cuda:" + std::to_string(gpu) + (parsed.split > 1 ? "." + std::to_string(k) : ""));
        }
        return names;
    }
    for (int d = 0; d < parsed.cpuDevices; ++d)
        names.push_back(spec == "cpu" ? "cpu" : "cpu:" + std::to_string(d));
    return names;
}

std::vector<RuntimeDevice> makeDevices(std::string_view spec, std::int64_t memoryBytes)
{
    if (memoryBytes < 0)
        throw Error("device memory must not be negative");
    const auto parsed = parseDeviceSpec(spec);
    const auto names = runtimeDeviceNames(spec);
    std::vector<RuntimeDevice> devices;
    if (parsed.cuda) {
        for (const int gpu : parsed.gpus) {
            const auto& backend = cuda::cudaBackend(gpu); // throws saying why this GPU cannot be used
            std::int64_t capacity = memoryBytes;
            if (capacity == 0 && parsed.split > 1) { // an equal share of the GPU's memory each
                const auto probe = cuda::probeGpus();
                capacity = probe.devices.at(static_cast<std::size_t>(gpu)).memoryBytes / parsed.split;
            }
            for (int k = 0; k < parsed.split; ++k) {
                RuntimeDevice dev;
                dev.name = names[devices.size()];
                dev.backend = &backend;
                dev.memory = std::make_unique<Allocator>(dev.name, capacity, backend.memory());
                devices.push_back(std::move(dev));
            }
        }
        return devices;
    }
    const int count = parsed.cpuDevices;
    const auto cores = allowedCores();
    const int share = threadsPerDevice(static_cast<std::size_t>(count));
    for (int d = 0; d < count; ++d) {
        RuntimeDevice dev;
        dev.name = names[static_cast<std::size_t>(d)];
        dev.backend = &cpuBackend();
        dev.memory = std::make_unique<Allocator>(dev.name, memoryBytes, dev.backend->memory());
        // One device uses the whole machine; several split it.
        for (int c = 0; c < share; ++c)
            dev.cores.push_back(cores[static_cast<std::size_t>(d * share + c) % cores.size()]);
        devices.push_back(std::move(dev));
    }
    return devices;
}

std::vector<std::string> scheduleWarnings(const RunConfig& config)
{
    std::vector<std::string> out;
    if (config.schedule.kind != ScheduleKind::FTPipeAsync)
        return out;
    std::vector<int> keeping;
    for (int s = 0; s + 1 < config.schedule.stages; ++s) {
        const auto k = static_cast<std::size_t>(s);
        if (k >= config.memory.size() || config.memory[k].recomputedTensors.empty())
            keeping.push_back(s);
    }
    if (keeping.empty())
        return out;
    std::string list;
    for (const int s : keeping)
        list += (list.empty() ? "" : ", ") + std::to_string(s);
    out.push_back("ftpipe-async: stage(s) " + list
        + " keep their activations instead of recomputing them (FTPipe §4.2.1 recomputes every stage but the "
          "last from its border inputs, with the weights of the moment); their backwards read activations of "
          "older weights. Plan with the ftpipe-async schedule (train without --plan) for FTPipe's checkpointing");
    return out;
}

Schedule runtimeSchedule(const RunConfig& config)
{
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
    // Every CPU device splits its GEMMs and vector loops over its own cores' team (PipelineRunner),
    // one device over the whole machine, so OpenBLAS runs single-threaded in each team member.
    setComputeThreads(1);
    if (m_config.gemm != GemmPrecision::Fp32) {
        for (const auto& d : m_devices) {
            if (d.memory->memory().hostAccessible())
                throw Error(std::string(m_config.gemm == GemmPrecision::Tf32 ? "tf32" : "bf16")
                    + " is a GPU tensor-core mode; " + d.name + " computes in fp32 (train with --precision fp32)");
        }
    }
    makeRunner();
    // The same initial values as the single-device executor (graph values, else its seeded draws).
    GraphExecutor init(m_graph, ExecutorOptions { m_config.seed, 0, true });
    for (auto id : m_runner->parameterIds())
        m_runner->setParameter(id, init.backend().toHost(init.parameter(id)));
}

void TrainingRun::makeRunner()
{
    PipelineSpec spec { m_config.partition, runtimeSchedule(m_config), m_config.memory };
    RunnerOptions options { m_config.seed, m_config.optimizer, true, m_config.link, m_config.chunks, m_config.gemm,
        m_config.tracer };
    m_runner = std::make_unique<PipelineRunner>(m_graph, std::move(spec), m_devices, options);
}

void TrainingRun::setMicroBatch(Graph graph, const ScheduleSpec& schedule)
{
    const auto name =
        "micro-batch " + std::to_string(graph.info().microBatch) + " x " + std::to_string(schedule.microBatches);
    if (graph.nodeCount() != m_graph.nodeCount() || graph.tensorCount() != m_graph.tensorCount())
        throw Error(name + ": the graph is not the run's model ('" + graph.info().name + "')");
    for (const auto& t : m_graph.tensors()) {
        const auto& other = graph.tensor(t.id);
        if (t.kind == TensorKind::Parameter && (other.kind != t.kind || other.shape != t.shape))
            throw Error(name + ": parameter '" + t.name + "' differs from the run's model");
    }
    const auto samples = m_graph.info().microBatch * m_config.schedule.microBatches;
    if (graph.info().microBatch * schedule.microBatches != samples)
        throw Error(name + " is not the run's " + std::to_string(samples) + " samples per step");
    for (const auto& n : m_graph.nodes()) {
        // Its running statistics live in the runner's copies of graph constants (and its batch
        // statistics depend on b): a new runner would restart them.
        if (n.op == OpType::BatchNorm)
            throw Error(name + ": '" + m_graph.info().name + "' has batch norm ('" + n.name
                + "'), whose statistics a new micro-batch size would restart");
    }
    auto next = m_config;
    next.schedule = schedule;
    (void)runtimeSchedule(next); // throws for a schedule the plan cannot run, before anything changes
    auto source = m_source.reshaped(graph);
    const auto state = checkpoint();
    const auto restore = [&] {
        for (const auto& [id, bytes] : state.parameters)
            m_runner->setParameter(id, bytes);
        for (const auto& [id, moments] : state.optimizerState)
            m_runner->setOptimizerState(id, moments, state.optimizerSteps);
    };
    m_runner.reset(); // it reads m_graph; its device memory goes back first
    std::swap(m_graph, graph);
    std::swap(m_config, next);
    std::swap(m_source, source);
    try {
        makeRunner();
        restore();
    } catch (...) {
        // Back to the run as it was (its old shapes fit, they ran), then report the failure.
        m_runner.reset();
        std::swap(m_graph, graph);
        std::swap(m_config, next);
        std::swap(m_source, source);
        makeRunner();
        restore();
        throw;
    }
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

RunStepResult TrainingRun::step(bool timed)
{
    const auto batches = sampleStep();
    const double lr = learningRate(m_steps + 1);
    auto r = m_runner->run(batches, lr, m_steps, timed);
    ++m_steps;
    RunStepResult out;
    out.step = m_steps;
    out.loss = r.loss;
    out.learningRate = lr;
    out.seconds = r.seconds;
    out.tokensPerSecond = static_cast<double>(tokensPerStep()) / r.seconds;
    out.devicePeakBytes = std::move(r.devicePeakBytes);
    out.devicePeakByUse = std::move(r.devicePeakByUse);
    out.devicePeakWithoutMessages = std::move(r.devicePeakWithoutMessages);
    out.deviceBusyNs = std::move(r.deviceBusyNs);
    out.events = std::move(r.events);
    out.tracedActions = r.tracedActions;
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
