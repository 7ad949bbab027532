#include "graph/op_cost.h"

#include "graph/op_registry.h"
#include "graph/tensor_scratch.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace ps {

using detail::TensorScratch;
namespace {

    struct CostContext
    {
        const Graph& graph;
        const std::vector<bool>& requiresGrad;
        const std::vector<NodeId>& owners;
    };

    std::int64_t bytesOf(const Graph& g, TensorId id)
    {
        const auto& t = g.tensor(id);
        return numBytes(t.shape, t.dtype);
    }

    // Share of a node's backward that produces parameter gradients (the registry's, when it reads one).
    double weightGradShare(const CostContext& ctx, const Node& node, const OpDef& def)
    {
        for (auto in : node.inputs) {
            if (ctx.graph.tensor(in).kind == TensorKind::Parameter)
                return def.weightGradShare;
        }
        return 0;
    }

    // What the backward keeps, from the registry: activation inputs it reads, its output, a norm's
    // input for the weight gradient (under a split backward it stays until W), internal state.
    void addSavedState(const CostContext& ctx, const Node& node, const OpDef& def, OpCost& cost)
    {
        const auto& g = ctx.graph;
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            const bool saved = i >= 8 ? def.savedInputs == kSaveAllInputs : (def.savedInputs >> i) & 1U;
            if (saved && isPerMicroBatch(g, node.inputs[i]))
                cost.savedTensors.push_back(node.inputs[i]);
        }
        if (def.savesOutput && !node.outputs.empty() && isPerMicroBatch(g, node.outputs[0]))
            cost.savedTensors.push_back(node.outputs[0]);
        if (def.weightGradReadsInput) {
            bool trains = false;
            for (auto in : node.inputs)
                trains = trains || (g.tensor(in).kind == TensorKind::Parameter && ctx.requiresGrad[in.index()]);
            if (trains && isPerMicroBatch(g, node.inputs[0]))
                cost.savedForWeightGrad.push_back(node.inputs[0]);
        }
        if (def.saved != nullptr)
            def.saved(g, node, cost);
    }

    OpCost nodeCost(const CostContext& ctx, const Node& node)
    {
        const auto& g = ctx.graph;
        const auto& def = opDef(node.op);
        OpCost cost;
        for (auto in : node.inputs) {
            cost.bytesRead += bytesOf(g, in);
            if (g.tensor(in).kind == TensorKind::Parameter && ctx.owners[in.index()] == node.id) {
                cost.parameterCount += numElements(g.tensor(in).shape);
                cost.parameterBytes += bytesOf(g, in);
            }
        }
        if (!def.isView) {
            for (auto out : node.outputs)
                cost.outputBytes += bytesOf(g, out);
            cost.bytesWritten = cost.outputBytes;
        }
        const bool anyGrad = !node.outputs.empty() && ctx.requiresGrad[node.outputs[0].index()];
        if (def.cost != nullptr) {
            def.cost(OpCostContext { g, ctx.requiresGrad }, node, cost);
        } else {
            const auto& x = g.tensor(node.inputs.empty() ? node.outputs[0] : node.inputs[0]);
            const auto n = static_cast<double>(
                numElements(def.basis == CostBasis::Input ? x.shape : g.tensor(node.outputs[0]).shape));
            cost.forwardFlops = def.forwardFlops * n;
            cost.backwardFlops = anyGrad ? def.backwardFlops * n : 0;
            cost.weightGradFlops = cost.backwardFlops * weightGradShare(ctx, node, def);
            if (anyGrad)
                addSavedState(ctx, node, def, cost);
        }
        if (def.outputWorkspace)
            cost.workspaceBytes = cost.outputBytes; // row-wise max/sum pass keeps a scratch copy
        for (auto t : cost.savedTensors)
            cost.savedBytes += bytesOf(g, t);
        cost.savedBytes += cost.savedExtraBytes;
        return cost;
    }

} // namespace

std::vector<bool> tensorsRequiringGrad(const Graph& graph)
{
    std::vector<bool> needsGrad(graph.tensorCount(), false);
    for (const auto& t : graph.tensors())
        needsGrad[t.id.index()] = t.kind == TensorKind::Parameter;
    // Bool and integer values (masks, indices, comparisons, casts to int) have no gradient.
    const auto floating = [&graph](TensorId t) {
        const auto dtype = graph.tensor(t).dtype;
        return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F64;
    };
    for (const auto& n : graph.nodes()) {
        bool any = false;
        for (auto in : n.inputs)
            any = any || needsGrad[in.index()];
        for (auto out : n.outputs)
            needsGrad[out.index()] = any && floating(out);
    }
    return needsGrad;
}

