#include "plan/stage_model.h"

#include "graph/op_cost.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace ps {
namespace {

    constexpr double kInfinity = std::numeric_limits<double>::infinity();

    std::vector<double> prefixSums(const std::vector<double>& v)
    {
        std::vector<double> p(v.size() + 1, 0);
        for (std::size_t i = 0; i < v.size(); ++i)
            p[i + 1] = p[i] + v[i];
        return p;
    }

    // The next generation of per-tensor stamps (all cleared when the counter wraps, where stale
    // stamps could match again).
    std::uint32_t nextStamp(std::uint32_t& generation, std::vector<std::uint32_t>& stamps)
    {
        if (++generation == 0) {
            std::fill(stamps.begin(), stamps.end(), 0);
            generation = 1;
        }
        return generation;
    }

    // The messages that can wait at each stage's device under `spec`, with the closed-form
    // in-flight count as a point of its own; a schedule without a generator keeps one message each
    // way beside it.
    std::vector<std::vector<WaitPoint>> waitPointsOf(const ScheduleSpec& spec)
    {
        std::vector<std::vector<WaitPoint>> points(static_cast<std::size_t>(std::max(1, spec.stages)));
        try {
            points = messageWaitPoints(generateSchedule(spec));
        } catch (const Error&) {
            for (auto& p : points)
                p.clear();
        }
        for (std::size_t s = 0; s < points.size(); ++s) {
            const int inFlight = inFlightMicroBatches(spec, static_cast<int>(s));
            points[s].push_back({ inFlight, points[s].empty() ? 1 : 0, points[s].empty() ? 1 : 0 });
        }
        return points;
    }

} // namespace

StageModel::StageModel(const Graph& graph, const Profile& profile, const ScheduleSpec& schedule, const Cluster& cluster,
    double microBatch, const PlannerLimits& limits, bool directSends)
    : m_graph(graph)
    , m_profile(profile)
    , m_schedule(schedule)
    , m_cluster(cluster)
    , m_microBatch(microBatch)
    , m_limits(limits)
    , m_directSends(directSends)
    , m_capacity(
          limits.memoryLimitBytes > 0 ? limits.memoryLimitBytes : static_cast<double>(cluster.device.memoryBytes))
    , m_scale(microBatch / static_cast<double>(std::max<std::int64_t>(1, graph.info().microBatch)))
    , m_autocast(planAutocast(graph, profile.setup.mixedPrecision()))
    , m_workScale(activationScale(profile.setup))
    , m_facts(RangeFacts::of(graph))
    , m_costs(m_facts->costs())
    , m_flow(m_facts->flow())
{
    if (schedule.kind == ScheduleKind::Interleaved)
        throw Error("planner: interleaved schedules place several stages per device; plan with 1f1b and interleave "
                    "in simulate");
    if (schedule.stages < 1 || static_cast<std::size_t>(schedule.stages) > graph.nodeCount())
        throw Error("planner: cannot split the model's " + std::to_string(graph.nodeCount()) + " nodes into "
            + std::to_string(schedule.stages) + " stages (at least one node per stage)");
    if (profile.nodes.size() != graph.nodeCount())
        throw Error("planner: the profile has " + std::to_string(profile.nodes.size()) + " nodes, the graph "
            + std::to_string(graph.nodeCount()));
    // Per stage: state bytes per parameter (stashed weight versions included) and micro-batches in
    // flight, asked for in every range the searches try.
    const auto b = bytesPerParameter(profile.setup);
    for (int s = 0; s < schedule.stages; ++s) {
        const double versions = weightVersions(m_schedule, s);
        m_stageBytesPerParameter.push_back(
            b.weights + b.masterWeights + b.gradients + b.optimizerStates + b.weights * (versions - 1));
        m_stageInFlight.push_back(inFlightMicroBatches(m_schedule, s));
    }
    if (!directSends)
        m_waitPoints = waitPointsOf(m_schedule);
    precomputeNodes();
    precomputeCuts();
}

