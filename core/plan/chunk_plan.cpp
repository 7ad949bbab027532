// PatrickStar's static side: the chunk-tensor mapping (§6.1), the chunk-size search, the warm-up
// trace of non-model memory per operator (§8.1), and planChunks, which places the optimizer
// states (§8.2), runs the replay (chunk_replay.cpp), checks the host limit and estimates time.
#include "plan/chunk_plan.h"

#include "graph/graph_summary.h"
#include "graph/op_cost.h"
#include "util/error.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ps {

std::int64_t ChunkLayout::parameterElements() const
{
    std::int64_t n = 0;
    for (const auto& s : slots)
        n += s.elements;
    return n;
}

double ChunkLayout::wasteFraction() const
{
    const double allocated = static_cast<double>(chunkElements) * chunkCount();
    return allocated > 0 ? 1.0 - static_cast<double>(parameterElements()) / allocated : 0.0;
}

ChunkLayout buildChunkLayout(std::span<const ChunkParameter> parameters, std::int64_t chunkElements, int processes)
{
    if (chunkElements < 1)
        throw Error("chunk layout: the chunk size must be at least one element");
    if (processes < 1)
        throw Error("chunk layout: needs at least one process");
    ChunkLayout layout;
    layout.chunkElements = chunkElements;
    layout.processes = processes;
    for (const auto& p : parameters) {
        if (p.elements > chunkElements)
            throw Error("chunk layout: parameter tensor " + std::to_string(p.tensor.value) + " has "
                + std::to_string(p.elements) + " elements, more than a chunk of " + std::to_string(chunkElements));
        // §6.1: "if the tensor exceeds the remaining space of the chunk, a new chunk is appended".
        if (layout.usedElements.empty() || layout.usedElements.back() + p.elements > chunkElements)
            layout.usedElements.push_back(0);
        const auto chunk = static_cast<std::int32_t>(layout.usedElements.size() - 1);
        layout.slots.push_back({ p.tensor, chunk, layout.usedElements.back(), p.elements });
        layout.usedElements.back() += p.elements;
    }
    // §7: a communication group holds one chunk of every rank; pad the last group.
    while (layout.usedElements.size() % static_cast<std::size_t>(processes) != 0)
        layout.usedElements.push_back(0);
    return layout;
}

ChunkParameters chunkParameters(const Graph& graph, bool embeddingOnCpu)
{
    std::vector<char> onHost(graph.tensorCount(), 0);
    if (embeddingOnCpu) { // §8.2: "embedding parameters are not managed by chunk"
        for (const auto& node : graph.nodes()) {
            for (auto in : node.inputs) {
                if (node.op == OpType::Embedding && graph.tensor(in).kind == TensorKind::Parameter)
                    onHost[in.index()] = 1;
            }
        }
    }
    ChunkParameters result;
    std::vector<char> seen(graph.tensorCount(), 0);
    for (const auto& node : graph.nodes()) {
        for (auto in : node.inputs) {
            const auto& t = graph.tensor(in);
            if (t.kind != TensorKind::Parameter || seen[in.index()])
                continue;
            seen[in.index()] = 1;
            (onHost[in.index()] ? result.host : result.chunked).push_back({ in, numElements(t.shape) });
        }
    }
    return result;
}

namespace {

    std::int64_t largestElements(std::span<const ChunkParameter> parameters)
    {
        std::int64_t largest = 0;
        for (const auto& p : parameters)
            largest = std::max(largest, p.elements);
        return largest;
    }

    // Why a laid-out chunk size cannot run, or empty (§9.2.1's failure condition, per rank).
    std::string chunkSizeProblem(const ChunkLayout& layout, const ChunkSizeLimits& limits)
    {
        const double group = layout.processes * layout.chunkBytes(ChunkList::ParamFp16);
        if (group > limits.gpuChunkBytes)
            return "GPU: a gathered group of " + std::to_string(layout.processes) + " fp16 chunks ("
                + formatBytes(group) + ") does not fit the " + formatBytes(std::max(0.0, limits.gpuChunkBytes))
                + " the GPU has left at peak non-model memory";
        const double local = layout.localChunkCount() * layout.chunkElements * kChunkBytesPerParameter;
        if (local > limits.gpuChunkBytes + limits.hostChunkBytes)
            return "host RAM: this rank's chunks (" + formatBytes(local) + ") exceed its host share plus GPU room ("
                + formatBytes(limits.gpuChunkBytes + limits.hostChunkBytes) + ")";
        return {};
    }

} // namespace

