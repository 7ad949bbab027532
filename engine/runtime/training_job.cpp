#include "runtime/training_job.h"

#include "cluster/cluster.h"
#include "cluster/device_catalog.h"
#include "local_devices.h"
#include "plan/planner.h"
#include "runtime/run_prediction.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace ps::engine {
namespace {

    nlohmann::json tensorIdList(const std::vector<TensorId>& ids)
    {
        auto out = nlohmann::json::array();
        for (auto id : ids)
            out.push_back(id.value);
        return out;
    }

    // A stored plan's cuts, schedule and memory actions, used as they are; returns its id.
    std::int64_t applyStoredPlan(const ProjectStore& store, const std::string& which, const Graph& graph, RunConfig& c)
    {
        const auto plans = store.loadPlans();
        if (plans.empty())
            throw Error("'" + store.path().string() + "' has no stored plans (run `pipestudio plan` first)");
        const ProjectStore::PlanRow* row = nullptr;
        for (const auto& p : plans) {
            if (which == "best" ? p.feasible : std::to_string(p.id) == which) {
                row = &p;
                break;
            }
        }
        if (!row)
            throw Error(
                "'" + store.path().string() + "' has no " + (which == "best" ? "feasible plan" : "plan " + which));
        auto shape = shapeFromPlanJson(row->json, graph.nodeCount());
        c.schedule = shape.schedule;
        c.partition = std::move(shape.partition);
        c.memory = std::move(shape.memory);
        c.stageDevices = std::move(shape.stageDevices);
        return row->id;
    }

    // Cuts and memory plans from the planner for the run's devices, on the project's measured
    // profile of that device kind where it has one (matched to the run's threads per CPU device,
    // or at the GPU run's precision), else the analytical estimate the run is predicted with.
    // Nothing that fits: the compute-balanced cuts (a warning), so the run fails where the memory
    // really runs out.
    std::optional<std::string> plannedCuts(const ProjectStore& store, const TrainingJobOptions& o, const Graph& graph,
        RunConfig& c, const std::string& deviceKind)
    {
        if (c.schedule.stages == 1) {
            c.partition = Partition { { 0 } };
            return std::nullopt;
        }
        auto planning = c.schedule;
        if (planning.kind == ScheduleKind::Interleaved)
            planning = parseScheduleSpec("1f1b", planning.stages, planning.microBatches);
        RunShape shape;
        shape.schedule = c.schedule;
        // A GPU the catalog lacks is planned as this CPU's devices would be, in fp32.
        shape.deviceKind = deviceKind.empty() ? "cpu" : deviceKind;
        shape.precision = shape.deviceKind == "cpu" ? "fp32" : o.precision;
        const auto matched = measuredProfileFor(store, shape);
        auto device = runDevice(shape);
        const auto cluster = makeCluster(device, planning.stages);
        CostModelOptions options;
        options.setup.precision = parsePrecision(shape.precision);
        const auto profile = matched ? matched->profile : engineAnalyticalProfile(graph, device, options);
        // With chunks the planner cannot see model data leaving the device: cut for compute.
        const double memory = o.chunks.enabled ? 0 : static_cast<double>(o.deviceMemoryBytes);
        const StageModel model(
            graph, profile, planning, cluster, static_cast<double>(graph.info().microBatch), { memory, true, true });
        PlannerOptions po;
        po.algorithm = parsePlanAlgorithm(o.algorithm);
        const auto plan = findPlan(model, po);
        if (plan.feasible) {
            c.partition = plan.partition;
            c.memory = plan.memoryPlans();
            return std::nullopt;
        }
        std::vector<double> times;
        for (const auto& n : profile.nodes)
            times.push_back(n.forwardNs.at(model.microBatch()) + n.backwardNs.at(model.microBatch()));
        c.partition = computeBalancedPartition(times, c.schedule.stages);
        return o.algorithm + " finds no plan that fits (" + plan.reason + "); running compute-balanced cuts";
    }

