#include "plan/partition.h"

#include "cost/autocast.h"
#include "graph/op_cost.h"
#include "util/error.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <set>
#include <unordered_set>

namespace ps {
namespace {

    std::size_t parseIndex(std::string_view part, std::string_view whole)
    {
        while (!part.empty() && part.front() == ' ')
            part.remove_prefix(1);
        while (!part.empty() && part.back() == ' ')
            part.remove_suffix(1);
        std::size_t value = 0;
        const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
        if (ec != std::errc() || ptr != part.data() + part.size() || part.empty())
            throw Error("cut list '" + std::string(whole) + "': '" + std::string(part) + "' is not a node index");
        return value;
    }

    struct StageAccumulator
    {
        std::unordered_set<TensorId> rootsAll;
        std::unordered_set<TensorId> rootsW;
        std::unordered_set<TensorId> params;
    };

    // Bytes of a tensor at the planned micro-batch and its autocast type.
    double tensorBytes(const Graph& g, TensorId t, double scale, const AutocastPlan& types)
    {
        return static_cast<double>(numBytes(g.tensor(t).shape, g.tensor(t).dtype)) * scale * types.scale(t);
    }

    void addSavedBytes(const Graph& g, const Node& n, const OpCost& c, StageAccumulator& acc, StageCost& stage,
        double scale, const AutocastPlan& types)
    {
        stage.activationBytes += static_cast<double>(c.savedExtraBytes) * scale;
        for (auto t : c.savedTensors) {
            if (types.savesOwnHalfCopy(g, n, t)) { // a GEMM's half copy: its own storage
                stage.activationBytes +=
                    static_cast<double>(numBytes(g.tensor(t).shape, g.tensor(t).dtype)) * scale * 0.5;
                continue;
            }
            const auto root = storageRoot(g, t);
            if (acc.rootsAll.insert(root).second)
                stage.activationBytes += tensorBytes(g, root, scale, types);
        }
        for (auto t : c.savedForWeightGrad) {
            if (types.savesOwnHalfCopy(g, n, t)) // the GEMM's own half copy
                stage.weightGradOnlyBytes +=
                    static_cast<double>(numBytes(g.tensor(t).shape, g.tensor(t).dtype)) * scale * 0.5;
            else
                acc.rootsW.insert(storageRoot(g, t));
        }
    }

    // Bytes of activations produced at or before `last` and read after it: what crosses the cut.
    void addBoundaryTraffic(const Graph& g, const std::vector<StageId>& stageOf, std::vector<StageCost>& stages,
        double scale, const AutocastPlan& types)
    {
        const auto consumers = g.consumers();
        const auto needsGrad = tensorsRequiringGrad(g);
        for (const auto& t : g.tensors()) {
            if (t.kind != TensorKind::Activation || !t.producer.valid())
                continue;
            const auto from = stageOf[t.producer.index()];
            StageId lastUse = from;
            for (auto n : consumers[t.id.index()])
                lastUse = std::max(lastUse, stageOf[n.index()]);
            const double bytes = tensorBytes(g, t.id, scale, types);
            for (auto s = from.value; s < lastUse.value; ++s) { // relayed through every stage in between
                stages[s].sendForwardBytes += bytes;
                if (needsGrad[t.id.index()])
                    stages[s + 1].sendBackwardBytes += bytes;
            }
        }
    }

    void addSend(std::vector<StageSend>& sends, StageId to, double bytes)
    {
        const auto it = std::find_if(sends.begin(), sends.end(), [to](const StageSend& s) { return s.stage == to; });
        if (it == sends.end())
            sends.push_back({ to, bytes });
        else
            it->bytes += bytes;
    }