ChunkSizeSearch searchChunkSize(std::span<const ChunkParameter> parameters, int processes,
    std::span<const std::int64_t> candidates, const ChunkSizeLimits& limits)
{
    const auto largest = largestElements(parameters);
    ChunkSizeSearch search;
    for (const auto size : candidates) {
        ChunkSizeTrial trial { size, 0, false, {} };
        if (size < largest) {
            trial.reason = "smaller than the largest parameter (" + std::to_string(largest) + " elements)";
            search.trials.push_back(trial);
            continue;
        }
        auto layout = buildChunkLayout(parameters, size, processes);
        trial.wasteFraction = layout.wasteFraction();
        trial.reason = chunkSizeProblem(layout, limits);
        trial.valid = trial.reason.empty();
        search.trials.push_back(trial);
        // Least waste wins; on a tie the smaller chunk (lower peak, §9.2.1).
        const bool better = search.layout.chunkElements == 0 || trial.wasteFraction < search.layout.wasteFraction()
            || (trial.wasteFraction == search.layout.wasteFraction() && size < search.layout.chunkElements);
        if (trial.valid && better)
            search.layout = std::move(layout);
    }
    return search;
}

std::vector<std::int64_t> defaultChunkSizeCandidates(std::int64_t largestParameter)
{
    constexpr std::int64_t kStep = 1 << 20;
    constexpr std::int64_t kMax = 1 << 27;
    const std::int64_t first = std::max<std::int64_t>(1, (largestParameter + kStep - 1) / kStep) * kStep;
    if (first > kMax)
        return { largestParameter };
    std::vector<std::int64_t> sizes;
    for (auto s = first; s <= kMax; s += kStep)
        sizes.push_back(s);
    return sizes;
}

std::string_view toString(TensorState state)
{
    constexpr std::array kNames = { "FREE", "COMPUTE", "HOLD", "HOLD_AFTER_FWD", "HOLD_AFTER_BWD" };
    return kNames[static_cast<std::size_t>(state)];
}

std::string_view toString(ChunkPhase phase)
{
    constexpr std::array kNames = { "forward", "recompute", "backward", "adam" };
    return kNames[static_cast<std::size_t>(phase)];
}

namespace {

    // What one op contributes to the trace, at the planned micro-batch.
    struct OpMemory
    {
        std::vector<TensorId> parameters; // chunk-managed
        std::vector<TensorId> savedRoots;
        double savedExtraBytes = 0;
        double outputBytes = 0;
        double inputBytes = 0; // activation inputs: their gradients in backward
        double workspaceBytes = 0;
        double backwardWorkspaceBytes = 0; // beyond its input gradients (fused attention's)
        double gradientBytes = 0; // fp16 parameter gradients before they reach the chunk (§6.2)
        double tiedElements = 0; // host (embedding) parameters this GPU op reads (a tied lm_head)
        bool onCpu = false; // a CPU embedding (§8.2)
    };

    // Walks forward and backward keeping the saved activations alive (each storage once), with
    // per-layer activation checkpointing when asked.
    class TraceBuilder
    {
    public:
        TraceBuilder(const Graph& graph, const Profile& profile, const TraceOptions& options)
            : m_graph(graph)
            , m_profile(profile)
            , m_options(options)
            , m_costs(computeOpCosts(graph))
            , m_held(graph.tensorCount(), 0)
            , m_firstSaver(graph.tensorCount(), graph.nodeCount())
        {
            const double base = static_cast<double>(std::max<std::int64_t>(1, graph.info().microBatch));
            m_ratio = options.microBatch / base;
            m_scale = m_ratio * activationScale(profile.setup);
            setupOps();
        }

        WarmupTrace build()
        {
            const auto segments = segmentsOf();
            for (const auto& [begin, end] : segments)
                forwardRange(begin, end, ChunkPhase::Forward);
            for (auto s = segments.rbegin(); s != segments.rend(); ++s)
                backwardSegment(s->first, s->second);
            return std::move(m_trace);
        }

