#include "graph/attention_fusion.h"

#include "util/error.h"

#include <algorithm>
#include <array>
#include <optional>
#include <set>

namespace ps {
namespace {

    // Scores elements of one call: leading dims x Tq x Tk.
    double scoreElements(const Shape& q, const Shape& k)
    {
        return static_cast<double>(numElements(q)) / static_cast<double>(q.back())
            * static_cast<double>(k[k.size() - 2]);
    }

    struct Chain
    {
        std::size_t scores = 0; // MatMul(q, k^T)
        std::ptrdiff_t transpose = -1; // k's Transpose, where the scores MatMul has no trans_b
        std::ptrdiff_t scale = -1;
        std::ptrdiff_t mask = -1;
        std::size_t softmax = 0;
        std::ptrdiff_t dropout = -1; // on the probabilities
        std::size_t context = 0; // MatMul(probabilities, v)
        TensorId q, k, v, padding;
        double scaleValue = 1.0;
        double dropoutP = 0.0;
        bool causal = false;
    };

    class ChainFinder
    {
    public:
        explicit ChainFinder(const Graph& g)
            : m_g(g)
            , m_consumers(g.consumers())
            , m_outputs(g.outputs().begin(), g.outputs().end())
        {
        }

        // The chain whose context MatMul is node `c`, if it has the fused form.
        [[nodiscard]] std::optional<Chain> at(const Node& c) const
        {
            if (c.op != OpType::MatMul || c.inputs.size() != 2 || c.intAttr("trans_b", 0) != 0)
                return std::nullopt;
            Chain ch;
            ch.context = c.id.index();
            ch.v = c.inputs[1];
            const auto* node = soleFeeder(c.inputs[0], c.id);
            if (node != nullptr && node->op == OpType::Dropout && node->inputs.size() == 1) {
                ch.dropout = static_cast<std::ptrdiff_t>(node->id.index());
                ch.dropoutP = node->floatAttr("p", 0.0);
                node = soleFeeder(node->inputs[0], node->id);
            }
            if (node == nullptr || node->op != OpType::Softmax || node->inputs.size() != 1)
                return std::nullopt;
            ch.softmax = node->id.index();
            node = soleFeeder(node->inputs[0], node->id);
            if (node != nullptr && node->op == OpType::Mask) {
                ch.mask = static_cast<std::ptrdiff_t>(node->id.index());
                ch.causal = node->intAttr("causal", 0) != 0;
                if (node->inputs.size() > 1)
                    ch.padding = node->inputs[1];
                node = soleFeeder(node->inputs[0], node->id);
            }
            if (node != nullptr && node->op == OpType::Scale) { // before the Mask, where there is one
                ch.scale = static_cast<std::ptrdiff_t>(node->id.index());
                ch.scaleValue = node->floatAttr("scale", 1.0);
                node = soleFeeder(node->inputs[0], node->id);
            }
            if (node == nullptr || node->op != OpType::MatMul || node->inputs.size() != 2)
                return std::nullopt;
            ch.scores = node->id.index();
            ch.q = node->inputs[0];
            ch.k = node->inputs[1];
            if (node->intAttr("trans_b", 0) == 0) { // k^T made by a Transpose of k's last two dims
                const auto* t = soleFeeder(ch.k, node->id);
                if (t == nullptr || t->op != OpType::Transpose || !swapsLastTwo(t->intsAttr("perm")))
                    return std::nullopt;
                ch.transpose = static_cast<std::ptrdiff_t>(t->id.index());
                ch.k = t->inputs[0];
            }
            return fits(ch) ? std::optional(ch) : std::nullopt;
        }

    private:
        const Graph& m_g;
        std::vector<std::vector<NodeId>> m_consumers;
        std::set<TensorId> m_outputs;

        // The producer of `t` where `reader` alone reads it, it is f32 and no graph output.
        [[nodiscard]] const Node* soleFeeder(TensorId t, NodeId reader) const
        {
            const auto& tensor = m_g.tensor(t);
            const auto& readers = m_consumers[t.index()];
            if (!tensor.producer.valid() || tensor.dtype != DType::F32 || m_outputs.contains(t) || readers.size() != 1
                || readers.front() != reader)
                return nullptr;
            const auto& producer = m_g.node(tensor.producer);
            return producer.outputs.size() == 1 ? &producer : nullptr; // nothing else of it left behind
        }

