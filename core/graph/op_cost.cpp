#include "graph/op_cost.h"

#include <algorithm>
#include <array>
#include <unordered_map>
#include <unordered_set>

namespace ps {
namespace {

    // Per-element FLOP counts of the non-matmul ops (forward, backward). Rough but consistent:
    // e.g. layernorm reads x twice (mean, variance), then normalizes, scales and shifts.
    struct ElementwiseFlops
    {
        double forward;
        double backward;
    };

    ElementwiseFlops elementwiseFlops(OpType op)
    {
        switch (op) {
        case OpType::BiasAdd:
        case OpType::Add:
            return { 1, 1 };
        case OpType::Mul:
            return { 1, 2 };
        case OpType::Scale:
        case OpType::Relu:
            return { 1, 1 };
        case OpType::Mask:
            return { 1, 1 };
        case OpType::Dropout:
            return { 2, 1 };
        case OpType::LayerNorm:
            return { 8, 14 };
        case OpType::RMSNorm:
            return { 5, 10 };
        case OpType::Softmax:
            return { 5, 4 };
        case OpType::Gelu:
            return { 8, 13 };
        case OpType::Tanh:
            return { 4, 3 };
        case OpType::CrossEntropy:
            return { 5, 3 };
        case OpType::Sub:
        case OpType::Sqrt:
            return { 1, 2 };
        case OpType::Div:
            return { 1, 3 };
        case OpType::Pow:
            return { 2, 3 };
        case OpType::Erf:
            return { 8, 4 };
        case OpType::ReduceMean:
        case OpType::MaxPool:
        case OpType::GlobalAvgPool:
            return { 1, 1 }; // per input element
        case OpType::Expand:
            return { 0, 1 }; // the backward sums the broadcast copies
        case OpType::BatchNorm:
            return { 8, 14 };
        case OpType::Opaque:
            return { 1, 2 };
        default:
            return { 0, 0 };
        }
    }

    // Reductions are costed per element read, everything else per element written.
    bool costedPerInput(OpType op)
    {
        return op == OpType::CrossEntropy || op == OpType::ReduceMean || op == OpType::MaxPool
            || op == OpType::GlobalAvgPool;
    }

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

    bool isActivation(const Graph& g, TensorId id)
    {
        return g.tensor(id).kind == TensorKind::Activation;
    }

    void saveIfActivation(const Graph& g, OpCost& cost, TensorId id)
    {
        if (isActivation(g, id))
            cost.savedTensors.push_back(id);
    }

    void addMatMulCost(const CostContext& ctx, const Node& node, OpCost& cost)
    {
        const auto& a = ctx.graph.tensor(node.inputs[0]);
        const auto& out = ctx.graph.tensor(node.outputs[0]);
        const double macs = static_cast<double>(numElements(out.shape)) * static_cast<double>(a.shape.back());
        const double bias = node.inputs.size() > 2 ? static_cast<double>(numElements(out.shape)) : 0.0;
        cost.forwardFlops = 2 * macs + bias;
        if (node.inputs.size() > 2 && ctx.requiresGrad[node.inputs[2].index()]) { // bias gradient: a reduction
            cost.backwardFlops += bias;
            cost.weightGradFlops += bias;
        }
        // dA = dY @ B^T needs B; dB = A^T @ dY needs A. Each is one more matmul of the same size.
        if (ctx.requiresGrad[node.inputs[0].index()]) {
            cost.backwardFlops += 2 * macs;
            saveIfActivation(ctx.graph, cost, node.inputs[1]);
        }
        if (ctx.requiresGrad[node.inputs[1].index()]) {
            cost.backwardFlops += 2 * macs;
            saveIfActivation(ctx.graph, cost, node.inputs[0]);
            // dW = A^T dY: with a parameter as B this is the weight gradient, and A is kept only for it.
            if (ctx.graph.tensor(node.inputs[1]).kind == TensorKind::Parameter) {
                cost.weightGradFlops += 2 * macs;
                if (isActivation(ctx.graph, node.inputs[0]))
                    cost.savedForWeightGrad.push_back(node.inputs[0]);
            }
        }
    }