    private:
        void setupOps()
        {
            const auto host = chunkParameters(m_graph, m_options.embeddingOnCpu).host;
            std::vector<char> onHost(m_graph.tensorCount(), 0);
            for (const auto& p : host)
                onHost[p.tensor.index()] = 1;
            for (const auto& node : m_graph.nodes())
                m_ops.push_back(opMemory(node, onHost));
        }

        OpMemory opMemory(const Node& node, const std::vector<char>& onHost)
        {
            const auto& c = m_costs[node.id.index()];
            OpMemory op;
            op.onCpu = m_options.embeddingOnCpu && node.op == OpType::Embedding;
            for (auto in : node.inputs) {
                const auto& t = m_graph.tensor(in);
                if (t.kind == TensorKind::Activation)
                    op.inputBytes += static_cast<double>(numBytes(t.shape, t.dtype)) * m_scale;
                if (t.kind != TensorKind::Parameter)
                    continue;
                const double elements = static_cast<double>(numElements(t.shape));
                if (onHost[in.index()]) {
                    op.tiedElements += op.onCpu ? 0 : elements;
                } else if (std::find(op.parameters.begin(), op.parameters.end(), in) == op.parameters.end()) {
                    op.parameters.push_back(in);
                    op.gradientBytes += 2 * elements;
                }
            }
            for (auto t : c.savedTensors) {
                const auto root = storageRoot(m_graph, t);
                op.savedRoots.push_back(root);
                m_firstSaver[root.index()] = std::min<std::size_t>(m_firstSaver[root.index()], node.id.index());
            }
            op.savedExtraBytes = static_cast<double>(c.savedExtraBytes) * m_scale;
            op.outputBytes = static_cast<double>(c.outputBytes) * m_scale;
            op.workspaceBytes = op.onCpu ? 0 : static_cast<double>(c.workspaceBytes) * m_scale;
            op.backwardWorkspaceBytes = op.onCpu ? 0 : static_cast<double>(c.backwardWorkspaceBytes) * m_scale;
            return op;
        }

        // Maximal runs of nodes of one transformer layer; nodes outside layers run alone.
        std::vector<std::pair<std::size_t, std::size_t>> segmentsOf() const
        {
            std::vector<std::pair<std::size_t, std::size_t>> segments;
            const auto nodes = m_graph.nodes();
            for (std::size_t i = 0; i < nodes.size();) {
                std::size_t j = i + 1;
                while (m_options.activationCheckpointing && nodes[i].layer != kNoLayer && j < nodes.size()
                    && nodes[j].layer == nodes[i].layer)
                    ++j;
                segments.emplace_back(i, j);
                i = j;
            }
            return segments;
        }

        double rootBytes(TensorId root) const
        {
            const auto& t = m_graph.tensor(root);
            return static_cast<double>(numBytes(t.shape, t.dtype)) * m_scale;
        }

        // Keeps `root` alive; returns whether it was newly kept.
        bool hold(TensorId root)
        {
            if (m_held[root.index()])
                return false;
            m_held[root.index()] = 1;
            m_keptBytes += rootBytes(root);
            return true;
        }

        void drop(TensorId root)
        {
            if (!m_held[root.index()])
                return;
            m_held[root.index()] = 0;
            m_keptBytes -= rootBytes(root);
        }

        void addMoment(ChunkPhase phase, std::size_t i, double transientBytes)
        {
            const auto& op = m_ops[i];
            const auto& p = m_profile.nodes[i];
            const bool backward = phase == ChunkPhase::Backward;
            ChunkMoment m { phase, NodeId(static_cast<std::uint32_t>(i)), op.parameters, 0, 0, 0 };
            m.nonModelBytes = m_keptBytes + transientBytes;
            m.computeNs = backward ? p.backwardNs.at(m_options.microBatch) : p.forwardNs.at(m_options.microBatch);
            // A GPU op reading a host parameter gets an fp16 copy (and sends back its gradient).
            const double tied = 2 * op.tiedElements * (backward ? 2 : 1);
            m.nonModelBytes += tied;
            m.hostTrafficBytes = tied + (op.onCpu ? op.outputBytes : 0);
            const auto& c = m_costs[i];
            m_trace.flops += (backward ? c.backwardFlops : c.forwardFlops) * m_ratio;
            m_trace.peakNonModelBytes = std::max(m_trace.peakNonModelBytes, m.nonModelBytes);
            m_trace.moments.push_back(std::move(m));
        }