    // The optimizer, warm-up, seed, link emulation and chunk options into the run's config.
    void setTrainingOptions(RunConfig& c, const TrainingJobOptions& o)
    {
        c.optimizer = o.optimizer;
        c.warmupSteps = o.warmup;
        c.seed = o.seed;
        c.link = o.link;
        c.chunks = o.chunks;
        if (o.schedule == "kfkb:auto")
            c.schedule.kind = ScheduleKind::KFKB;
    }

    // A checkpoint's parameters (and the optimizer's moments, where stored: returns whether) into
    // the run; one naming tensors the model does not have is refused.
    bool restoreCheckpoint(TrainingRun& run, const ProjectStore::Checkpoint& checkpoint)
    {
        for (const auto& [id, bytes] : checkpoint.tensors) {
            if (id.index() >= run.graph().tensorCount())
                throw Error("checkpoint " + std::to_string(checkpoint.id) + " does not fit the project's model");
        }
        return run.restore(
            { checkpoint.step, checkpoint.optimizerSteps, checkpoint.tensors, checkpoint.optimizerState });
    }

    // What the run trains on: a language model on token windows of `source` (and an encoder's
    // context), any other graph on generated inputs (samples).
    std::string dataDescription(const TrainingRun& run, const std::string& source)
    {
        if (!run.batchSource().samplesTokens())
            return run.batchSource().describe();
        const auto context = run.batchSource().encoderContext();
        return context.empty() ? source : source + "; encoder " + context;
    }

    // kfkb:auto's controller for `run`, on the project's measured profile if it has one, over
    // autoGroupCandidates' (k, b); the run starts at the candidate predicted fastest at the link's
    // nominal bandwidth.
    std::unique_ptr<GroupSizeController> groupController(
        const ProjectStore& store, const TrainingJobOptions& o, const std::string& deviceKind, TrainingRun& run)
    {
        const auto& c = run.config();
        RunShape shape { c.partition, c.schedule, c.memory, c.stageDevices, run.graph().info().microBatch,
            o.deviceMemoryBytes, c.link, deviceKind, o.precision };
        const auto matched = measuredProfileFor(store, shape);
        std::optional<Profile> measured = matched ? std::optional<Profile>(matched->profile) : std::nullopt;
        auto candidates = autoGroupCandidates(run.graph(), measured ? &*measured : nullptr, shape);
        auto controller = std::make_unique<GroupSizeController>(
            run.graph(), std::move(measured), shape, std::move(candidates), o.adaptEvery);
        controller->setCurrent(controller->choose(c.link.bandwidth).chosen);
        applyGroupCandidate(run, controller->current());
        return controller;
    }

} // namespace

GemmPrecision trainingGemmPrecision(const std::string& precision)
{
    if (precision == "fp32")
        return GemmPrecision::Fp32;
    if (precision == "tf32")
        return GemmPrecision::Tf32;
    if (precision == "bf16")
        return GemmPrecision::Bf16;
    throw Error("--precision '" + precision + "': the engine trains in fp32, or on GPUs tf32 or bf16");
}

TokenData trainingTokens(const TrainingDataOptions& o, const Graph& graph, std::uint64_t seed)
{
    if (o.format == "random") {
        const auto modelVocab = tokenVocabulary(graph);
        return TokenData::random(o.vocab > 0 ? o.vocab : modelVocab > 0 ? modelVocab : 256, 1 << 20, seed);
    }
    if (o.path.empty())
        return TokenData::defaultCorpus();
    if (o.format == "text")
        return TokenData::fromTextFile(o.path);
    if (o.format == "u16" || o.format == "u32")
        return TokenData::fromTokenFile(o.path, o.format == "u16" ? 2 : 4, o.vocab > 0 ? o.vocab : 65536);
    throw Error("unknown --data-format '" + o.format + "' (text, u16, u32, random)");
}