    // Share of a non-matmul node's backward that produces parameter gradients: bias and table
    // gradients are all of it; layernorm's gamma/beta reductions are 2 of its ~14 FLOPs per element.
    double weightGradShare(const CostContext& ctx, const Node& node)
    {
        bool hasParam = false;
        for (auto in : node.inputs)
            hasParam = hasParam || ctx.graph.tensor(in).kind == TensorKind::Parameter;
        if (!hasParam)
            return 0;
        switch (node.op) {
        case OpType::BiasAdd:
        case OpType::Embedding:
            return 1.0;
        case OpType::LayerNorm:
        case OpType::RMSNorm:
        case OpType::BatchNorm:
            return 2.0 / 14.0;
        default:
            return 0.5;
        }
    }

    // A norm's scale gradient reads its input too: under a split backward the input stays until W.
    void keepForWeightGrad(const CostContext& ctx, const Node& node, OpCost& cost)
    {
        bool trains = false;
        for (auto in : node.inputs)
            trains = trains || (ctx.graph.tensor(in).kind == TensorKind::Parameter && ctx.requiresGrad[in.index()]);
        if (trains && isActivation(ctx.graph, node.inputs[0]))
            cost.savedForWeightGrad.push_back(node.inputs[0]);
    }

    void addSavedState(const CostContext& ctx, const Node& node, OpCost& cost)
    {
        const auto& g = ctx.graph;
        const auto& x = g.tensor(node.inputs[0]);
        const auto rows = x.shape.empty() ? 1 : numElements(x.shape) / x.shape.back();
        switch (node.op) {
        case OpType::LayerNorm:
            saveIfActivation(g, cost, node.inputs[0]);
            keepForWeightGrad(ctx, node, cost);
            cost.savedExtraBytes += 2 * rows * 4; // mean, rstd (fp32)
            break;
        case OpType::RMSNorm:
            saveIfActivation(g, cost, node.inputs[0]);
            keepForWeightGrad(ctx, node, cost);
            cost.savedExtraBytes += rows * 4; // rstd
            break;
        case OpType::BatchNorm:
            saveIfActivation(g, cost, node.inputs[0]);
            keepForWeightGrad(ctx, node, cost);
            cost.savedExtraBytes += 2 * (x.shape.size() > 1 ? x.shape[1] : 1) * 4; // batch mean, rstd
            break;
        case OpType::Pow:
        case OpType::Erf:
        case OpType::MaxPool:
            saveIfActivation(g, cost, node.inputs[0]);
            break;
        case OpType::Sqrt:
            saveIfActivation(g, cost, node.outputs[0]);
            break;
        case OpType::Gelu:
        case OpType::Mul:
        case OpType::Div:
            for (auto in : node.inputs)
                saveIfActivation(g, cost, in);
            break;
        case OpType::Softmax:
        case OpType::Tanh:
        case OpType::Relu:
            saveIfActivation(g, cost, node.outputs[0]);
            break;
        case OpType::Dropout:
            cost.savedExtraBytes += numElements(x.shape); // one-byte keep mask
            break;
        case OpType::CrossEntropy:
            cost.savedExtraBytes += numBytes(x.shape, DType::F32); // softmax probabilities
            cost.savedTensors.push_back(node.inputs[1]); // labels
            break;
        case OpType::Embedding:
            cost.savedTensors.push_back(node.inputs[0]); // indices
            break;
        case OpType::Opaque:
            for (auto in : node.inputs)
                saveIfActivation(g, cost, in);
            break;
        default:
            break;
        }
    }