void StageModel::precomputeNodes()
{
    m_firstReader.assign(m_graph.tensorCount(), 0);
    for (std::size_t n = m_graph.nodeCount(); n-- > 0;) {
        for (auto in : m_graph.nodes()[n].inputs)
            m_firstReader[in.index()] = n + 1;
    }
    m_root.resize(m_graph.tensorCount());
    for (const auto& t : m_graph.tensors())
        m_root[t.id.index()] = storageRoot(m_graph, t.id);
    std::vector<double> compute;
    std::vector<double> params;
    std::vector<double> saved;
    std::vector<double> firstParams(m_graph.nodeCount(), 0);
    for (const auto& t : m_graph.tensors()) {
        if (t.kind == TensorKind::Parameter && m_firstReader[t.id.index()] > 0)
            firstParams[m_firstReader[t.id.index()] - 1] += static_cast<double>(numElements(t.shape));
    }
    for (const auto& n : m_graph.nodes()) {
        const auto& p = m_profile.nodes[n.id.index()];
        m_nodeFwd.push_back(p.forwardNs.at(m_microBatch));
        m_nodeBwd.push_back(p.backwardNs.at(m_microBatch));
        m_nodeW.push_back(p.weightGradNs.at(m_microBatch));
        compute.push_back(m_nodeFwd.back() + m_nodeBwd.back());
        params.push_back(static_cast<double>(m_costs[n.id.index()].parameterCount));
        saved.push_back(m_autocast.savedBytes(m_graph, n, m_costs[n.id.index()]) * m_scale);
    }
    m_prefixCompute = prefixSums(compute);
    m_prefixParams = prefixSums(params);
    m_prefixSaved = prefixSums(saved);
    m_prefixFirstParams = prefixSums(firstParams);
    m_stamp.assign(m_graph.tensorCount(), 0);
}

void StageModel::precomputeCuts()
{
    // A tensor produced by node p and last read by node q crosses every cut c with p < c <= q.
    const auto consumers = m_graph.consumers();
    const auto needsGrad = tensorsRequiringGrad(m_graph);
    std::vector<double> diff(m_graph.nodeCount() + 2, 0);
    std::vector<double> gradDiff(m_graph.nodeCount() + 2, 0);
    for (const auto& t : m_graph.tensors()) {
        if (t.kind != TensorKind::Activation || !t.producer.valid())
            continue;
        std::size_t last = t.producer.index();
        for (auto n : consumers[t.id.index()])
            last = std::max(last, n.index());
        const double bytes = static_cast<double>(numBytes(t.shape, t.dtype)) * m_scale * m_autocast.scale(t.id);
        diff[t.producer.index() + 1] += bytes;
        diff[last + 1] -= bytes;
        if (needsGrad[t.id.index()]) { // its gradient flows back across the same cuts
            gradDiff[t.producer.index() + 1] += bytes;
            gradDiff[last + 1] -= bytes;
        }
    }
    m_cutBytes.assign(m_graph.nodeCount() + 1, 0);
    m_cutGradBytes.assign(m_graph.nodeCount() + 1, 0);
    double running = 0;
    double runningGrad = 0;
    for (std::size_t c = 0; c <= m_graph.nodeCount(); ++c) {
        running += diff[c];
        runningGrad += gradDiff[c];
        m_cutBytes[c] = running;
        m_cutGradBytes[c] = runningGrad;
    }
}

double StageModel::computeNs(std::size_t begin, std::size_t end) const
{
    return m_prefixCompute[end] - m_prefixCompute[begin];
}

double StageModel::tensorBytes(TensorId tensor) const
{
    const auto& t = m_graph.tensor(tensor);
    return static_cast<double>(numBytes(t.shape, t.dtype)) * m_scale * m_autocast.scale(tensor);
}

// Dataflow partitions (FTPipe §4): the stage receives the tensors its nodes read from earlier
// nodes and the gradients of its own tensors read later, each once; it sends each of its tensors
// read later once here (the per-consumer copies are computeStageCosts's, which knows the stages).
void StageModel::setDirectTraffic(std::size_t begin, std::size_t end, StageEvaluation& e) const
{
    const auto gen = nextStamp(m_generation, m_stamp);
    double receivedForward = 0;
    double sentForward = 0;
    double gradients = 0;
    for (std::size_t n = begin; n < end; ++n) {
        const auto& node = m_graph.nodes()[n];
        for (auto in : node.inputs) {
            const auto& t = m_graph.tensor(in);
            if (t.producer.valid() && t.producer.index() < begin && m_stamp[in.index()] != gen) {
                m_stamp[in.index()] = gen;
                receivedForward += tensorBytes(in);
                if (m_flow.requiresGrad[in.index()])
                    gradients += tensorBytes(in); // sent back: the producer's gradient
            }
        }
        for (auto out : node.outputs) {
            if (m_flow.lastReader[out.index()] > end) { // read after the stage
                sentForward += tensorBytes(out);
                if (m_flow.requiresGrad[out.index()])
                    e.staticBytes += tensorBytes(out); // its gradient arrives while the stage works
            }
        }
    }
    e.cost.sendForwardBytes = sentForward;
    e.cost.sendBackwardBytes = gradients;
    e.staticBytes += receivedForward;
}

