#include "plan/mixed_pipe.h"

#include "plan/mixed_pipe_dag.h"
#include "plan/partition_search.h"
#include "util/error.h"

#include <queue>

#include <algorithm>
#include <array>
#include <set>

namespace ps {
namespace {

    using namespace detail;

    // Kahn's algorithm over the stage graph, the stage holding the earliest node first among the
    // ready ones. Empty when the stage graph has a cycle.
    std::vector<int> stageTopologicalOrder(const Graph& graph, const std::vector<int>& stageOf, int stages)
    {
        std::vector<std::size_t> firstNode(static_cast<std::size_t>(stages), graph.nodeCount());
        std::vector<std::set<int>> next(static_cast<std::size_t>(stages));
        for (const auto& n : graph.nodes()) {
            const int to = stageOf[n.id.index()];
            auto& first = firstNode[static_cast<std::size_t>(to)];
            first = std::min(first, n.id.index());
            for (auto in : n.inputs) {
                const auto producer = graph.tensor(in).producer;
                if (producer.valid() && stageOf[producer.index()] != to)
                    next[static_cast<std::size_t>(stageOf[producer.index()])].insert(to);
            }
        }
        std::vector<int> in(static_cast<std::size_t>(stages), 0);
        for (const auto& targets : next) {
            for (int t : targets)
                ++in[static_cast<std::size_t>(t)];
        }
        using Entry = std::pair<std::size_t, int>; // (first node, stage)
        std::priority_queue<Entry, std::vector<Entry>, std::greater<>> ready;
        for (int s = 0; s < stages; ++s) {
            if (in[static_cast<std::size_t>(s)] == 0)
                ready.emplace(firstNode[static_cast<std::size_t>(s)], s);
        }
        std::vector<int> order;
        while (!ready.empty()) {
            const int s = ready.top().second;
            ready.pop();
            order.push_back(s);
            for (int t : next[static_cast<std::size_t>(s)]) {
                if (--in[static_cast<std::size_t>(t)] == 0)
                    ready.emplace(firstNode[static_cast<std::size_t>(t)], t);
            }
        }
        return static_cast<int>(order.size()) == stages ? order : std::vector<int> {};
    }

    // Per device: its stages' memory summed, except the parts that exist only while one of them
    // computes (workspace, recomputed activations), counted once at the largest. [gap] The paper
    // only says all stages on a GPU must fit its memory.
    void checkDevices(Plan& plan, double capacityBytes)
    {
        const auto devices = static_cast<std::size_t>(plan.deviceCount());
        std::vector<double> resident(devices, 0);
        std::vector<double> transient(devices, 0);
        std::vector<double> busyNs(devices, 0);
        std::vector<std::string> names(devices);
        const bool split = plan.schedule.kind == ScheduleKind::ZeroBubbleH1;
        for (std::size_t s = 0; s < plan.stages.size(); ++s) {
            const auto d = plan.stageDevices[s].index();
            const auto& e = plan.stages[s];
            const double t =
                (split ? e.cost.splitWorkspaceBytes : e.cost.workspaceBytes) + e.memoryPlan.recomputedBytes;
            resident[d] += e.peakBytes - t;
            transient[d] = std::max(transient[d], t);
            busyNs[d] += e.timeNs;
            names[d] += (names[d].empty() ? "" : ", ") + std::to_string(s);
        }
        plan.feasible = true;
        plan.reason.clear();
        plan.slowestStageNs = *std::max_element(busyNs.begin(), busyNs.end());
        for (std::size_t d = 0; d < devices && plan.feasible; ++d) {
            const double need = resident[d] + transient[d];
            if (need <= capacityBytes)
                continue;
            plan.feasible = false;
            plan.reason = "device " + std::to_string(d) + " (stages " + names[d] + ") needs "
                + std::to_string(static_cast<std::int64_t>(need)) + " bytes, "
                + std::to_string(static_cast<std::int64_t>(need - capacityBytes)) + " over the "
                + std::to_string(static_cast<std::int64_t>(capacityBytes)) + "-byte limit";
        }
    }