    OpCost nodeCost(const CostContext& ctx, const Node& node)
    {
        const auto& g = ctx.graph;
        OpCost cost;
        for (auto in : node.inputs) {
            cost.bytesRead += bytesOf(g, in);
            if (g.tensor(in).kind == TensorKind::Parameter && ctx.owners[in.index()] == node.id) {
                cost.parameterCount += numElements(g.tensor(in).shape);
                cost.parameterBytes += bytesOf(g, in);
            }
        }
        if (!isViewOp(node.op)) {
            for (auto out : node.outputs)
                cost.outputBytes += bytesOf(g, out);
            cost.bytesWritten = cost.outputBytes;
        }
        const bool anyGrad = !node.outputs.empty() && ctx.requiresGrad[node.outputs[0].index()];
        if (node.op == OpType::MatMul) {
            addMatMulCost(ctx, node, cost);
        } else if (node.op == OpType::Conv) {
            // Each output element is a dot product over C_in/groups x kernel positions.
            const auto& w = g.tensor(node.inputs[1]).shape; // (C_out, C_in/groups, k...)
            double perOutput = 1;
            for (std::size_t d = 1; d < w.size(); ++d)
                perOutput *= static_cast<double>(w[d]);
            const double outputs = static_cast<double>(numElements(g.tensor(node.outputs[0]).shape));
            cost.forwardFlops = 2 * outputs * perOutput;
            cost.backwardFlops = anyGrad ? 2 * cost.forwardFlops : 0;
            cost.weightGradFlops = anyGrad ? cost.forwardFlops : 0;
            if (anyGrad && isActivation(g, node.inputs[0])) { // kept for the weight gradient
                cost.savedTensors.push_back(node.inputs[0]);
                cost.savedForWeightGrad.push_back(node.inputs[0]);
            }
        } else {
            const auto [fwd, bwd] = elementwiseFlops(node.op);
            const auto& x = g.tensor(node.inputs.empty() ? node.outputs[0] : node.inputs[0]);
            const auto n =
                static_cast<double>(numElements(costedPerInput(node.op) ? x.shape : g.tensor(node.outputs[0]).shape));
            cost.forwardFlops = fwd * n;
            cost.backwardFlops = anyGrad ? bwd * n : 0;
            if (node.op == OpType::Embedding && anyGrad)
                cost.backwardFlops = n; // scatter-add into the table gradient
            cost.weightGradFlops = cost.backwardFlops * weightGradShare(ctx, node);
            if (anyGrad)
                addSavedState(ctx, node, cost);
        }
        if (node.op == OpType::Softmax || node.op == OpType::CrossEntropy)
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
    for (const auto& n : graph.nodes()) {
        bool any = false;
        for (auto in : n.inputs)
            any = any || needsGrad[in.index()];
        for (auto out : n.outputs)
            needsGrad[out.index()] = any;
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
        std::vector<std::uint32_t>(graph.tensorCount(), 0), {}, {}, {}, {} };
    for (std::size_t n = 0; n < graph.nodeCount(); ++n) {
        for (auto in : graph.nodes()[n].inputs) {
            flow.lastReader[in.index()] = std::max(flow.lastReader[in.index()], n + 1);
            ++flow.readers[in.index()];
        }
    }
    const auto costs = computeOpCosts(graph);
    flow.savedRoots.resize(graph.nodeCount());
    flow.weightGradRoots.resize(graph.nodeCount());
    flow.savedExtraBytes.resize(graph.nodeCount());
    flow.trains.resize(graph.nodeCount());
    for (std::size_t n = 0; n < graph.nodeCount(); ++n) {
        for (auto t : costs[n].savedTensors)
            flow.savedRoots[n].push_back(storageRoot(graph, t));
        for (auto t : costs[n].savedForWeightGrad)
            flow.weightGradRoots[n].push_back(storageRoot(graph, t));
        flow.savedExtraBytes[n] = costs[n].savedExtraBytes;
        for (auto in : graph.nodes()[n].inputs) {
            if (graph.tensor(in).kind == TensorKind::Parameter && flow.requiresGrad[in.index()])
                flow.trains[n] = 1;
        }
    }
    return flow;
}

std::int64_t weightGradHeldBytes(const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end)
{
    // The storage of t's gradient: follow single readers that pass their output gradient through.
    const auto gradientRoot = [&](TensorId t) {
        while (
            flow.readers[t.index()] == 1 && flow.lastReader[t.index()] > begin && flow.lastReader[t.index()] <= end) {
            const auto& reader = graph.nodes()[flow.lastReader[t.index()] - 1];
            const bool passes = reader.op == OpType::Reshape
                || ((reader.op == OpType::Add || reader.op == OpType::BiasAdd
                        || (reader.op == OpType::Sub && reader.inputs[0] == t))
                    && graph.tensor(t).shape == graph.tensor(reader.outputs[0]).shape);
            if (!passes)
                break;
            t = reader.outputs[0];
        }
        return t;
    };
    std::unordered_set<std::uint32_t> held;
    std::int64_t bytes = 0;
    for (std::size_t n = begin; n < end; ++n) {
        const auto& node = graph.nodes()[n];
        bool trains = false;
        for (auto in : node.inputs)
            trains = trains || (graph.tensor(in).kind == TensorKind::Parameter && flow.requiresGrad[in.index()]);
        if (!trains)
            continue;
        for (auto out : node.outputs) {
            const auto root = gradientRoot(out);
            if (held.insert(root.value).second)
                bytes += numBytes(graph.tensor(root).shape, graph.tensor(root).dtype);
        }
    }
    return bytes;
}

std::int64_t backwardWorkingBytes(const Graph& graph, std::size_t begin, std::size_t end)
{
    return backwardWorkingBytes(graph, gradientFlow(graph), begin, end);
}

namespace {

