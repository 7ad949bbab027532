#include "runtime/pipeline_runner.h"

#include "cpu/thread_affinity.h"
#include "runtime/tied_gradients.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

namespace ps::engine {

namespace {

    Stream streamOf(ActionType t)
    {
        switch (t) {
        case ActionType::SendForward:
        case ActionType::SendBackward:
            return Stream::Send;
        case ActionType::SwapOut:
            return Stream::CopyToHost;
        case ActionType::SwapIn:
            return Stream::CopyFromHost;
        default:
            return Stream::Compute;
        }
    }

    bool isCompute(ActionType t)
    {
        return t == ActionType::Forward || t == ActionType::Backward || t == ActionType::BackwardInput
            || t == ActionType::BackwardWeight || t == ActionType::OptimizerStep || t == ActionType::Recompute;
    }

    std::int64_t messageBytes(const std::vector<NdArray>& message)
    {
        std::int64_t bytes = 0;
        for (const auto& a : message)
            bytes += a.defined() ? a.bytes() : 0;
        return bytes;
    }

} // namespace

PipelineRunner::PipelineRunner(
    const Graph& graph, PipelineSpec spec, std::vector<RuntimeDevice>& devices, RunnerOptions options)
    : m_graph(graph)
    , m_spec(std::move(spec))
    , m_devices(devices)
    , m_options(std::move(options))
    , m_hostPool("host pool", 0,
          devices.empty() || devices.front().backend == nullptr ? hostMemory() : devices.front().backend->hostStaging())
    , m_abort(std::make_unique<AbortSignal>())
{
    checkPartition(m_spec.partition, graph.nodeCount());
    const int S = m_spec.partition.stageCount();
    if (m_spec.schedule.spec.stages != S)
        throw Error("the schedule has " + std::to_string(m_spec.schedule.spec.stages) + " stages, the partition "
            + std::to_string(S));
    if (m_spec.schedule.devices.size() > devices.size())
        throw Error("the schedule runs on " + std::to_string(m_spec.schedule.devices.size()) + " devices, only "
            + std::to_string(devices.size()) + " given");
    m_schedule = withChannels(m_spec.schedule);
    makeStages();
    makeChannels();
    setChunkActions();
    m_tied = std::make_unique<TiedGradients>(m_stages, *m_abort);
    for (std::size_t d = 0; d < m_schedule.devices.size(); ++d)
        m_teams.push_back(devices[d].cores.size() > 1 ? std::make_unique<GemmTeam>(devices[d].cores) : nullptr);
    makeCopyStreams();
}

// One executor per stage on its device, with the stage's memory plan, optimizer and GEMM precision.
void PipelineRunner::makeStages()
{
    const int S = m_spec.partition.stageCount();
    // PipeDream stashes a weight version per in-flight micro-batch; FTPipe's asynchronous pipeline
    // keeps one version (§4.2: its non-last stages recompute with the current weights inside B).
    const bool stash = m_schedule.spec.kind == ScheduleKind::PipeDream;
    for (int s = 0; s < S; ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        auto& dev = m_devices[m_schedule.deviceOf(id).index()];
        const auto plan =
            static_cast<std::size_t>(s) < m_spec.memory.size() ? m_spec.memory[id.index()] : StageMemoryPlan();
        m_stages.push_back(std::make_unique<StageExecutor>(m_graph, id, m_spec.partition.stageBegin(id),
            m_spec.partition.stageEnd(id, m_graph.nodeCount()), *dev.backend, *dev.memory, m_hostPool, plan,
            m_options.seed));
        if (m_options.chunks.enabled) {
            // A chunk's optimizer step runs where the chunk lives (CPU Adam for host chunks); the
            // CUDA backend's kernels cannot step host memory yet.
            if (!dev.memory->memory().hostAccessible())
                throw Error("chunked parameters (--chunks) run on CPU devices only so far, not on " + dev.name);
            m_stages.back()->useChunks(m_options.chunks.chunkElements);
        }
        m_stages.back()->setOptimizer(m_options.optimizer, stash);
        m_stages.back()->setGemmPrecision(m_options.gemm);
    }
}

// A channel each way between neighbouring stages, through an emulated link where one is set.
void PipelineRunner::makeChannels()
{
    const int S = m_spec.partition.stageCount();
    const auto origin = std::chrono::steady_clock::now();
    const auto link = [&](std::size_t from, std::size_t to) -> EmulatedLink* {
        if (!m_options.link.enabled() || from == to)
            return nullptr;
        auto& l = m_links[{ from, to }];
        if (!l)
            l = std::make_unique<EmulatedLink>(m_options.link, origin);
        return l.get();
    };
    for (int s = 0; s + 1 < S; ++s) {
        const StageId from(static_cast<std::uint32_t>(s));
        const StageId to(static_cast<std::uint32_t>(s + 1));
        const auto da = m_schedule.deviceOf(from).index();
        const auto db = m_schedule.deviceOf(to).index();
        auto& a = m_devices[da];
        auto& b = m_devices[db];
        m_forward.push_back(std::make_unique<InProcessChannel>(
            "stage " + std::to_string(s) + " -> " + std::to_string(s + 1) + " (" + a.name + " -> " + b.name + ")",
            *a.backend, *b.backend, *b.memory, *m_abort, link(da, db)));
        m_backward.push_back(std::make_unique<InProcessChannel>("stage " + std::to_string(s + 1) + " -> "
                + std::to_string(s) + " gradients (" + b.name + " -> " + a.name + ")",
            *b.backend, *a.backend, *a.memory, *m_abort, link(db, da)));
    }
}

// Copy streams to and from the host for devices whose stages swap, and which devices share a GPU's
// stream with another.
void PipelineRunner::makeCopyStreams()
{
    m_toHost.resize(m_schedule.devices.size());
    m_fromHost.resize(m_schedule.devices.size());
    m_sharedStream.assign(m_schedule.devices.size(), false);
    for (std::size_t d = 0; d < m_sharedStream.size(); ++d) {
        for (std::size_t e = 0; e < m_sharedStream.size(); ++e) {
            if (e != d && m_devices[e].backend == m_devices[d].backend
                && !m_devices[d].memory->memory().hostAccessible())
                m_sharedStream[d] = true;
        }
    }
    for (auto& stage : m_stages) {
        const auto& plan =
            stage->id().index() < m_spec.memory.size() ? m_spec.memory[stage->id().index()] : StageMemoryPlan();
        if (plan.swappedTensors.empty())
            continue;
        const auto d = m_schedule.deviceOf(stage->id()).index();
        if (!m_toHost[d]) {
            m_toHost[d] = std::make_unique<CopyStream>(m_devices[d].name + " to host", m_devices[d].cores);
            m_fromHost[d] = std::make_unique<CopyStream>(m_devices[d].name + " from host", m_devices[d].cores);
        }
        stage->setCopyStreams(m_toHost[d].get(), m_fromHost[d].get());
    }
}

PipelineRunner::~PipelineRunner() = default;

Channel& PipelineRunner::channel(StageId from, StageId to)
{
    if (to.value == from.value + 1)
        return *m_forward[from.index()];
    if (from.value == to.value + 1)
        return *m_backward[to.index()];
    throw Error("no channel from stage " + std::to_string(from.value) + " to stage " + std::to_string(to.value));
}

// One worker thread per device, each pinned to the device's cores with its GEMM team, running the
// device's actions; a failure aborts the others' waits. Returns when all have finished.
void PipelineRunner::runWorkers(const std::vector<HostBatch>& batches, double lr, IterationResult& result,
    std::vector<std::exception_ptr>& errors, std::vector<std::vector<SimEvent>>& events)
{
    const auto M = batches.size();
    std::vector<std::jthread> workers;
    for (std::size_t d = 0; d < m_schedule.devices.size(); ++d) {
        workers.emplace_back([&, d] {
            pinCurrentThread(m_devices[d].cores);
            const GemmTeamScope team(m_teams[d].get());
            IterationResult local;
            try {
                runDevice(d, batches, lr, local);
            } catch (...) {
                errors[d] = std::current_exception();
                m_abort->abort();
            }
            finishCopies(d, local);
            events[d] = std::move(local.events);
            result.deviceBusyNs[d] = local.deviceBusyNs.empty() ? 0 : local.deviceBusyNs[0];
            for (std::size_t m = 0; m < M; ++m) {
                if (!std::isnan(local.microBatchLosses[m]))
                    result.microBatchLosses[m] = local.microBatchLosses[m];
            }
        });
    }
}

// The cause first: a worker that failed by itself, not one whose wait was aborted by it.
void PipelineRunner::rethrowFirstCause(const std::vector<std::exception_ptr>& errors)
{
    std::exception_ptr cause;
    for (const auto& e : errors) {
        if (!e)
            continue;
        try {
            std::rethrow_exception(e);
        } catch (const Aborted&) {
            cause = cause ? cause : e;
        } catch (...) {
            std::rethrow_exception(e);
        }
    }
    if (cause)
        std::rethrow_exception(cause);
}

IterationResult PipelineRunner::run(
    const std::vector<HostBatch>& batches, double lr, std::int64_t iteration, bool timed)
{
    if (m_abort->aborted())
        throw Error("the pipeline stopped after an earlier failure; start a new run");
    const auto M = static_cast<std::size_t>(m_schedule.spec.microBatches);
    if (batches.size() != M)
        throw Error(
            "the schedule has " + std::to_string(M) + " micro-batches, the data " + std::to_string(batches.size()));
    m_iteration = iteration;
    m_timed = timed;
    if (m_options.tracer != nullptr) // nothing recorded through a step whose timeline is not kept
        m_options.tracer->setCollecting(timed);
    for (auto& s : m_stages)
        s->beginIteration(iteration);
    m_tied->reset();
    m_deposited.assign(m_stages.size(), 0);
    for (auto& d : m_devices)
        d.memory->resetPeak();
    IterationResult result;
    result.microBatchLosses.assign(M, std::numeric_limits<double>::quiet_NaN());
    result.deviceBusyNs.assign(m_schedule.devices.size(), 0);
    std::vector<std::exception_ptr> errors(m_schedule.devices.size());
    std::vector<std::vector<SimEvent>> events(m_schedule.devices.size());
    m_eventIds.assign(m_schedule.devices.size(), {});
    m_start = std::chrono::steady_clock::now();
    runWorkers(batches, lr, result, errors, events);
    const bool failed = std::any_of(errors.begin(), errors.end(), [](const auto& e) { return e != nullptr; });
    if (m_timed && m_options.tracer != nullptr && !failed) {
        applyTracedSpans(result, events);
    } else {
        if (!m_timed && !failed) { // the workers queued their last actions without waiting
            synchronizeAll();
            // Drop what a tracer that cannot stop collecting recorded, for no timed step to find.
            if (m_options.tracer != nullptr)
                (void)m_options.tracer->finish(m_start);
        }
        result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    }
    if (!m_timed) // queue times, not the devices': only an emulated link's sends keep theirs
        result.deviceBusyNs.clear();
    rethrowFirstCause(errors);
    for (auto& ev : events)
        result.events.insert(result.events.end(), ev.begin(), ev.end());
    double sum = 0;
    for (double l : result.microBatchLosses)
        sum += l;
    result.loss = sum / static_cast<double>(M);
    for (std::size_t d = 0; d < m_schedule.devices.size(); ++d) {
        result.devicePeakBytes.push_back(m_devices[d].memory->peak());
        result.devicePeakByUse.push_back(m_devices[d].memory->peakByUse());
        result.devicePeakWithoutMessages.push_back(m_devices[d].memory->peakWithoutMessages());
    }
    std::int64_t total = 0;
    for (const auto& c : m_forward)
        total += c->bytesSent();
    for (const auto& c : m_backward)
        total += c->bytesSent();
    result.transferredBytes = total - m_transferred;
    m_transferred = total;
    if (m_options.chunks.enabled) {
        result.deviceChunks = chunkCounts();
        if (!m_chunksPlaced)
            placeChunks();
        m_chunksPlaced = true;
    }
    return result;
}

void PipelineRunner::runDevice(
    std::size_t device, const std::vector<HostBatch>& batches, double lr, IterationResult& result)
{
    result.microBatchLosses.assign(batches.size(), std::numeric_limits<double>::quiet_NaN());
    result.deviceBusyNs.assign(1, 0);
    const auto& list = m_schedule.devices[device];
    auto* tracer = m_timed ? m_options.tracer : nullptr;
    for (std::size_t index = 0; index < list.size(); ++index) {
        const auto& a = list[index];
        if (m_abort->aborted())
            return;
        // Tracer ids: the device in the high bits, the action's place in its list below (never 0).
        const auto id = ((static_cast<std::uint64_t>(device) + 1) << 40U) | index;
        auto start = std::chrono::steady_clock::now();
        ActionOutcome outcome;
        try {
            if (tracer != nullptr) {
                tracer->begin(id);
                try {
                    outcome = runAction(device, a, batches, lr, result);
                } catch (...) {
                    try { // a tracer's ranges nest per thread: closed on the way out too
                        tracer->end();
                    } catch (...) { // the action's own failure is the one to report
                    }
                    throw;
                }
                tracer->end();
            } else {
                outcome = runAction(device, a, batches, lr, result);
            }
            // Without a tracer the measured timeline is the device's only if an action ends when its
            // work has run, not when it was queued (a no-op on the CPU, whose calls return when
            // done). A device that swaps waits too: its copy streams order each copy after the
            // compute queued when the copy starts, so a worker far ahead would hold every swap
            // back behind that whole queue.
            if ((m_timed && tracer == nullptr) || m_toHost[device] || m_sharedStream[device])
                m_devices[device].backend->synchronize();
        } catch (const OutOfMemoryError& e) {
            throw OutOfMemoryError(m_devices[device].name + ", stage " + std::to_string(a.stage.value) + ", "
                + formatAction(a) + ": " + e.what());
        } catch (const Aborted& e) {
            throw Aborted(m_devices[device].name + ", stage " + std::to_string(a.stage.value) + ", " + formatAction(a)
                + ": " + e.what());
        } catch (const std::exception& e) {
            throw Error(m_devices[device].name + ", stage " + std::to_string(a.stage.value) + ", " + formatAction(a)
                + ": " + e.what());
        }
        auto end = std::chrono::steady_clock::now();
        if (outcome.transfer) // the send's event is its time on the link
            std::tie(start, end) = std::pair(outcome.transfer->start, outcome.transfer->end);
        const double startNs = std::chrono::duration<double, std::nano>(start - m_start).count();
        const double endNs = std::chrono::duration<double, std::nano>(end - m_start).count();
        if (isCompute(a.type))
            result.deviceBusyNs[0] += endNs - startNs;
        // A copy's event is the copy stream's (finishCopies); the worker only queued it.
        const bool queued = (a.type == ActionType::SwapOut || a.type == ActionType::SwapIn) && m_toHost[device];
        if (m_options.recordEvents && !queued && a.type != ActionType::RecvForward && a.type != ActionType::RecvBackward
            && (m_timed || outcome.transfer)) {
            auto& ev = result.events.emplace_back();
            ev = SimEvent { DeviceId(static_cast<std::uint32_t>(device)), streamOf(a.type), a.type, a.stage,
                a.microBatch, startNs, endNs, static_cast<double>(outcome.bytes) };
            // A send over an emulated link keeps the link's time; everything else the device's.
            m_eventIds[device].push_back(tracer != nullptr && !outcome.transfer ? id : 0);
        }
    }
}

void PipelineRunner::synchronizeAll()
{
    // The iteration ends when every device has run what its worker queued; a failure that only
    // surfaces now (an asynchronous kernel fault) names the device whose last actions it came from.
    for (auto& d : m_devices) {
        try {
            d.backend->synchronize();
        } catch (const std::exception& e) {
            m_abort->abort();
            throw Error(d.name + ", after its last actions of the iteration: " + e.what());
        }
    }
}

void PipelineRunner::applyTracedSpans(IterationResult& result, std::vector<std::vector<SimEvent>>& events)
{
    synchronizeAll();
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    const auto spans = m_options.tracer->finish(m_start);
    for (std::size_t d = 0; d < events.size(); ++d) {
        const auto& ids = m_eventIds[d];
        double busy = 0;
        for (std::size_t i = 0; i < events[d].size(); ++i) {
            auto& ev = events[d][i];
            const auto span = i < ids.size() && ids[i] != 0 ? spans.find(ids[i]) : spans.end();
            double ownNs = -1;
            if (span != spans.end()) {
                ev.startNs = span->second.startNs;
                ev.endNs = span->second.endNs;
                ownNs = span->second.busyNs;
                ++result.tracedActions;
            }
            if (i < ids.size() && isCompute(ev.action))
                busy += ownNs >= 0 ? ownNs : ev.endNs - ev.startNs;
        }
        if (m_options.recordEvents)
            result.deviceBusyNs[d] = busy;
    }
}

void PipelineRunner::finishCopies(std::size_t device, IterationResult& result)
{
    if (!m_toHost[device])
        return;
    m_fromHost[device]->drain();
    m_toHost[device]->drain();
    for (auto* stream : { m_toHost[device].get(), m_fromHost[device].get() }) {
        for (const auto& r : stream->takeRecords()) {
            if (!m_options.recordEvents)
                continue;
            result.events.push_back(
                { DeviceId(static_cast<std::uint32_t>(device)), streamOf(r.action.type), r.action.type, r.action.stage,
                    r.action.microBatch, std::chrono::duration<double, std::nano>(r.start - m_start).count(),
                    std::chrono::duration<double, std::nano>(r.end - m_start).count(), static_cast<double>(r.bytes) });
        }
    }
}

PipelineRunner::ActionOutcome PipelineRunner::runAction(
    std::size_t device, const Action& a, const std::vector<HostBatch>& batches, double lr, IterationResult& result)
{
    auto& stage = *m_stages[a.stage.index()];
    const auto mb = a.microBatch;
    const StageId next(a.stage.value + 1);
    const StageId prev(a.stage.value - 1);
    switch (a.type) {
    case ActionType::Forward:
        stage.forward(mb, batches.at(mb.index()));
        if (stage.hasLoss())
            result.microBatchLosses[mb.index()] = stage.loss(mb).value_or(0.0);
        break;
    case ActionType::Backward:
        stage.backward(mb, BackwardMode::Full);
        break;
    case ActionType::BackwardInput:
        stage.backward(mb, BackwardMode::InputOnly);
        break;
    case ActionType::BackwardWeight:
        stage.backwardWeight(mb);
        break;
    case ActionType::SendForward: {
        auto message = stage.takeOutbound(mb);
        const auto bytes = messageBytes(message);
        auto transfer = channel(a.stage, next).send(mb, std::move(message)); // copies before it returns
        stage.outboundSent(mb);
        return { bytes, transfer };
    }
    case ActionType::RecvForward:
        stage.receiveActivations(mb, channel(prev, a.stage).receive(mb));
        break;
    case ActionType::SendBackward: {
        auto message = stage.takeInputGradients(mb);
        const auto bytes = messageBytes(message);
        return { bytes, channel(a.stage, prev).send(mb, std::move(message)) };
    }
    case ActionType::RecvBackward:
        stage.receiveGradients(mb, channel(next, a.stage).receive(mb));
        break;
    case ActionType::SwapOut:
        stage.swapOut(mb);
        break;
    case ActionType::SwapIn:
        stage.swapIn(mb);
        break;
    case ActionType::Recompute:
        stage.recompute(mb);
        break;
    case ActionType::OptimizerStep:
        if (m_schedule.spec.kind == ScheduleKind::PipeDream) {
            stage.optimizerStep(lr, 1.0F);
            break;
        }
        if (m_schedule.spec.kind == ScheduleKind::FTPipeAsync) {
            // One step per A micro-batches (the iteration's last group may be shorter): the mean of
            // their gradients, as a synchronous step over A micro-batches.
            const int every = m_schedule.spec.groupSize;
            stage.optimizerStep(lr, 1.0F / static_cast<float>(static_cast<int>(mb.value) % every + 1));
            break;
        }
        if (m_tied->any()) {
            // Every stage of this device is done with its backwards (OPT_STEPs come last): hand in
            // all their tied gradients before waiting, so two devices never wait on each other.
            for (auto& s : m_stages) {
                if (m_schedule.deviceOf(s->id()).index() == device && !m_deposited[s->id().index()]) {
                    m_tied->deposit(*s, *m_devices[device].backend);
                    m_deposited[s->id().index()] = true;
                }
            }
            m_tied->apply(stage, *m_devices[device].backend, m_graph);
        }
        stage.optimizerStep(lr, 1.0F / static_cast<float>(m_schedule.spec.microBatches));
        break;
    }
    return {};
}

} // namespace ps::engine