std::vector<OpCost> computeOpCosts(const Graph& graph)
{
    const auto requiresGrad = tensorsRequiringGrad(graph);
    const auto owners = graph.parameterOwners();
    const CostContext ctx { graph, requiresGrad, owners };
    std::vector<OpCost> costs;
    costs.reserve(graph.nodeCount());
    for (const auto& n : graph.nodes())
        costs.push_back(nodeCost(ctx, n));
    return costs;
}

TensorId storageRoot(const Graph& graph, TensorId id)
{
    for (;;) {
        const auto& t = graph.tensor(id);
        if (!t.producer.valid())
            return id;
        const auto& producer = graph.node(t.producer);
        if (!isViewOp(producer.op) || producer.inputs.empty())
            return id;
        id = producer.inputs[0];
    }
}

std::int64_t savedActivationBytes(const Graph& graph, const std::vector<OpCost>& costs)
{
    std::unordered_set<TensorId> roots;
    std::int64_t bytes = 0;
    for (const auto& c : costs) {
        bytes += c.savedExtraBytes;
        for (auto t : c.savedTensors) {
            const auto root = storageRoot(graph, t);
            if (roots.insert(root).second)
                bytes += numBytes(graph.tensor(root).shape, graph.tensor(root).dtype);
        }
    }
    return bytes;
}

GradientFlow gradientFlow(const Graph& graph)
{
    GradientFlow flow { tensorsRequiringGrad(graph), std::vector<std::size_t>(graph.tensorCount(), 0),
        std::vector<std::uint32_t>(graph.tensorCount(), 0), {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {} };
    flow.bytes.reserve(graph.tensorCount());
    for (const auto& t : graph.tensors()) {
        flow.bytes.push_back(numBytes(t.shape, t.dtype));
        flow.parameter.push_back(t.kind == TensorKind::Parameter ? 1 : 0);
    }
    flow.passesGradient.assign(graph.nodeCount(), 0);
    for (const auto& node : graph.nodes()) {
        for (std::size_t i = 0; i < node.inputs.size() && i < 32 && !node.outputs.empty(); ++i) {
            const bool sums =
                node.op == OpType::Add || node.op == OpType::BiasAdd || (node.op == OpType::Sub && i == 0);
            if (node.op == OpType::Reshape
                || (sums && graph.tensor(node.inputs[i]).shape == graph.tensor(node.outputs[0]).shape))
                flow.passesGradient[node.id.index()] |= 1U << i;
        }
    }
    for (std::size_t n = 0; n < graph.nodeCount(); ++n) {
        for (auto in : graph.nodes()[n].inputs) {
            flow.lastReader[in.index()] = std::max(flow.lastReader[in.index()], n + 1);
            ++flow.readers[in.index()];
        }
    }
    const auto costs = computeOpCosts(graph);
    flow.savedRoots.resize(graph.nodeCount());
    flow.backwardScratch.reserve(graph.nodeCount());
    flow.fixedScratch.reserve(graph.nodeCount());
    flow.fixedInputGradScratch.reserve(graph.nodeCount());
    flow.weightPassBytes.reserve(graph.nodeCount());
    flow.weightPassScratch.reserve(graph.nodeCount());
    flow.weightGradRoots.resize(graph.nodeCount());
    flow.savedExtraBytes.resize(graph.nodeCount());
    flow.trains.resize(graph.nodeCount());
    for (std::size_t n = 0; n < graph.nodeCount(); ++n) {
        for (auto t : costs[n].savedTensors)
            flow.savedRoots[n].push_back(storageRoot(graph, t));
        for (auto t : costs[n].savedForWeightGrad)
            flow.weightGradRoots[n].push_back(storageRoot(graph, t));
        flow.savedExtraBytes[n] = costs[n].savedExtraBytes;
        flow.backwardScratch.push_back(costs[n].backwardWorkspaceBytes);
        flow.fixedScratch.push_back(costs[n].fixedWorkspaceBytes);
        flow.fixedInputGradScratch.push_back(costs[n].fixedInputGradWorkspaceBytes);
        flow.weightPassScratch.push_back(costs[n].fixedWeightGradWorkspaceBytes);
        std::int64_t newGradients = 0;
        for (auto in : graph.nodes()[n].inputs) {
            if (graph.tensor(in).kind == TensorKind::Parameter && flow.requiresGrad[in.index()])
                newGradients += flow.bytes[in.index()];
        }
        flow.weightPassBytes.push_back(newGradients);
        for (auto in : graph.nodes()[n].inputs) {
            if (graph.tensor(in).kind == TensorKind::Parameter && flow.requiresGrad[in.index()])
                flow.trains[n] = 1;
        }
    }
    return flow;
}

std::int64_t backwardWorkingBytes(const Graph& graph, std::size_t begin, std::size_t end)
{
    return backwardWorkingBytes(graph, gradientFlow(graph), begin, end);
}

namespace {

    // Bytes of saved storages released after each node's backward in [begin, end): a storage goes
    // after the first node of the range that saves it. A split B releases neither what W reads
    // nor a training node's internal state.
    std::vector<std::int64_t> savedReleases(
        const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end, bool split)
    {
        TensorScratch seen(1, graph.tensorCount());
        TensorScratch forWeight(2, graph.tensorCount());
        if (split) {
            for (std::size_t n = begin; n < end; ++n) {
                for (auto root : flow.weightGradRoots[n])
                    forWeight.insert(root, 1);
            }
        }
        std::vector<std::int64_t> releasedAfter(end - begin, 0);
        for (std::size_t n = begin; n < end; ++n) {
            for (auto root : flow.savedRoots[n]) {
                if (seen.insert(root, n) && !forWeight.contains(root))
                    releasedAfter[n - begin] += flow.bytes[root.index()];
            }
            if (!split || flow.trains[n] == 0)
                releasedAfter[n - begin] += flow.savedExtraBytes[n];
        }
        return releasedAfter;
    }

} // namespace

std::int64_t backwardWorkingBytes(
    const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end, BackwardPass pass)
{
    return backwardWorkingProfile(graph, flow, begin, end, pass).bytes;
}

double WorkingProfile::peak(double scale, bool scratch) const
{
    double result = scale * static_cast<double>(bytes);
    for (const auto& p : withoutScratch)
        result = std::max(result, scale * static_cast<double>(p.working) + static_cast<double>(p.fixed));
    for (std::size_t i = 0; scratch && i < withScratch.size(); ++i)
        result = std::max(
            result, scale * static_cast<double>(withScratch[i].working) + static_cast<double>(withScratch[i].fixed));
    return std::max(result, 0.0);
}

namespace {

    // Drops the points another one outdoes at every scale (no less working and fixed bytes).
    void keepUndominated(std::vector<WorkingProfile::Point>& points)
    {
        std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
            return a.fixed != b.fixed ? a.fixed > b.fixed : a.working > b.working;
        });
        std::vector<WorkingProfile::Point> kept;
        for (const auto& p : points) {
            if (kept.empty() || p.working > kept.back().working)
                kept.push_back(p);
        }
        points = std::move(kept);
    }

} // namespace