        static bool swapsLastTwo(const std::vector<std::int64_t>& perm)
        {
            const auto n = perm.size();
            if (n < 2)
                return false;
            for (std::size_t i = 0; i + 2 < n; ++i) {
                if (perm[i] != static_cast<std::int64_t>(i))
                    return false;
            }
            return perm[n - 2] == static_cast<std::int64_t>(n - 1) && perm[n - 1] == static_cast<std::int64_t>(n - 2);
        }

        // q, k and v f32 with the shapes the Attention op takes.
        [[nodiscard]] bool fits(const Chain& ch) const
        {
            for (auto t : { ch.q, ch.k, ch.v }) {
                if (m_g.tensor(t).dtype != DType::F32)
                    return false;
            }
            ShapeInputs in { &m_g.tensor(ch.q), &m_g.tensor(ch.k), &m_g.tensor(ch.v) };
            if (ch.padding.valid())
                in.push_back(&m_g.tensor(ch.padding));
            try {
                (void)attentionShape(Node {}, in);
                return true;
            } catch (const Error&) {
                return false;
            }
        }
    };

    // `base`, or base.2, base.3 ...: a name no node of `g` has and none given out before.
    std::string uniqueName(const Graph& g, const std::string& base, std::set<std::string>& given)
    {
        const auto taken = [&](const std::string& name) {
            return given.contains(name)
                || std::any_of(g.nodes().begin(), g.nodes().end(), [&](const Node& n) { return n.name == name; });
        };
        auto name = base;
        for (int i = 2; taken(name); ++i)
            name = base + "." + std::to_string(i);
        given.insert(name);
        return name;
    }

} // namespace

std::vector<Shape> attentionShape(const Node& /*node*/, const ShapeInputs& in)
{
    const Shape& q = in[0]->shape;
    const Shape& k = in[1]->shape;
    const Shape& v = in[2]->shape;
    const auto lead = [](const Shape& s) { return Shape(s.begin(), s.end() - 2); };
    if (q.size() < 3 || k.size() != q.size() || v.size() != q.size() || lead(q) != lead(k) || lead(q) != lead(v)
        || q.back() != k.back() || k[k.size() - 2] != v[v.size() - 2])
        throw Error("Attention needs q (..., Tq, D), k (..., Tk, D) and v (..., Tk, Dv) of the same leading dims, got "
            + formatShape(q) + ", " + formatShape(k) + ", " + formatShape(v));
    if (in.size() > 3) {
        const Shape& pad = in[3]->shape;
        if (pad.size() != 2 || pad[0] != q[0] || pad[1] != k[k.size() - 2])
            throw Error("Attention padding mask " + formatShape(pad) + " does not fit keys " + formatShape(k));
    }
    Shape out = q;
    out.back() = v.back();
    return { out };
}

void attentionCost(const OpCostContext& ctx, const Node& node, OpCost& cost)
{
    const auto& g = ctx.graph;
    const Shape& q = g.tensor(node.inputs[0]).shape;
    const Shape& k = g.tensor(node.inputs[1]).shape;
    const Shape& v = g.tensor(node.inputs[2]).shape;
    const double e = scoreElements(q, k);
    const double d = static_cast<double>(q.back());
    const double dv = static_cast<double>(v.back());
    constexpr double kSoftmax = 5; // per score: max, subtract, exp, sum, divide (op_registry's Softmax)
    cost.forwardFlops = 2 * e * d + 2 * e * dv + kSoftmax * e;
    const auto scoreBytes = static_cast<std::int64_t>(e) * 4;
    const std::int64_t outBytes = numBytes(g.tensor(node.outputs[0]).shape, DType::F32);
    cost.workspaceBytes = std::max(2 * scoreBytes, scoreBytes + outBytes); // scores + probabilities, then + output
    bool anyGrad = false;
    std::int64_t qkGradBytes = 0;
    for (std::size_t i = 0; i < 3; ++i) {
        const auto t = node.inputs[i];
        if (!ctx.requiresGrad[t.index()])
            continue;
        anyGrad = true;
        if (i < 2)
            qkGradBytes += numBytes(g.tensor(t).shape, DType::F32);
    }
    if (!anyGrad)
        return;
    // Recomputed scores and softmax; dP and dV; the softmax's gradient; dQ and dK.
    cost.backwardFlops = 2 * e * d + kSoftmax * e + 4 * e * dv + 4 * e + 4 * e * d;
    for (auto t : node.inputs) {
        if (isPerMicroBatch(g, t))
            cost.savedTensors.push_back(t);
    }
    if (node.floatAttr("dropout", 0.0) > 0)
        cost.savedExtraBytes += static_cast<std::int64_t>(e); // the one-byte keep mask of every score
    // The backward holds the probabilities, their gradient and the scores' gradient at once (with
    // dV), then the scores' gradient with dQ and dK: beyond the input gradients the backward walk
    // counts for the node, max(3 scores - dQ - dK, 1 scores).
    cost.backwardWorkspaceBytes = std::max(3 * scoreBytes - qkGradBytes, scoreBytes);
}

Graph fuseAttention(const Graph& graph, std::size_t* fused)
{
    const ChainFinder finder(graph);
    std::vector<std::optional<Chain>> at(graph.nodeCount()); // by context MatMul
    std::vector<char> dropNode(graph.nodeCount(), 0);
    std::vector<char> dropTensor(graph.tensorCount(), 0);
    std::size_t count = 0;
    std::vector<char> claimed(graph.nodeCount(), 0); // in a chain already: chains never overlap
    for (const auto& node : graph.nodes()) {
        auto ch = finder.at(node);
        if (!ch)
            continue;
        const std::array<std::ptrdiff_t, 7> members { static_cast<std::ptrdiff_t>(ch->scores), ch->transpose, ch->scale,
            ch->mask, static_cast<std::ptrdiff_t>(ch->softmax), ch->dropout, static_cast<std::ptrdiff_t>(ch->context) };
        if (std::any_of(members.begin(), members.end(),
                [&](std::ptrdiff_t i) { return i >= 0 && claimed[static_cast<std::size_t>(i)] != 0; }))
            continue;
        for (const auto i : members) {
            if (i < 0)
                continue;
            claimed[static_cast<std::size_t>(i)] = 1;
            if (static_cast<std::size_t>(i) == ch->context)
                continue;
            dropNode[static_cast<std::size_t>(i)] = 1;
            dropTensor[graph.nodes()[static_cast<std::size_t>(i)].outputs[0].index()] = 1;
        }
        at[node.id.index()] = ch;
        ++count;
    }
    if (fused != nullptr)
        *fused = count;
    if (count == 0)
        return graph;
    Graph out(graph.info());
    std::set<std::string> given;
    std::vector<TensorId> newId(graph.tensorCount());
    for (const auto& t : graph.tensors()) {
        if (dropTensor[t.id.index()] != 0)
            continue;
        auto copy = t;
        copy.producer = NodeId();
        newId[t.id.index()] = out.addTensor(std::move(copy));
    }
    const auto map = [&newId](std::vector<TensorId> ids) {
        for (auto& id : ids)
            id = newId[id.index()];
        return ids;
    };
    for (const auto& node : graph.nodes()) {
        if (dropNode[node.id.index()] != 0)
            continue;
        Node copy = node;
        if (const auto& ch = at[node.id.index()]) {
            copy.op = OpType::Attention;
            copy.name =
                uniqueName(graph, (node.scope.empty() ? std::string("attention") : node.scope + ".attention"), given);
            copy.attrs = { { "scale", ch->scaleValue }, { "causal", std::int64_t { ch->causal ? 1 : 0 } } };
            if (ch->dropoutP > 0)
                copy.attrs["dropout"] = ch->dropoutP;
            copy.inputs = { ch->q, ch->k, ch->v };
            if (ch->padding.valid())
                copy.inputs.push_back(ch->padding);
        }
        copy.inputs = map(copy.inputs);
        copy.outputs = map(copy.outputs);
        out.addNode(std::move(copy));
    }
    out.setOutputs(map(graph.outputs()));
    return out;
}

} // namespace ps