        // Forward of nodes [begin, end); a checkpointed segment keeps only its inputs afterwards.
        void forwardRange(std::size_t begin, std::size_t end, ChunkPhase phase)
        {
            std::vector<TensorId> kept;
            for (std::size_t i = begin; i < end; ++i) {
                const auto& op = m_ops[i];
                addMoment(phase, i, op.outputBytes + op.workspaceBytes);
                for (auto r : op.savedRoots) {
                    if (hold(r))
                        kept.push_back(r);
                }
                m_keptBytes += op.savedExtraBytes;
            }
            if (phase == ChunkPhase::Recompute || end - begin < 2)
                return;
            for (std::size_t i = begin; i < end; ++i)
                m_keptBytes -= m_ops[i].savedExtraBytes;
            for (auto r : kept)
                drop(r);
            for (auto r : segmentInputs(begin, end))
                hold(r);
        }

        // Activation storages produced before `begin` and read inside [begin, end).
        std::vector<TensorId> segmentInputs(std::size_t begin, std::size_t end) const
        {
            std::vector<TensorId> inputs;
            for (std::size_t i = begin; i < end; ++i) {
                for (auto in : m_graph.nodes()[i].inputs) {
                    const auto& t = m_graph.tensor(in);
                    const auto root = storageRoot(m_graph, in);
                    if (t.kind == TensorKind::Activation && m_graph.tensor(root).producer.index() < begin
                        && std::find(inputs.begin(), inputs.end(), root) == inputs.end())
                        inputs.push_back(root);
                }
            }
            return inputs;
        }

        void backwardSegment(std::size_t begin, std::size_t end)
        {
            if (end - begin >= 2) // checkpointed: re-run the forward first
                forwardRange(begin, end, ChunkPhase::Recompute);
            for (std::size_t i = end; i-- > begin;) {
                const auto& op = m_ops[i];
                addMoment(ChunkPhase::Backward, i,
                    op.outputBytes + op.inputBytes + std::max(op.workspaceBytes, op.backwardWorkspaceBytes)
                        + op.gradientBytes);
                for (auto r : op.savedRoots) {
                    if (m_firstSaver[r.index()] == i)
                        drop(r);
                }
                m_keptBytes -= op.savedExtraBytes;
            }
            if (end - begin < 2)
                return;
            for (auto r : segmentInputs(begin, end)) {
                if (m_firstSaver[r.index()] >= begin) // nothing earlier still needs it
                    drop(r);
            }
        }

        const Graph& m_graph;
        const Profile& m_profile;
        TraceOptions m_options;
        std::vector<OpCost> m_costs;
        std::vector<OpMemory> m_ops;
        std::vector<char> m_held; // by tensor: a saved storage alive
        std::vector<std::size_t> m_firstSaver; // by tensor: the earliest node saving it
        double m_ratio = 1; // planned / graph micro-batch
        double m_scale = 1; // the same times the precision's activation scale
        double m_keptBytes = 0;
        WarmupTrace m_trace;
    };

} // namespace

WarmupTrace traceIteration(const Graph& graph, const Profile& profile, const TraceOptions& options)
{
    if (profile.nodes.size() != graph.nodeCount())
        throw Error("chunk trace: the profile has " + std::to_string(profile.nodes.size()) + " nodes, the graph "
            + std::to_string(graph.nodeCount()));
    if (options.microBatch <= 0)
        throw Error("chunk trace: the micro-batch must be positive");
    return TraceBuilder(graph, profile, options).build();
}

const LinkSpec& collectiveLink(const Cluster& cluster)
{
    const bool oneNode = cluster.deviceCount() <= cluster.devicesPerNode;
    return oneNode || cluster.intraNode.bandwidth <= cluster.interNode.bandwidth ? cluster.intraNode
                                                                                 : cluster.interNode;
}

namespace {

    double sumElements(std::span<const ChunkParameter> parameters)
    {
        double n = 0;
        for (const auto& p : parameters)
            n += static_cast<double>(p.elements);
        return n;
    }