    // Stage creation inside each GPU (§4.1 step 2): its blocks merge while no cycle appears,
    // connected ones first ("connected components"), then any two, so the stages are as few
    // (and the pipeline as shallow) as the graph allows.
    void formStages(ClusterDag& dag, const std::vector<int>& deviceOf)
    {
        for (bool merged = true; merged;) {
            merged = false;
            for (const bool adjacentOnly : { true, false }) {
                const auto all = dag.clusters();
                for (std::size_t i = 0; i < all.size(); ++i) {
                    for (std::size_t j = i + 1; j < all.size(); ++j) {
                        const int a = all[i];
                        const int b = all[j];
                        if (!dag.alive(a) || !dag.alive(b)
                            || deviceOf[static_cast<std::size_t>(a)] != deviceOf[static_cast<std::size_t>(b)])
                            continue;
                        const bool adjacent = dag.succ(a).count(b) > 0 || dag.pred(a).count(b) > 0;
                        if ((adjacentOnly && !adjacent) || !dag.canMerge(a, b))
                            continue;
                        dag.merge(a, b);
                        merged = true;
                    }
                }
                if (merged)
                    break; // components first again
            }
        }
    }

    // Steps 1a, 1b and 2 for one L and coarsening; nullopt when LPT finds no room for a block.
    std::optional<StageAssignment> partitionOnce(const MixedGraph& graph, const std::vector<double>& weight, int blocks,
        Coarsening how, int devices, double capBytes, const std::function<void()>& checkCancel)
    {
        ClusterDag dag(graph, weight);
        preprocess(dag, graph);
        // [gap] A block may hold 1.5 times a device's share of its L/P blocks (never more than the
        // device): blocks as large as a whole device, which the paper's cap allows, leave LPT
        // nothing to pack beside them.
        const double blockCap = capBytes * std::min(1.0, 1.5 * devices / blocks);
        coarsen(dag, graph, blocks, how, blockCap, checkCancel);
        const auto clusters = dag.clusters();
        std::vector<LptBlock> lpt;
        for (int c : clusters)
            lpt.push_back({ dag.weight(c), dag.memory(c) });
        const auto assigned = assignLongestFirst(lpt, devices, capBytes);
        if (!assigned)
            return std::nullopt;
        std::vector<int> deviceOf(dag.idLimit(), -1);
        for (std::size_t i = 0; i < clusters.size(); ++i)
            deviceOf[static_cast<std::size_t>(clusters[i])] = static_cast<int>((*assigned)[i].value);
        formStages(dag, deviceOf);
        StageAssignment a;
        a.stageOf.assign(graph.nodeCount(), 0);
        std::vector<int> renumber(static_cast<std::size_t>(devices), -1); // devices by first use
        int used = 0;
        const auto stages = dag.clusters();
        for (std::size_t k = 0; k < stages.size(); ++k) {
            for (auto v : dag.members(stages[k]))
                a.stageOf[v] = static_cast<int>(k);
            auto& d = renumber[static_cast<std::size_t>(deviceOf[static_cast<std::size_t>(stages[k])])];
            if (d < 0)
                d = used++;
            a.deviceOf.push_back(d);
        }
        return a;
    }

    // §4.3: a node in a recomputing stage costs its forward twice; in the last stage once.
    std::vector<double> nodeWeights(const MixedGraph& g, const std::vector<char>& inLastStage, bool checkpointing)
    {
        std::vector<double> w(g.nodeCount());
        for (std::size_t v = 0; v < w.size(); ++v)
            w[v] = g.forwardNs[v] + g.backwardNs[v] + (checkpointing && inLastStage[v] == 0 ? g.forwardNs[v] : 0);
        return w;
    }

    std::vector<char> lastStageNodes(const Plan& plan, std::size_t nodeCount)
    {
        std::vector<char> last(nodeCount, 0);
        const StageId id(static_cast<std::uint32_t>(plan.partition.stageCount() - 1));
        for (auto i = plan.partition.stageBegin(id); i < plan.partition.stageEnd(id, nodeCount); ++i)
            last[plan.partition.nodeOrder[i].index()] = 1;
        return last;
    }

    // [gap] L: 2P, 3P and 4P (the paper's upper bound is "found through experimentation"; T5-3B
    // on 8 GPUs peaked at L = 16), never more blocks than nodes.
    std::vector<int> blockCounts(const MixedPipeOptions& o, int devices, std::size_t nodes)
    {
        auto wanted = o.blockCounts;
        if (wanted.empty())
            wanted = { 2 * devices, 3 * devices, 4 * devices };
        std::vector<int> out;
        for (int l : wanted) {
            if (l >= 1 && static_cast<std::size_t>(l) <= nodes && std::find(out.begin(), out.end(), l) == out.end())
                out.push_back(l);
        }
        if (out.empty())
            out.push_back(static_cast<int>(std::min<std::size_t>(nodes, static_cast<std::size_t>(devices))));
        return out;
    }