std::vector<std::int64_t> forwardPendingKept(
    const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end)
{
    TensorScratch saved(0, graph.tensorCount());
    std::int64_t pending = 0;
    for (std::size_t n = begin; n < end; ++n) {
        for (auto root : flow.savedRoots[n]) {
            const auto producer = graph.tensor(root).producer;
            if (producer.valid() && producer.index() >= begin && saved.insert(root, 1))
                pending += flow.bytes[root.index()];
        }
        pending += flow.savedExtraBytes[n];
    }
    std::vector<std::int64_t> out(end - begin, 0);
    for (std::size_t n = begin; n < end; ++n) {
        for (auto o : graph.nodes()[n].outputs) {
            if (saved.contains(o)) {
                pending -= flow.bytes[o.index()];
                saved.erase(o);
            }
        }
        pending -= flow.savedExtraBytes[n];
        out[n - begin] = std::max<std::int64_t>(pending, 0);
    }
    return out;
}

namespace {

    // The activation gradients a backward holds, by storage: Add, BiasAdd and Sub's first operand
    // pass the output's gradient on when shapes agree, and Reshape's is a view. Starts with the
    // gradients the next stage sends back (values produced in the range and read after it) and
    // the loss's own.
    class GradientStorages
    {
    public:
        GradientStorages(const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end)
            : m_live(0, graph.tensorCount())
        {
            m_storages.reserve(2 * (end - begin) + 8);
            for (std::size_t n = begin; n < end; ++n) {
                for (auto out : graph.nodes()[n].outputs) {
                    if (flow.requiresGrad[out.index()] && flow.parameter[out.index()] == 0
                        && flow.lastReader[out.index()] > end && !holds(out))
                        acquire(out, fresh(flow.bytes[out.index()]));
                }
            }
            for (auto out : graph.outputs()) {
                const auto producer = graph.tensor(out).producer;
                if (producer.valid() && producer.index() >= begin && producer.index() < end && !holds(out))
                    acquire(out, fresh(std::max<std::int64_t>(flow.bytes[out.index()], 4)));
            }
        }
        [[nodiscard]] std::int64_t held() const
        {
            return m_held;
        }
        [[nodiscard]] bool holds(TensorId t) const
        {
            return m_live.contains(t);
        }
        // The storage holding t's gradient, or none().
        [[nodiscard]] std::size_t storageOf(TensorId t) const
        {
            return holds(t) ? m_live.at(t) : none();
        }
        [[nodiscard]] std::size_t none() const
        {
            return m_storages.size();
        }
        std::size_t fresh(std::int64_t bytes)
        {
            m_storages.push_back({ bytes, 0, false });
            return m_storages.size() - 1;
        }
        void acquire(TensorId t, std::size_t storage)
        {
            if (!m_live.insert(t, storage))
                return;
            auto& st = m_storages[storage];
            if (st.refs++ == 0 && !st.pinned)
                m_held += st.bytes;
        }
        // `pin`: a split B keeps it for W (counted until then).
        void release(TensorId t, bool pin)
        {
            auto& st = m_storages[m_live.at(t)];
            m_live.erase(t);
            if (pin && !st.pinned) {
                st.pinned = true;
                return;
            }
            if (--st.refs == 0 && !st.pinned)
                m_held -= st.bytes;
        }