TrainingJob::TrainingJob(ProjectStore& store, TrainingJobOptions options)
    : m_store(store)
    , m_options(std::move(options))
{
    const auto& o = m_options;
    m_staleRuns = store.markStaleRunsInterrupted();
    auto graph = store.loadGraph();
    if (o.microBatch > 0)
        graph = buildAtMicroBatch(graph, o.microBatch);
    auto devices = makeDevices(o.devices, o.deviceMemoryBytes);
    const auto deviceKind = runDeviceKind(o.devices);
    m_onGpu = parseDeviceSpec(o.devices).cuda;
    RunConfig c;
    c.gemm = trainingGemmPrecision(o.precision);
    c.tracer = o.tracer;
    std::int64_t planId = 0;
    if (!o.plan.empty()) {
        planId = applyStoredPlan(store, o.plan, graph, c);
    } else {
        const int stages = o.stages > 0 ? o.stages : static_cast<int>(devices.size());
        const auto M = static_cast<int>(o.microBatches > 0 ? o.microBatches : o.accumulate);
        c.schedule = parseScheduleSpec(o.schedule == "kfkb:auto" ? "kfkb:1" : o.schedule, stages, M);
        if (auto warning = plannedCuts(store, o, graph, c, deviceKind))
            m_warnings.push_back(std::move(*warning));
    }
    setTrainingOptions(c, o);
    std::optional<ProjectStore::Checkpoint> checkpoint;
    if (o.resume) {
        checkpoint = store.latestCheckpoint();
        if (!checkpoint)
            throw Error("'" + store.path().string() + "' has no checkpoint to resume from");
    }
    for (auto& w : scheduleWarnings(c))
        m_warnings.push_back(std::move(w));
    m_resumedStep = checkpoint ? checkpoint->step : 0;
    c.decaySteps = o.cosine ? m_resumedStep + o.steps : 0;
    auto data = trainingTokens(o.data, graph, o.seed);
    const auto source = data.source();
    const auto deviceCount = devices.size();
    m_run = std::make_unique<TrainingRun>(std::move(graph), std::move(data), std::move(devices), c);
    if (o.schedule == "kfkb:auto")
        m_controller = groupController(store, o, deviceKind, *m_run);
    const auto& ran = m_run->config();
    if (checkpoint)
        m_moments = restoreCheckpoint(*m_run, *checkpoint);
    m_unit = m_run->batchSource().samplesTokens() ? "tokens" : "samples";
    m_config = std::make_unique<nlohmann::json>(nlohmann::json { { "devices", o.devices },
        { "device_count", deviceCount }, { "stages", ran.schedule.stages }, { "schedule", scheduleName(ran.schedule) },
        { "micro_batches", ran.schedule.microBatches }, { "cuts", ran.partition.cutsText() }, { "plan_id", planId },
        { "steps", o.steps }, { "micro_batch", m_run->graph().info().microBatch },
        { "data", dataDescription(*m_run, source) }, { "optimizer", o.optimizer.kind }, { "lr", o.optimizer.lr },
        { "weight_decay", o.optimizer.weightDecay }, { "beta2", o.optimizer.beta2 }, { "warmup", o.warmup },
        { "cosine", o.cosine }, { "seed", o.seed }, { "memory", o.memoryText }, { "resumed_from_step", m_resumedStep },
        { "link", nlohmann::json::parse(linkToJson(ran.link)) }, { "adaptive_group_size", m_controller != nullptr },
        { "chunks", o.chunks.enabled }, { "chunk_elements", o.chunks.chunkElements }, { "throughput_unit", m_unit },
        { "device_kind", deviceKind }, { "precision", o.precision }, { "timeline", o.timeline } });
    if (planId == 0 && std::any_of(ran.memory.begin(), ran.memory.end(), [](const StageMemoryPlan& p) {
            return !p.swappedTensors.empty() || !p.recomputedTensors.empty();
        })) { // planned here: kept with the run, so that its prediction has them
        auto plans = nlohmann::json::array();
        for (const auto& p : ran.memory)
            plans.push_back({ { "swapped_bytes", p.swappedBytes }, { "recomputed_bytes", p.recomputedBytes },
                { "kept_input_bytes", p.keptInputBytes }, { "swapped_tensors", tensorIdList(p.swappedTensors) },
                { "recomputed_tensors", tensorIdList(p.recomputedTensors) } });
        (*m_config)["memory_plans"] = plans;
    }
    m_runId = store.beginRun(m_config->dump());
}