double StageModel::cutBytes(std::size_t cut) const
{
    return cut == 0 || cut >= m_cutBytes.size() - 1 ? 0 : m_cutBytes[cut];
}

double StageModel::cutGradBytes(std::size_t cut) const
{
    return cut == 0 || cut >= m_cutGradBytes.size() - 1 ? 0 : m_cutGradBytes[cut];
}

double StageModel::staticBytesFor(double parameterCount, int stage) const
{
    return parameterCount * m_stageBytesPerParameter.at(static_cast<std::size_t>(stage));
}

double StageModel::approxMemoryBytes(std::size_t begin, std::size_t end, int stage) const
{
    const double params = m_prefixParams[end] - m_prefixParams[begin];
    const double act = m_prefixSaved[end] - m_prefixSaved[begin];
    return staticBytesFor(params, stage) + m_stageInFlight.at(static_cast<std::size_t>(stage)) * act;
}

StageEvaluation StageModel::evaluate(std::size_t begin, std::size_t end, int stage) const
{
    if (!m_cacheEvaluations)
        return evaluateUncached(begin, end, stage);
    const RangeKey key { begin, end, stage };
    if (const auto it = m_evaluations.find(key); it != m_evaluations.end())
        return it->second;
    auto e = evaluateUncached(begin, end, stage);
    if (m_evaluations.size() >= kEvaluationCacheLimit)
        m_evaluations.clear();
    m_evaluations.emplace(key, e);
    return e;
}

bool StageModel::parametersCanFit() const
{
    const auto n = nodeCount();
    std::size_t b = 0;
    for (int x = 0; x < stages() && b < n; ++x) {
        // Stages may take nothing here: a later one may hold more (PipeDream's stages stash fewer
        // weight versions toward the end), so a relaxation, and a necessary condition for a fit.
        std::size_t lo = b; // fits (nothing)
        std::size_t hi = n + 1; // first that does not, or past the end
        while (hi - lo > 1) {
            const auto mid = lo + (hi - lo) / 2;
            (minimumStaticBytes(b, mid, x) <= m_capacity ? lo : hi) = mid;
        }
        b = lo;
    }
    return b >= n;
}

// The stage's workspace: its largest node scratch, or the backward's working set where larger (B
// and W apart where zero-bubble splits the backward), each convolution's batch-independent
// columns counted at its own node where `cpuScratch`; and the output gradients a split B holds for W.
void StageModel::setWorkingSets(std::size_t begin, std::size_t end, bool cpuScratch, StageCost& c) const
{
    const double nodeScratch = c.workspaceBytes;
    const double scale = m_scale * m_workScale;
    c.workspaceBytes = std::max(
        nodeScratch, m_facts->backwardWorking(m_graph, begin, end, BackwardPass::Full)->peak(scale, cpuScratch));
    c.splitWorkspaceBytes = c.workspaceBytes;
    if (m_schedule.kind == ScheduleKind::ZeroBubbleH1) {
        const double weightPass = m_facts->weightPass(m_graph, begin, end)->peak(scale, cpuScratch);
        const double inputPass =
            m_facts->backwardWorking(m_graph, begin, end, BackwardPass::InputOnly)->peak(scale, cpuScratch);
        c.inputPassExtraBytes = std::max(0.0, inputPass - nodeScratch);
        c.weightPassExtraBytes = std::max(0.0, weightPass - nodeScratch);
        c.splitWorkspaceBytes = nodeScratch + std::max(c.inputPassExtraBytes, c.weightPassExtraBytes);
    }
    c.weightGradHeldBytes = static_cast<double>(m_facts->weightGradHeld(m_graph, begin, end)) * scale;
    // firstBackwardExtraBytes only moves the simulator's curve (computeStageCosts sets it), never a
    // plan's fit: the static bytes planners check hold every gradient already.
}

double StageModel::firstBackwardExtraBytes(std::size_t begin, std::size_t end, double workspaceBytes) const
{
    const auto growing = m_facts->backwardWorking(m_graph, begin, end, BackwardPass::Full, true);
    return std::max(0.0, growing->peak(m_scale * m_workScale, cpuEngineScratch(m_profile.deviceKind)) - workspaceBytes);
}