    // §8.2: OS chunks go into the GPU margin left after the peak non-model data, the local fp16
    // chunks and one gathered group, so that they cause no eviction in FWD and BWD.
    void placeOptimizerStates(ChunkPlan& plan, const ChunkPlanOptions& options, ReplaySetup& setup)
    {
        const auto& layout = plan.layout;
        const double fp16 = layout.chunkBytes(ChunkList::ParamFp16);
        plan.marginBytes = plan.gpuBudgetBytes - plan.trace.peakNonModelBytes - layout.localChunkCount() * fp16
            - (layout.processes - 1) * fp16;
        const double set = static_cast<double>(layout.chunkElements) * kOptimizerChunkBytesPerParameter;
        const int fit = plan.marginBytes > 0 ? static_cast<int>(std::floor(plan.marginBytes / set)) : 0;
        plan.optimizerChunksOnGpu = options.optimizerInMargin ? std::min(fit, layout.localChunkCount()) : 0;
        // Which chunks is left open by the paper; the first local ones in list order.
        setup.optimizerOnGpu.assign(static_cast<std::size_t>(layout.chunkCount()), 0);
        int placed = 0;
        for (int c = 0; c < layout.chunkCount() && placed < plan.optimizerChunksOnGpu; ++c) {
            if (layout.ownerOf(c) == 0) {
                setup.optimizerOnGpu[static_cast<std::size_t>(c)] = 1;
                ++placed;
            }
        }
    }

    void estimateTime(ChunkPlan& plan, const Cluster& cluster, const ChunkPlanOptions& options, double hostElements)
    {
        const auto& r = plan.replay;
        const int p = plan.layout.processes;
        const int ranksPerNode = std::min(p, cluster.devicesPerNode);
        double hostTraffic = 0;
        int hostMoves = r.moves;
        for (const auto& m : plan.trace.moments) {
            plan.time.computeNs += m.computeNs;
            hostTraffic += m.hostTrafficBytes;
            hostMoves += m.hostTrafficBytes > 0 ? 1 : 0;
        }
        plan.cpuGpuBytes = r.uploadBytes + r.downloadBytes + hostTraffic;
        const auto& host = cluster.device.hostLink;
        plan.time.transferNs = 1e9 * (plan.cpuGpuBytes / host.bandwidth + hostMoves * host.latencySeconds);
        const auto& link = collectiveLink(cluster);
        const int collectives = r.allGathers + r.reduceScatters;
        // The gradients of the fp32 embedding outside chunks are all-reduced (ring).
        const double allReduce = p > 1 ? 2.0 * (p - 1) / p * 4 * hostElements : 0;
        plan.time.collectiveNs =
            1e9 * ((r.collectiveBytes + allReduce) / link.bandwidth + collectives * (p - 1) * link.latencySeconds);
        // The node's CPU memory bandwidth is shared by its ranks' CPU ADAMs.
        plan.time.cpuAdamNs = 1e9 * ranksPerNode * (r.cpuAdamElements + hostElements) * options.adamBytesPerParameter
            / options.cpuAdamBytesPerSecond;
        plan.time.gpuAdamNs = 1e9 * r.gpuAdamElements * options.adamBytesPerParameter
            / (cluster.device.memoryBandwidth * options.gpuBandwidthEfficiency);
        plan.tflopsPerGpu = plan.trace.flops / plan.time.totalNs() / 1e3;
    }