    // Feasible without a simulated overflow first, then the higher simulated throughput, then
    // Eq. 1.
    bool ranksBefore(const Plan& a, const Plan& b)
    {
        const auto ok = [](const Plan& p) { return p.feasible && p.simulation && !p.simulation->outOfMemory; };
        if (ok(a) != ok(b))
            return ok(a);
        if (a.feasible != b.feasible)
            return a.feasible;
        const double ta = a.simulation ? a.simulation->samplesPerSecond : 0;
        const double tb = b.simulation ? b.simulation->samplesPerSecond : 0;
        return ta != tb ? ta > tb : a.slowestStageNs < b.slowestStageNs;
    }

    template <typename Id> std::vector<Id> idsOf(const std::vector<int>& values)
    {
        std::vector<Id> out;
        for (int v : values)
            out.emplace_back(static_cast<std::uint32_t>(v));
        return out;
    }

    // Steps 1-3 for one (L, coarsening, profile), then the plan evaluated and simulated.
    struct Attempt
    {
        const StageModel& evaluator; // the mode's memory limits: evaluates the plans
        const StageModel& model; // the caller's: graph, profile and cluster to simulate on
        const MixedGraph& graph;
        const MixedPipeOptions& mixed;
        std::string algorithm;
        bool checkpointing = true;
        std::function<void()> checkCancel;

        // nullopt when LPT finds no device with room for a block. Fills `c`.
        std::optional<Plan> run(int blocks, Coarsening how, const std::vector<double>& weight, double memoryShare,
            MixedPipeCandidate& c) const
        {
            const double cap = memoryShare * evaluator.capacityBytes();
            c.memoryShare = memoryShare;
            auto a = partitionOnce(graph, weight, blocks, how, evaluator.stages(), cap, checkCancel);
            if (!a)
                return std::nullopt;
            Refiner refiner(graph, weight, model.cluster(), cap, *a);
            refiner.run(mixed.refinePasses, checkCancel);
            c.periodNs = refiner.periodNs();
            auto plan =
                evaluateDataflowPlan(evaluator, idsOf<StageId>(a->stageOf), idsOf<DeviceId>(a->deviceOf), algorithm);
            plan.seed = "L=" + std::to_string(blocks) + " " + c.coarsening + (checkpointing ? " checkpointed" : "");
            c.stages = plan.partition.stageCount();
            c.interDeviceBytes = interDeviceBytesPerSample(plan);
            c.iterationNs = 0;
            c.samplesPerSecond = 0;
            c.feasible = false;
            if (plan.feasible) {
                plan.simulation = simulatePlan(plan, model.graph(), model.profile(), model.cluster());
                c.iterationNs = plan.simulation->iterationNs;
                c.samplesPerSecond = plan.simulation->samplesPerSecond;
                c.feasible = !plan.simulation->outOfMemory;
            }
            return plan;
        }
    };