    // A per-tensor map for one call, cleared in O(1) by a generation stamp: planners ask for
    // thousands of ranges of graphs with tens of thousands of tensors.
    class TensorScratch
    {
    public:
        TensorScratch(std::size_t slot, std::size_t tensors)
            : m_pool(pools()[slot])
        {
            if (m_pool.stamp.size() < tensors) {
                m_pool.stamp.assign(tensors, 0);
                m_pool.value.assign(tensors, 0);
                m_pool.generation = 0;
            }
            if (++m_pool.generation == 0) { // wrapped: stale stamps could match again
                std::fill(m_pool.stamp.begin(), m_pool.stamp.end(), 0);
                m_pool.generation = 1;
            }
        }
        [[nodiscard]] bool contains(TensorId t) const
        {
            return m_pool.stamp[t.index()] == m_pool.generation;
        }
        [[nodiscard]] std::size_t at(TensorId t) const
        {
            return m_pool.value[t.index()];
        }
        // False (and no change) when `t` is there already.
        bool insert(TensorId t, std::size_t value)
        {
            if (contains(t))
                return false;
            m_pool.stamp[t.index()] = m_pool.generation;
            m_pool.value[t.index()] = value;
            return true;
        }
        void erase(TensorId t)
        {
            m_pool.stamp[t.index()] = 0;
        }