StageEvaluation StageModel::evaluateUncached(std::size_t begin, std::size_t end, int stage) const
{
    StageEvaluation e;
    auto& c = e.cost;
    const auto gen = nextStamp(m_generation, m_stamp);
    std::vector<TensorId> weightGradRoots;
    const bool cpuScratch = cpuEngineScratch(m_profile.deviceKind);
    const auto pending = forwardPendingKept(m_graph, m_flow, begin, end);
    for (std::size_t n = begin; n < end; ++n) {
        c.forwardNs += m_nodeFwd[n];
        c.backwardNs += m_nodeBwd[n];
        c.weightGradNs += m_nodeW[n];
        const auto& oc = m_costs[n];
        c.workspaceBytes = std::max(c.workspaceBytes, // on top of the micro-batch's activations kept so far
            static_cast<double>(oc.workspaceBytes - pending[n - begin]) * m_scale * m_workScale
                + (cpuScratch ? static_cast<double>(oc.fixedWorkspaceBytes) : 0.0));
        c.activationBytes += static_cast<double>(oc.savedExtraBytes) * m_scale;
        const auto& node = m_graph.nodes()[n];
        for (auto t : oc.savedTensors) {
            if (m_autocast.savesOwnHalfCopy(m_graph, node, t)) {
                c.activationBytes += static_cast<double>(m_flow.bytes[t.index()]) * m_scale * 0.5;
                continue;
            }
            const auto root = m_root[t.index()];
            if (m_stamp[root.index()] != gen) {
                m_stamp[root.index()] = gen;
                c.activationBytes += static_cast<double>(m_flow.bytes[root.index()]) * m_scale * m_autocast.scale(root);
            }
        }
        for (auto in : m_graph.nodes()[n].inputs) {
            const auto& t = m_graph.tensor(in);
            if (t.kind == TensorKind::Parameter && m_stamp[in.index()] != gen) {
                m_stamp[in.index()] = gen;
                c.parameterCount += numElements(t.shape);
                if (m_firstReader[in.index()] <= begin || m_flow.lastReader[in.index()] > end) // read elsewhere too
                    c.tiedParameters.push_back({ in.value,
                        static_cast<double>(numElements(t.shape)) * bytesPerParameter(m_profile.setup).gradients });
            }
        }
        for (auto t : oc.savedForWeightGrad) {
            if (m_autocast.savesOwnHalfCopy(m_graph, node, t)) // the GEMM's own half copy
                c.weightGradOnlyBytes += static_cast<double>(m_flow.bytes[t.index()]) * m_scale * 0.5;
            else
                weightGradRoots.push_back(m_root[t.index()]);
        }
    }
    // Storages only W reads (counted once), as computeStageCosts does.
    std::sort(weightGradRoots.begin(), weightGradRoots.end());
    weightGradRoots.erase(std::unique(weightGradRoots.begin(), weightGradRoots.end()), weightGradRoots.end());
    for (auto root : weightGradRoots) {
        c.weightGradOnlyBytes += static_cast<double>(m_flow.bytes[root.index()]) * m_scale * m_autocast.scale(root);
    }
    c.weightGradOnlyBytes = std::min(c.weightGradOnlyBytes, c.activationBytes);
    std::sort(c.tiedParameters.begin(), c.tiedParameters.end(),
        [](const TiedParameter& a, const TiedParameter& b) { return a.tensor < b.tensor; });
    setWorkingSets(begin, end, cpuScratch, c);
    c.sendForwardBytes = end < nodeCount() ? cutBytes(end) : 0;
    c.sendBackwardBytes = begin > 0 && begin < nodeCount() ? m_cutGradBytes[begin] : 0;
    e.staticBytes = staticBytesFor(static_cast<double>(c.parameterCount), stage)
        + (m_schedule.kind == ScheduleKind::ZeroBubbleH1 ? c.splitWorkspaceBytes : c.workspaceBytes);
    if (m_directSends) {
        setDirectTraffic(begin, end, e);
    } else { // one message each way; how many can wait at once is the schedule's (peakUnder)
        e.receivedForwardBytes = cutBytes(begin);
        e.receivedBackwardBytes = end < nodeCount() ? m_cutGradBytes[end] : 0;
    }
    e.peakBytes = peakUnder(e, stage, {});
    e.timeNs = c.forwardNs + c.backwardNs;
    e.fits = e.peakBytes <= m_capacity;
    // FTPipe's asynchronous schedule keeps only border inputs and recomputes inside B (§4.2.1),
    // except in the last stage.
    const bool ftpipe = m_schedule.kind == ScheduleKind::FTPipeAsync;
    const bool lastExempt = ftpipe || !m_limits.checkpointLastStage;
    if ((m_limits.checkpointStages || ftpipe) && (!lastExempt || stage + 1 < stages()))
        checkpointStage(begin, end, stage, e);
    else if (!e.fits)
        optimizeMemory(begin, end, stage, e);
    return e;
}