    // §4.3 for one L and coarsening: partition with the recomputing profile everywhere, then again
    // with the last stage's nodes on the cheaper one, until the last stage stops changing. Adds
    // the candidates to `result` and keeps the best plan there.
    void fixPoint(const Attempt& attempt, int blocks, Coarsening how, MixedPipeResult& result, bool& found)
    {
        const auto& graph = attempt.graph;
        std::vector<char> last(graph.nodeCount(), 0); // no block in the last stage yet
        // Without recomputation both profiles are the same: one round.
        const int rounds = attempt.checkpointing ? std::max(1, attempt.mixed.fixPointIterations) : 1;
        for (int round = 0; round < rounds; ++round) {
            attempt.checkCancel();
            MixedPipeCandidate c { blocks, 0, std::string(toString(how)), round, attempt.checkpointing, 1, 0, 0, false,
                0, 0 };
            const auto weight = nodeWeights(graph, last, attempt.checkpointing);
            std::optional<Plan> plan;
            // [gap] The heuristics' memory estimate leaves out border inputs and messages; when
            // LPT finds no room or the evaluated plan does not fit, they run again on a smaller
            // share of the device (smaller blocks pack better too).
            for (const double share : { 1.0, 0.9, 0.8, 0.7 }) {
                auto trial = c;
                auto p = attempt.run(blocks, how, weight, share, trial);
                if (p && (!plan || ranksBefore(*p, *plan))) {
                    plan = std::move(p);
                    c = trial;
                }
                if (c.feasible)
                    break;
            }
            result.candidates.push_back(c);
            if (!plan)
                return;
            const auto next = lastStageNodes(*plan, graph.nodeCount());
            if (!found || ranksBefore(*plan, result.plan)) {
                result.plan = std::move(*plan);
                found = true;
            }
            if (next == last) // the profile guessed for the last stage held
                return;
            last = next;
        }
    }

} // namespace

double interDeviceBytesPerSample(const Plan& plan)
{
    const auto device = [&](std::size_t stage) {
        return plan.stageDevices.empty() ? stage : plan.stageDevices[stage].index();
    };
    double bytes = 0;
    for (std::size_t i = 0; i < plan.stages.size(); ++i) {
        const auto& c = plan.stages[i].cost;
        if (plan.partition.dataflow()) {
            for (const auto* sends : { &c.forwardSends, &c.backwardSends }) {
                for (const auto& send : *sends)
                    bytes += device(send.stage.index()) != device(i) ? send.bytes : 0;
            }
            continue;
        }
        if (i + 1 < plan.stages.size() && device(i + 1) != device(i))
            bytes += c.sendForwardBytes;
        if (i > 0 && device(i - 1) != device(i))
            bytes += c.sendBackwardBytes;
    }
    return plan.microBatch > 0 ? bytes / plan.microBatch : 0;
}

double ftpipeStagePeriodNs(double computeNs, double commForwardNs, double commBackwardNs)
{
    return computeNs + std::max(0.0, commForwardNs - computeNs) + std::max(0.0, commBackwardNs - computeNs);
}

std::optional<std::vector<DeviceId>> assignLongestFirst(
    const std::vector<LptBlock>& blocks, int devices, double memoryCapBytes)
{
    std::vector<std::size_t> byCompute(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i)
        byCompute[i] = i;
    std::stable_sort(byCompute.begin(), byCompute.end(),
        [&](std::size_t a, std::size_t b) { return blocks[a].computeNs > blocks[b].computeNs; });
    std::vector<double> load(static_cast<std::size_t>(std::max(devices, 0)), 0);
    std::vector<double> memory(load.size(), 0);
    std::vector<DeviceId> out(blocks.size());
    for (auto b : byCompute) {
        std::size_t best = load.size();
        for (std::size_t d = 0; d < load.size(); ++d) { // "the least busy GPU with enough memory"
            if (memory[d] + blocks[b].memoryBytes <= memoryCapBytes && (best == load.size() || load[d] < load[best]))
                best = d;
        }
        if (best == load.size())
            return std::nullopt;
        load[best] += blocks[b].computeNs;
        memory[best] += blocks[b].memoryBytes;
        out[b] = DeviceId(static_cast<std::uint32_t>(best));
    }
    return out;
}

bool stageGraphIsAcyclic(const Graph& graph, const std::vector<StageId>& stageOfNode)
{
    std::vector<int> stageOf;
    int stages = 0;
    for (auto s : stageOfNode) {
        stageOf.push_back(static_cast<int>(s.value));
        stages = std::max(stages, static_cast<int>(s.value) + 1);
    }
    return stageOf.size() == graph.nodeCount() && !stageTopologicalOrder(graph, stageOf, stages).empty();
}

Plan evaluateDataflowPlan(const StageModel& model, const std::vector<StageId>& stageOfNode,
    const std::vector<DeviceId>& stageDevices, const std::string& algorithm)
{
    const auto& graph = model.graph();
    const auto stages = static_cast<int>(stageDevices.size());
    if (stageOfNode.size() != graph.nodeCount())
        throw Error("dataflow plan: " + std::to_string(stageOfNode.size()) + " node stages for a graph of "
            + std::to_string(graph.nodeCount()) + " nodes");
    std::vector<std::vector<NodeId>> members(static_cast<std::size_t>(stages));
    std::vector<int> stageOf;
    for (const auto& n : graph.nodes()) {
        const auto s = stageOfNode[n.id.index()];
        if (static_cast<int>(s.value) >= stages)
            throw Error("dataflow plan: node '" + n.name + "' is in stage " + std::to_string(s.value) + ", but only "
                + std::to_string(stages) + " stages have a device");
        members[s.index()].push_back(n.id);
        stageOf.push_back(static_cast<int>(s.value));
    }
    for (int s = 0; s < stages; ++s) {
        if (members[static_cast<std::size_t>(s)].empty())
            throw Error("dataflow plan: stage " + std::to_string(s) + " has no nodes");
    }
    const auto order = stageTopologicalOrder(graph, stageOf, stages);
    if (order.empty())
        throw Error("dataflow plan: the stages form a cycle (a stage feeds one that feeds it back)");
    Partition partition;
    std::vector<DeviceId> devices;
    for (int s : order) {
        partition.stageStarts.push_back(partition.nodeOrder.size());
        const auto& m = members[static_cast<std::size_t>(s)];
        partition.nodeOrder.insert(partition.nodeOrder.end(), m.begin(), m.end());
        devices.push_back(stageDevices[static_cast<std::size_t>(s)]);
    }
    const auto ordered = graphInNodeOrder(graph, partition.nodeOrder);
    const auto profile = profileInNodeOrder(model.profile(), partition.nodeOrder);
    auto spec = model.schedule();
    spec.stages = stages;
    const StageModel orderedModel(ordered, profile, spec, model.cluster(), model.microBatch(), model.limits(), true);
    auto plan = evaluatePlan(orderedModel, Partition { partition.stageStarts, {} }, algorithm);
    plan.partition = partition;
    plan.stageDevices = devices;
    const auto costs = computeStageCosts(graph, model.profile(), partition, model.microBatch());
    for (std::size_t s = 0; s < costs.size(); ++s) { // per consumer stage, sent directly
        auto& c = plan.stages[s].cost;
        c.forwardSends = costs[s].forwardSends;
        c.backwardSends = costs[s].backwardSends;
        c.sendForwardBytes = costs[s].sendForwardBytes;
        c.sendBackwardBytes = costs[s].sendBackwardBytes;
    }
    checkDevices(plan, model.capacityBytes());
    return plan;
}

MixedPipeResult planMixedPipe(const StageModel& model, const PlannerOptions& options, const MixedPipeOptions& mixed)
{
    const Search search(model, options);
    // §4.2.1: stages keep only their border inputs and recompute inside the backward, except the
    // last. [gap] FTPipe always does; plans that keep every activation (recomputing only what the
    // memory optimizer must) compete too, unless the user asked for per-stage checkpoints.
    std::vector<std::pair<bool, PlannerLimits>> modes;
    if (model.limits().allowRecompute) {
        auto limits = model.limits();
        limits.checkpointStages = true;
        limits.checkpointLastStage = false;
        modes.emplace_back(true, limits);
    }
    // ftpipe-async checkpoints by definition: only the first mode.
    const bool ftpipeAsync = model.schedule().kind == ScheduleKind::FTPipeAsync;
    if ((!model.limits().checkpointStages && !ftpipeAsync) || modes.empty())
        modes.emplace_back(false, model.limits());
    const auto counts = blockCounts(mixed, model.stages(), model.nodeCount());
    constexpr std::array kCoarsenings { Coarsening::ByScope, Coarsening::CentersSpread, Coarsening::CentersHeaviest };
    const double total = static_cast<double>(modes.size() * counts.size() * kCoarsenings.size());
    MixedPipeResult result;
    bool found = false;
    int done = 0;
    for (const auto& [checkpointing, limits] : modes) {
        const StageModel evaluator(
            model.graph(), model.profile(), model.schedule(), model.cluster(), model.microBatch(), limits);
        const auto graph = buildMixedGraph(evaluator, checkpointing);
        const Attempt attempt { evaluator, model, graph, mixed, std::string(toString(options.algorithm)), checkpointing,
            [&] { search.checkCancel(); } };
        for (int blocks : counts) {
            for (auto how : kCoarsenings) {
                fixPoint(attempt, blocks, how, result, found);
                search.report(++done / total);
            }
        }
    }
    const auto& sim = result.plan.simulation;
    if (found && result.plan.feasible && sim && sim->outOfMemory) { // every candidate overflowed
        result.plan.feasible = false;
        result.plan.reason = "the simulated iteration needs "
            + std::to_string(static_cast<std::int64_t>(sim->peakBytes)) + " bytes on its fullest device, over the "
            + std::to_string(static_cast<std::int64_t>(model.capacityBytes())) + "-byte limit";
    }
    if (!found) {
        result.plan.algorithm = std::string(toString(options.algorithm));
        result.plan.schedule = model.schedule();
        result.plan.microBatch = model.microBatch();
        result.plan.reason = "no assignment of blocks to " + std::to_string(model.stages()) + " devices fits "
            + std::to_string(static_cast<std::int64_t>(model.capacityBytes())) + " bytes per device";
    }
    return result;
}

} // namespace ps