    // FTPipe's dataflow (§4): a tensor goes from its producer's stage to every stage reading it,
    // once per stage, and its gradient comes back from each of them.
    void addDirectTraffic(const Graph& g, const std::vector<StageId>& stageOf, std::vector<StageCost>& stages,
        double scale, const AutocastPlan& types)
    {
        const auto needsGrad = tensorsRequiringGrad(g);
        std::set<std::pair<std::uint32_t, std::uint32_t>> sent; // (tensor, reading stage)
        for (const auto& n : g.nodes()) {
            const auto to = stageOf[n.id.index()];
            for (auto in : n.inputs) {
                const auto& t = g.tensor(in);
                if (t.kind != TensorKind::Activation || !t.producer.valid() || stageOf[t.producer.index()] == to
                    || !sent.emplace(in.value, to.value).second)
                    continue;
                const auto from = stageOf[t.producer.index()];
                const double bytes = tensorBytes(g, in, scale, types);
                addSend(stages[from.index()].forwardSends, to, bytes);
                stages[from.index()].sendForwardBytes += bytes;
                if (needsGrad[in.index()]) {
                    addSend(stages[to.index()].backwardSends, from, bytes);
                    stages[to.index()].sendBackwardBytes += bytes;
                }
            }
        }
        for (auto& s : stages) {
            const auto byStage = [](const StageSend& a, const StageSend& b) { return a.stage < b.stage; };
            std::sort(s.forwardSends.begin(), s.forwardSends.end(), byStage);
            std::sort(s.backwardSends.begin(), s.backwardSends.end(), byStage);
        }
    }

} // namespace

std::string Partition::cutsText() const
{
    std::string out;
    for (std::size_t i = 1; i < stageStarts.size(); ++i)
        out += (i > 1 ? "," : "") + std::to_string(stageStarts[i]);
    return out;
}

Partition partitionFromCuts(std::string_view cuts, std::size_t nodeCount, int stages)
{
    Partition p { { 0 } };
    std::string_view rest = cuts;
    while (!rest.empty()) {
        const auto comma = rest.find(',');
        p.stageStarts.push_back(parseIndex(rest.substr(0, comma), cuts));
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
    if (p.stageCount() != stages)
        throw Error("cut list '" + std::string(cuts) + "' gives " + std::to_string(p.stageCount()) + " stages, but "
            + std::to_string(stages) + " were asked for (give " + std::to_string(stages - 1) + " cuts)");
    checkPartition(p, nodeCount);
    return p;
}

void checkPartition(const Partition& p, std::size_t nodeCount)
{
    if (p.stageStarts.empty() || p.stageStarts.front() != 0)
        throw Error("partition: the first stage must start at node 0");
    if (static_cast<std::size_t>(p.stageCount()) > nodeCount)
        throw Error("partition: " + std::to_string(p.stageCount()) + " stages cannot be cut from "
            + std::to_string(nodeCount) + " nodes");
    for (int s = 1; s < p.stageCount(); ++s) {
        const auto cut = p.stageStarts[static_cast<std::size_t>(s)];
        if (cut >= nodeCount)
            throw Error("partition: cut " + std::to_string(cut) + " is past the last node ("
                + std::to_string(nodeCount - 1) + ")");
        if (cut <= p.stageStarts[static_cast<std::size_t>(s) - 1])
            throw Error("partition: cuts must be strictly increasing; stage " + std::to_string(s - 1)
                + " would be empty at cut " + std::to_string(cut));
    }
    if (p.dataflow() && p.nodeOrder.size() != nodeCount)
        throw Error("partition: its node order lists " + std::to_string(p.nodeOrder.size()) + " nodes, the graph has "
            + std::to_string(nodeCount));
}

Partition computeBalancedPartition(const std::vector<double>& nodeCost, int stages)
{
    if (stages < 1 || static_cast<std::size_t>(stages) > nodeCost.size())
        throw Error(
            "cannot split " + std::to_string(nodeCost.size()) + " nodes into " + std::to_string(stages) + " stages");
    std::vector<double> prefix(nodeCost.size() + 1, 0);
    std::partial_sum(nodeCost.begin(), nodeCost.end(), prefix.begin() + 1);
    Partition p { { 0 } };
    for (int s = 1; s < stages; ++s) {
        // Cut where the prefix crosses s/S of the total, keeping room for the stages still to come.
        const double target = prefix.back() * s / stages;
        auto cut = static_cast<std::size_t>(std::lower_bound(prefix.begin(), prefix.end(), target) - prefix.begin());
        cut = std::clamp(cut, p.stageStarts.back() + 1, nodeCost.size() - static_cast<std::size_t>(stages - s));
        p.stageStarts.push_back(cut);
    }
    return p;
}

std::vector<StageId> stageOfNodes(const Partition& p, std::size_t nodeCount)
{
    std::vector<StageId> stageOf(nodeCount);
    for (int s = 0; s < p.stageCount(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        for (auto n = p.stageBegin(id); n < p.stageEnd(id, nodeCount); ++n)
            stageOf[p.dataflow() ? p.nodeOrder[n].index() : n] = id;
    }
    return stageOf;
}

Graph graphInNodeOrder(const Graph& g, const std::vector<NodeId>& order)
{
    if (order.size() != g.nodeCount())
        throw Error("node order: lists " + std::to_string(order.size()) + " nodes, the graph has "
            + std::to_string(g.nodeCount()));
    std::vector<NodeId> position(g.nodeCount());
    for (std::size_t i = 0; i < order.size(); ++i) {
        if (order[i].index() >= g.nodeCount() || position[order[i].index()].valid())
            throw Error("node order: node " + std::to_string(order[i].value) + " is out of range or listed twice");
        position[order[i].index()] = NodeId(static_cast<std::uint32_t>(i));
    }
    Graph out(g.info());
    for (auto t : g.tensors()) {
        if (t.producer.valid())
            t.producer = position[t.producer.index()];
        out.addTensor(std::move(t));
    }
    for (std::size_t i = 0; i < order.size(); ++i) {
        const auto& n = g.node(order[i]);
        for (auto in : n.inputs) {
            const auto producer = g.tensor(in).producer;
            if (producer.valid() && position[producer.index()].index() >= i)
                throw Error("node order: node '" + n.name + "' comes before '" + g.node(producer).name
                    + "', which produces its input");
        }
        out.addNode(n);
    }
    out.setOutputs(g.outputs());
    return out;
}

Profile profileInNodeOrder(const Profile& profile, const std::vector<NodeId>& order)
{
    Profile out = profile;
    out.nodes.clear();
    for (auto n : order)
        out.nodes.push_back(profile.nodes.at(n.index()));
    return out;
}

namespace {

    // A stage's working sets, as StageModel::setWorkingSets has them: its largest node scratch
    // (in `c.workspaceBytes` on entry) or the backward's, with each convolution's columns at its
    // node on the CPU device; B and W apart where zero-bubble splits the backward; the output
    // gradients B keeps for W; what the first backward after an optimizer step adds.
    void setWorkingSets(const Graph& g, const GradientFlow& flow, std::size_t begin, std::size_t end, double workScale,
        bool cpuScratch, StageCost& c)
    {
        const double nodeScratch = c.workspaceBytes;
        c.workspaceBytes =
            std::max(nodeScratch, backwardWorkingProfile(g, flow, begin, end).peak(workScale, cpuScratch));
        const double weightPass = weightPassProfile(g, flow, begin, end).peak(workScale, cpuScratch);
        const double inputPass =
            backwardWorkingProfile(g, flow, begin, end, BackwardPass::InputOnly).peak(workScale, cpuScratch);
        c.inputPassExtraBytes = std::max(0.0, inputPass - nodeScratch);
        c.weightPassExtraBytes = std::max(0.0, weightPass - nodeScratch);
        c.splitWorkspaceBytes = nodeScratch + std::max(c.inputPassExtraBytes, c.weightPassExtraBytes);
        c.firstBackwardExtraBytes = std::max(0.0,
            backwardWorkingProfile(g, flow, begin, end, BackwardPass::Full, true).peak(workScale, cpuScratch)
                - c.workspaceBytes);
        c.weightGradHeldBytes = static_cast<double>(weightGradHeldBytes(g, flow, begin, end)) * workScale;
    }

    // Parameters read on several stages (tied embeddings): each holder's gradient bytes of them.
    void addTiedParameters(
        const Graph& g, const std::vector<StageAccumulator>& acc, double gradientBytes, std::vector<StageCost>& stages)
    {
        std::map<std::uint32_t, int> holders;
        for (const auto& a : acc) {
            for (auto id : a.params)
                ++holders[id.value];
        }
        for (std::size_t s = 0; s < stages.size(); ++s) {
            for (auto id : acc[s].params) {
                if (holders[id.value] > 1)
                    stages[s].tiedParameters.push_back(
                        { id.value, static_cast<double>(numElements(g.tensor(id).shape)) * gradientBytes });
            }
            std::sort(stages[s].tiedParameters.begin(), stages[s].tiedParameters.end(),
                [](const TiedParameter& a, const TiedParameter& b) { return a.tensor < b.tensor; });
        }
    }

} // namespace

std::vector<StageCost> computeStageCosts(const Graph& g, const Profile& profile, const Partition& p, double mb)
{
    checkPartition(p, g.nodeCount());
    if (p.dataflow()) { // contiguous over its own order, with direct sends instead of relays
        const auto ordered = graphInNodeOrder(g, p.nodeOrder);
        const Partition contiguous { p.stageStarts };
        auto stages = computeStageCosts(ordered, profileInNodeOrder(profile, p.nodeOrder), contiguous, mb);
        for (auto& s : stages)
            s.sendForwardBytes = s.sendBackwardBytes = 0;
        const double scale = mb / static_cast<double>(std::max<std::int64_t>(1, g.info().microBatch));
        addDirectTraffic(ordered, stageOfNodes(contiguous, ordered.nodeCount()), stages, scale,
            planAutocast(ordered, profile.setup.mixedPrecision()));
        return stages;
    }
    const auto costs = computeOpCosts(g);
    const auto stageOf = stageOfNodes(p, g.nodeCount());
    // Activations at the planned micro-batch and their autocast types; working gradients and
    // scratch at the precision's activation scale.
    const double scale = mb / static_cast<double>(std::max<std::int64_t>(1, g.info().microBatch));
    const auto types = planAutocast(g, profile.setup.mixedPrecision());
    const double workScale = scale * activationScale(profile.setup);
    std::vector<StageCost> stages(static_cast<std::size_t>(p.stageCount()));
    std::vector<StageAccumulator> acc(stages.size());
    const auto flow = gradientFlow(g);
    std::vector<std::vector<std::int64_t>> pending; // by stage: forwardPendingKept
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        pending.push_back(forwardPendingKept(g, flow, p.stageBegin(id), p.stageEnd(id, g.nodeCount())));
    }
    for (const auto& n : g.nodes()) {
        const auto s = stageOf[n.id.index()].index();
        const auto& np = profile.nodes[n.id.index()];
        stages[s].forwardNs += np.forwardNs.at(mb);
        stages[s].backwardNs += np.backwardNs.at(mb);
        stages[s].weightGradNs += np.weightGradNs.at(mb);
        // A node's scratch on top of the micro-batch's activations kept so far.
        const auto local = n.id.index() - p.stageBegin(StageId(static_cast<std::uint32_t>(s)));
        stages[s].workspaceBytes = std::max(
            stages[s].workspaceBytes, np.workspaceBytes.at(mb) - static_cast<double>(pending[s][local]) * workScale);
        addSavedBytes(g, n, costs[n.id.index()], acc[s], stages[s], scale, types);
        for (auto in : n.inputs) {
            if (g.tensor(in).kind == TensorKind::Parameter && acc[s].params.insert(in).second)
                stages[s].parameterCount += numElements(g.tensor(in).shape);
        }
    }
    const bool cpuScratch = cpuEngineScratch(profile.deviceKind);
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        const auto begin = p.stageBegin(id);
        const auto end = p.stageEnd(id, g.nodeCount());
        setWorkingSets(g, flow, begin, end, workScale, cpuScratch, stages[s]);
        for (auto root : acc[s].rootsW)
            stages[s].weightGradOnlyBytes += tensorBytes(g, root, scale, types);
        stages[s].weightGradOnlyBytes = std::min(stages[s].weightGradOnlyBytes, stages[s].activationBytes);
    }
    addTiedParameters(g, acc, bytesPerParameter(profile.setup).gradients, stages);
    addBoundaryTraffic(g, stageOf, stages, scale, types);
    return stages;
}

} // namespace ps