void StageModel::checkpointStage(std::size_t begin, std::size_t end, int stage, StageEvaluation& e) const
{
    StageMemoryPlan plan;
    for (const auto& s : savedTensors(begin, end)) {
        if (std::isfinite(s.recomputeNs)) { // produced here; the stage's inputs stay
            plan.recomputedBytes += s.bytes;
            plan.recomputedTensors.push_back(s.root);
        }
    }
    plan.recomputeNs = e.cost.forwardNs; // the whole forward again, not only the producers
    e.overheadNs = plan.recomputedTensors.empty() ? 0 : plan.recomputeNs;
    e.timeNs = e.cost.forwardNs + e.cost.backwardNs + e.overheadNs;
    e.peakBytes = peakUnder(e, stage, plan);
    e.memoryPlan = std::move(plan);
    e.fits = e.peakBytes <= m_capacity;
    e.overBytes = e.fits ? 0 : e.peakBytes - m_capacity;
    accountRecompute(begin, end, stage, e);
}

std::vector<SavedTensorInfo> StageModel::savedTensors(std::size_t begin, std::size_t end) const
{
    // Per storage: the last node of the stage that saves it (its backward use comes first).
    // Under mixed precision a GEMM saves its own half copy of an fp32 input: counted with the
    // storage it was cast from (recomputing or swapping that storage covers the copy too).
    // root -> index in roots, valid where the root's stamp is this call's (no map per call)
    m_savedStamp.resize(m_graph.tensorCount(), 0);
    const auto gen = nextStamp(m_savedGeneration, m_savedStamp);
    m_savedPosition.resize(m_graph.tensorCount(), 0);
    std::vector<std::size_t> lastSaver;
    std::vector<TensorId> roots;
    std::vector<double> bytes; // of one micro-batch at the graph's batch, as the stage holds them
    std::vector<bool> storageSaved;
    for (std::size_t n = begin; n < end; ++n) {
        const auto& node = m_graph.nodes()[n];
        for (auto t : m_costs[n].savedTensors) {
            const auto root = m_root[t.index()];
            if (m_savedStamp[root.index()] != gen) {
                m_savedStamp[root.index()] = gen;
                m_savedPosition[root.index()] = roots.size();
                roots.push_back(root);
                lastSaver.push_back(n);
                bytes.push_back(0);
                storageSaved.push_back(false);
            } else {
                lastSaver[m_savedPosition[root.index()]] = n;
            }
            const auto i = m_savedPosition[root.index()];
            if (m_autocast.savesOwnHalfCopy(m_graph, node, t)) {
                bytes[i] += static_cast<double>(m_flow.bytes[t.index()]) * 0.5;
            } else if (!storageSaved[i]) {
                storageSaved[i] = true;
                bytes[i] += static_cast<double>(m_flow.bytes[root.index()]) * m_autocast.scale(root);
            }
        }
    }
    std::vector<double> fwdEnd(end - begin + 1, 0); // fwdEnd[i]: forward time through node begin+i-1
    for (std::size_t n = begin; n < end; ++n)
        fwdEnd[n - begin + 1] = fwdEnd[n - begin] + m_nodeFwd[n];
    std::vector<double> bwdAfter(end - begin + 1, 0); // backward time of the nodes after index i
    for (std::size_t i = end - begin; i-- > 0;)
        bwdAfter[i] = bwdAfter[i + 1] + m_nodeBwd[begin + i];
    std::vector<SavedTensorInfo> out;
    for (std::size_t i = 0; i < roots.size(); ++i) {
        const auto& t = m_graph.tensor(roots[i]);
        if (t.kind != TensorKind::Activation)
            continue; // the loader's data: neither recomputed nor swapped
        const auto local = lastSaver[i] - begin;
        SavedTensorInfo s;
        s.root = roots[i];
        s.bytes = bytes[i] * m_scale;
        s.forwardEndNs = fwdEnd[local + 1];
        s.backwardUseNs = fwdEnd.back() + bwdAfter[local + 1];
        const bool producedHere = t.producer.valid() && t.producer.index() >= begin && t.producer.index() < end;
        s.recomputeNs = producedHere ? m_nodeFwd[t.producer.index()] : kInfinity;
        out.push_back(s);
    }
    return out;
}

} // namespace ps