    // Fills everything up to the replay; returns false (with the reason) when no chunk size fits.
    bool layOutChunks(ChunkPlan& plan, const ChunkParameters& params, const ChunkPlanOptions& options, int processes,
        double hostPerRank)
    {
        const ChunkSizeLimits limits { plan.gpuBudgetBytes - plan.trace.peakNonModelBytes,
            hostPerRank - plan.hostParameterBytes };
        const auto largest = largestElements(params.chunked);
        const auto candidates = options.chunkElements > 0 ? std::vector<std::int64_t> { options.chunkElements }
                                                          : defaultChunkSizeCandidates(largest);
        auto search = searchChunkSize(params.chunked, processes, candidates, limits);
        plan.chunkSizes = std::move(search.trials);
        plan.layout = std::move(search.layout);
        if (plan.layout.chunkElements > 0)
            return true;
        // The size that wastes least says best why none fits.
        const ChunkSizeTrial* best = &plan.chunkSizes.front();
        for (const auto& t : plan.chunkSizes) {
            const bool holds = t.chunkElements >= largest;
            if (holds && (best->chunkElements < largest || t.wasteFraction < best->wasteFraction))
                best = &t;
        }
        // "host RAM: ..." or "GPU: ...": keep the resource first.
        const auto colon = best->reason.find(": ");
        plan.reason = colon == std::string::npos
            ? "no chunk size fits: " + best->reason
            : best->reason.substr(0, colon) + ": no chunk size fits, " + best->reason.substr(colon + 2);
        return false;
    }

} // namespace

ChunkPlan planChunks(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options)
{
    cluster.check();
    const int processes = cluster.deviceCount();
    const int ranksPerNode = std::min(processes, cluster.devicesPerNode);
    ChunkPlan plan;
    const auto device = static_cast<double>(cluster.device.memoryBytes);
    plan.gpuBudgetBytes = std::min(device * options.gpuMemoryFraction, options.usableGpuBytes(device));
    plan.hostBudgetBytes = static_cast<double>(cluster.hostMemoryBytes) * options.hostMemoryFraction;
    plan.trace =
        traceIteration(graph, profile, { options.microBatch, options.activationCheckpointing, options.embeddingOnCpu });
    for (const auto& m : plan.trace.moments)
        plan.chunkableBytes.push_back(plan.gpuBudgetBytes - m.nonModelBytes);
    const auto params = chunkParameters(graph, options.embeddingOnCpu);
    const double hostElements = sumElements(params.host);
    // Each rank keeps its own copy of the parameters outside chunks; the reference code leaves
    // the CPU embedding to PyTorch in fp32: parameter, gradient, momentum, variance.
    plan.hostParameterBytes = hostElements * kHostParameterBytes;
    if (!layOutChunks(plan, params, options, processes, plan.hostBudgetBytes / ranksPerNode))
        return plan;
    ReplaySetup setup { plan.gpuBudgetBytes, {}, options.eviction, 1 };
    placeOptimizerStates(plan, options, setup);
    const double localModelBytes = plan.layout.localChunkCount() * plan.layout.chunkElements * kChunkBytesPerParameter;
    if (options.initializeOnHost && ranksPerNode * (localModelBytes + plan.hostParameterBytes) > plan.hostBudgetBytes) {
        plan.reason = "host RAM: building the model on the host needs " + std::to_string(ranksPerNode) + " x "
            + formatBytes(localModelBytes + plan.hostParameterBytes) + ", over the " + formatBytes(plan.hostBudgetBytes)
            + " usable";
        return plan;
    }
    plan.replay = replayChunks(plan.layout, plan.trace.moments, setup);
    if (!plan.replay.feasible) {
        const auto at = plan.replay.failedMoment;
        const auto& moments = plan.trace.moments;
        plan.reason = "GPU: at "
            + (at < moments.size()
                    ? graph.node(moments[at].node).name + " (" + std::string(toString(moments[at].phase)) + ") "
                    : std::string("ADAM "))
            + plan.replay.reason;
        return plan;
    }
    plan.gpuPeakBytes = plan.replay.gpuPeakBytes;
    plan.hostBytes = ranksPerNode * (plan.replay.hostPeakBytes + plan.hostParameterBytes);
    estimateTime(plan, cluster, options, hostElements);
    if (plan.hostBytes > plan.hostBudgetBytes) {
        plan.reason = "host RAM: " + std::to_string(ranksPerNode)
            + (ranksPerNode == 1 ? " rank keeps " : " ranks keep ")
            + formatBytes(ranksPerNode * plan.replay.hostPeakBytes) + " of evicted chunks and optimizer states plus "
            + formatBytes(ranksPerNode * plan.hostParameterBytes) + " of embedding parameters, over the "
            + formatBytes(plan.hostBudgetBytes) + " usable of "
            + formatBytes(static_cast<double>(cluster.hostMemoryBytes));
        return plan;
    }
    plan.feasible = true;
    return plan;
}

} // namespace ps