    private:
        struct Storage
        {
            std::int64_t bytes = 0;
            int refs = 0;
            bool pinned = false;
        };
        std::vector<Storage> m_storages;
        TensorScratch m_live; // tensor -> storage holding its gradient
        std::int64_t m_held = 0;
    };

    // What node n's backward adds while it runs: its input gradients (twice where another reader's
    // is held: the out-of-place sum) and, in a full backward, its parameters' until accumulated.
    template <typename Passes>
    std::int64_t nodeGradientBytes(const Graph& graph, const GradientFlow& flow, const GradientStorages& grads,
        std::size_t n, bool split, const Passes& passes)
    {
        std::int64_t extra = 0;
        const auto& node = graph.nodes()[n];
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            const auto in = node.inputs[i];
            if (!flow.requiresGrad[in.index()])
                continue;
            if (flow.parameter[in.index()] != 0)
                extra += split ? 0 : flow.bytes[in.index()]; // a split B leaves them to W
            else if (grads.holds(in))
                extra += 2 * flow.bytes[in.index()];
            else if (!passes(i))
                extra += flow.bytes[in.index()];
        }
        return extra;
    }

} // namespace

WorkingProfile backwardWorkingProfile(const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end,
    BackwardPass pass, bool growingGradients)
{
    const bool split = pass == BackwardPass::InputOnly;
    GradientStorages grads(graph, flow, begin, end);
    const auto releasedAfter = savedReleases(graph, flow, begin, end, split);
    WorkingProfile profile;
    std::int64_t gradients = 0; // parameter gradients allocated so far (growing)
    TensorScratch allocated(1, graph.tensorCount()); // parameters with one (savedReleases is done with slot 1)
    std::int64_t released = 0;
    std::int64_t peak = grads.held();
    for (std::size_t n = end; n-- > begin;) {
        const auto& node = graph.nodes()[n];
        const auto outStorage = node.outputs.empty() ? grads.none() : grads.storageOf(node.outputs[0]);
        if (std::none_of(node.outputs.begin(), node.outputs.end(), [&](TensorId t) { return grads.holds(t); })) {
            released += releasedAfter[n - begin];
            continue;
        }
        const auto passes = [&, mask = flow.passesGradient[n]](std::size_t i) {
            return i < 32 && ((mask >> i) & 1U) != 0 && outStorage < grads.none();
        };
        const auto extra = nodeGradientBytes(graph, flow, grads, n, split, passes) + flow.backwardScratch[n];
        for (auto in : node.inputs) { // each parameter's gradient is allocated beside the first one computed for it
            if (growingGradients && !split && flow.parameter[in.index()] != 0 && flow.requiresGrad[in.index()]
                && allocated.insert(in, 1))
                gradients += flow.bytes[in.index()];
        }
        const auto working = grads.held() + extra - released;
        peak = std::max(peak, working);
        const auto columns = split ? flow.fixedInputGradScratch[n] : flow.fixedScratch[n];
        if (columns > 0) // its columns while this node's gradients are held
            profile.withScratch.push_back({ working, columns + gradients });
        if (gradients > 0) { // never fewer than at earlier points: drop those it outdoes
            auto& front = profile.withoutScratch;
            while (!front.empty() && front.back().working <= working)
                front.pop_back();
            front.push_back({ working, gradients });
        }
        released += releasedAfter[n - begin];
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            const auto in = node.inputs[i];
            if (flow.requiresGrad[in.index()] && flow.parameter[in.index()] == 0 && !grads.holds(in))
                grads.acquire(in, passes(i) ? outStorage : grads.fresh(flow.bytes[in.index()]));
        }
        for (auto out : node.outputs) {
            if (grads.holds(out))
                grads.release(out, split && flow.trains[n] != 0);
        }
    }
    profile.bytes = peak;
    keepUndominated(profile.withScratch);
    return profile;
}

} // namespace ps