TrainingJob::~TrainingJob() = default;

const nlohmann::json& TrainingJob::config() const
{
    return *m_config;
}

std::string TrainingJob::scheduleLine() const
{
    const auto& c = m_run->config();
    return fmt::format("{} stage(s) on {} device(s), {} with {} micro-batch(es), cuts {}", c.schedule.stages,
        m_run->devices().size(), scheduleName(c.schedule), c.schedule.microBatches,
        c.partition.cutsText().empty() ? "-" : c.partition.cutsText());
}

void TrainingJob::record(const RunStepResult& r, std::int64_t index)
{
    m_store.appendRunMetrics(m_runId, { { r.step, r.loss, r.seconds * 1e9, r.tokensPerSecond } });
    const auto& devices = m_run->devices();
    std::vector<ProjectStore::RunDeviceMetric> dm;
    for (std::size_t d = 0; d < r.devicePeakBytes.size(); ++d) {
        nlohmann::ordered_json uses = nlohmann::ordered_json::object();
        if (d < r.devicePeakByUse.size()) {
            for (std::size_t u = 0; u < kMemoryUses; ++u)
                uses[std::string(toString(static_cast<MemoryUse>(u)))] = r.devicePeakByUse[d][u];
        }
        // -1: not measured (a GPU step run untimed).
        dm.push_back({ r.step, static_cast<int>(d), devices[d].name, r.devicePeakBytes[d],
            d < r.deviceBusyNs.size() ? r.deviceBusyNs[d] : -1, uses.dump() });
    }
    m_store.appendRunDeviceMetrics(m_runId, dm);
    const auto& o = m_options;
    if (index <= o.traceIterations || (o.traceEvery > 0 && index % o.traceEvery == 0))
        m_store.saveRunEvents(m_runId, r.step, r.events);
}

void TrainingJob::checkpoint(std::int64_t step)
{
    const auto c = m_run->checkpoint();
    m_store.saveCheckpoint(m_runId, step, c.parameters, c.optimizerState, c.optimizerSteps);
}

TrainingOutcome TrainingJob::runSteps(
    const StepCallback& onStep, const AdaptCallback& onAdapt, const std::atomic<bool>* stop)
{
    const auto& o = m_options;
    const auto stopped = [stop] { return stop != nullptr && stop->load(); };
    TrainingOutcome out { m_resumedStep };
    try {
        for (std::int64_t i = 0; i < o.steps && !stopped(); ++i) {
            // On GPUs only the steps whose timeline is kept are timed (the others do not wait for the
            // device after each action, nor trace it); CPU steps are timed for free.
            const auto index = i + 1; // 1-based in this run: a resumed run traces its own first steps too
            const bool traced = index <= o.traceIterations || (o.traceEvery > 0 && index % o.traceEvery == 0);
            const auto r = m_run->step(!m_onGpu || traced);
            out = { r.step, r.loss, r.tokensPerSecond, false };
            // Stored before it is reported: a step a reader saw survives the process being killed.
            record(r, index);
            if (onStep)
                onStep(r);
            if (m_controller) {
                if (const auto a = adaptAfterStep(*m_controller, *m_run, r); a && onAdapt)
                    onAdapt(*a);
            }
            if (o.checkpointEvery > 0 && index % o.checkpointEvery == 0)
                checkpoint(out.step);
        }
        checkpoint(out.step); // a failure here (a full disk) fails the run too
    } catch (const std::exception& e) {
        try {
            m_store.endRun(m_runId, "failed", e.what());
        } catch (const std::exception&) { // NOLINT(bugprone-empty-catch): e.g. a full disk; the
            // run stays "running" until the project is next opened, which marks it interrupted
        }
        throw;
    }
    out.interrupted = stopped();
    m_store.endRun(m_runId, out.interrupted ? "interrupted" : "finished");
    return out;
}

} // namespace ps::engine