    private:
        struct Pool
        {
            std::vector<std::uint32_t> stamp;
            std::vector<std::size_t> value;
            std::uint32_t generation = 0;
        };
        static std::array<Pool, 3>& pools()
        {
            thread_local std::array<Pool, 3> p;
            return p;
        }
        Pool& m_pool;
    };

} // namespace

std::int64_t backwardWorkingBytes(
    const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end, BackwardPass pass)
{
    const bool split = pass == BackwardPass::InputOnly;
    const auto& requiresGrad = flow.requiresGrad;
    const auto bytesOfTensor = [&](TensorId t) { return numBytes(graph.tensor(t).shape, graph.tensor(t).dtype); };
    const auto isActivationGrad = [&](TensorId t) {
        return requiresGrad[t.index()] && graph.tensor(t).kind != TensorKind::Parameter;
    };
    // Gradient storages with the tensors whose gradient they hold: Add, BiasAdd and Sub's first
    // operand pass the output's gradient on when shapes agree, and Reshape's is a view.
    struct Storage
    {
        std::int64_t bytes = 0;
        int refs = 0;
        bool pinned = false; // a split B keeps it for W
    };
    std::vector<Storage> storages;
    TensorScratch live(0, graph.tensorCount()); // tensor -> storage holding its gradient
    std::int64_t held = 0;
    const auto acquire = [&](TensorId t, std::size_t storage) {
        if (!live.insert(t, storage))
            return;
        auto& st = storages[storage];
        if (st.refs++ == 0 && !st.pinned)
            held += st.bytes;
    };
    const auto fresh = [&](std::int64_t bytes) {
        storages.push_back({ bytes, 0, false });
        return storages.size() - 1;
    };
    const auto release = [&](TensorId t, bool pin) {
        auto& st = storages[live.at(t)];
        live.erase(t);
        if (pin && !st.pinned) {
            st.pinned = true; // stays counted until W
            return;
        }
        if (--st.refs == 0 && !st.pinned)
            held -= st.bytes;
    };
    // The gradients the next stage sends back (values produced here and read after `end`), and
    // the loss's own.
    for (std::size_t n = begin; n < end; ++n) {
        for (auto out : graph.nodes()[n].outputs) {
            if (isActivationGrad(out) && flow.lastReader[out.index()] > end && !live.contains(out))
                acquire(out, fresh(bytesOfTensor(out)));
        }
    }
    for (auto out : graph.outputs()) {
        const auto producer = graph.tensor(out).producer;
        if (producer.valid() && producer.index() >= begin && producer.index() < end && !live.contains(out))
            acquire(out, fresh(std::max<std::int64_t>(bytesOfTensor(out), 4)));
    }
    // Where each saved storage is released: after the first node of the range that saves it. A
    // split B releases neither what W reads nor a training node's internal state.
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
                releasedAfter[n - begin] += numBytes(graph.tensor(root).shape, graph.tensor(root).dtype);
        }
    }
    for (std::size_t n = begin; n < end; ++n) {
        if (!split || flow.trains[n] == 0)
            releasedAfter[n - begin] += flow.savedExtraBytes[n];
    }
    std::int64_t released = 0;
    std::int64_t peak = held;
    for (std::size_t n = end; n-- > begin;) {
        const auto& node = graph.nodes()[n];
        const auto outStorage =
            !node.outputs.empty() && live.contains(node.outputs[0]) ? live.at(node.outputs[0]) : storages.size();
        bool any = false;
        for (auto out : node.outputs)
            any = any || live.contains(out);
        if (!any) {
            released += releasedAfter[n - begin];
            continue;
        }
        const auto passes = [&](std::size_t i) {
            const auto in = node.inputs[i];
            const bool sums = node.op == OpType::Add || node.op == OpType::BiasAdd || (node.op == OpType::Sub && i == 0)
                || node.op == OpType::Reshape;
            return sums && outStorage < storages.size()
                && (node.op == OpType::Reshape || graph.tensor(in).shape == graph.tensor(node.outputs[0]).shape);
        };
        std::int64_t extra = 0;
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            const auto in = node.inputs[i];
            if (!requiresGrad[in.index()])
                continue;
            if (graph.tensor(in).kind == TensorKind::Parameter) {
                extra += split ? 0 : bytesOfTensor(in); // until accumulated; a split B leaves them to W
                continue;
            }
            if (live.contains(in))
                extra += 2 * bytesOfTensor(in); // a second reader: its gradient, then the out-of-place sum
            else if (!passes(i))
                extra += bytesOfTensor(in);
        }
        peak = std::max(peak, held + extra - released);
        released += releasedAfter[n - begin];
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            const auto in = node.inputs[i];
            if (isActivationGrad(in) && !live.contains(in))
                acquire(in, passes(i) ? outStorage : fresh(bytesOfTensor(in)));
        }
        for (auto out : node.outputs) {
            if (live.contains(out))
                release(out, split && flow.trains[n] != 0);
        }
    }
    return peak;
}

} // namespace ps
