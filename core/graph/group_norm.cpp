#include "graph/group_norm.h"

#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace ps {
namespace {

    struct GroupNormChain
    {
        std::vector<std::size_t> members; // every node the fused node replaces
        OpType op = OpType::GroupNorm; // or LayerNorm, RMSNorm
        std::size_t div = 0; // the normalizing Div (RMSNorm: the Mul by the inverse)
        std::size_t last = 0; // the node whose output ends the chain
        TensorId x, gamma, beta, end;
        std::int64_t groups = 1;
        double epsilon = 1e-5;
    };

    // The one value of a single-element f32/f64 constant.
    std::optional<double> scalarValue(const Tensor& t)
    {
        if (t.kind != TensorKind::Constant || !t.data || numElements(t.shape) != 1)
            return std::nullopt;
        if (t.dtype == DType::F32 && t.data->size() == sizeof(float)) {
            float v = 0;
            std::memcpy(&v, t.data->data(), sizeof v);
            return v;
        }
        if (t.dtype == DType::F64 && t.data->size() == sizeof(double)) {
            double v = 0;
            std::memcpy(&v, t.data->data(), sizeof v);
            return v;
        }
        return std::nullopt;
    }

    class GroupNormFinder
    {
    public:
        explicit GroupNormFinder(const Graph& g)
            : m_g(g)
            , m_consumers(g.consumers())
            , m_outputs(g.outputs().begin(), g.outputs().end())
        {
        }

        // The chain whose normalizing Div (GroupNorm, LayerNorm) or Mul by the inverse root mean
        // square (RMSNorm) is `node`, if it has one of the forms above.
        [[nodiscard]] std::optional<GroupNormChain> at(const Node& node) const
        {
            if (node.op == OpType::Mul)
                return rmsNorm(node);
            if (node.op != OpType::Div || node.inputs.size() != 2)
                return std::nullopt;
            const auto c = node.inputs[0];
            GroupNormChain ch;
            const auto* squared = deviation(node.inputs[1], node.id, ch);
            const auto* sub = squared == nullptr ? nullptr : feeder(c, OpType::Sub);
            if (sub == nullptr || squared->inputs[0] != c || !readOnlyBy(c, { node.id, squared->id })
                || sub->inputs.size() != 2)
                return std::nullopt;
            const auto a = sub->inputs[0];
            const auto* mean = soleFeeder(sub->inputs[1], sub->id, OpType::ReduceMean);
            if (mean == nullptr || !reducesLast(*mean) || mean->inputs[0] != a)
                return std::nullopt;
            const auto& as = m_g.tensor(a).shape;
            if (as.size() < 2 || m_g.tensor(a).dtype != DType::F32 || as.back() < 1)
                return std::nullopt;
            ch.div = node.id.index();
            ch.members.insert(ch.members.end(), { sub->id.index(), mean->id.index(), node.id.index() });
            auto layerNorm = ch; // a scale over the normalized dim itself: LayerNorm over the last dim
            layerNorm.op = OpType::LayerNorm;
            layerNorm.x = a;
            if (lastDimAffine(node, layerNorm, true))
                return layerNorm;
            // Else a GroupNorm: the (N, G, L) view of x, read by the chain alone.
            if (as.size() != 3 || feeder(a, OpType::Reshape) == nullptr || !readOnlyBy(a, { sub->id, mean->id }))
                return std::nullopt;
            ch.groups = as[1];
            if (!findInput(a, ch))
                return std::nullopt;
            findOutput(node, ch);
            return ch;
        }

    private:
        const Graph& m_g;
        std::vector<std::vector<NodeId>> m_consumers;
        std::set<TensorId> m_outputs;

        // Sqrt(ReduceMean(x * x or Pow(x, 2), last) + eps) read by `reader` alone: its nodes join
        // `ch` with the epsilon; returns the squaring node.
        const Node* deviation(TensorId root, NodeId reader, GroupNormChain& ch) const
        {
            const auto* sqrt = soleFeeder(root, reader, OpType::Sqrt);
            const auto* addEps = sqrt == nullptr ? nullptr : soleFeeder(sqrt->inputs[0], sqrt->id, OpType::Add);
            if (addEps == nullptr || addEps->inputs.size() != 2)
                return nullptr;
            const bool epsFirst = scalarValue(m_g.tensor(addEps->inputs[0])).has_value();
            const auto eps = scalarValue(m_g.tensor(addEps->inputs[epsFirst ? 0 : 1]));
            const auto* variance = soleFeeder(addEps->inputs[epsFirst ? 1 : 0], addEps->id, OpType::ReduceMean);
            const auto* squared = variance == nullptr || !reducesLast(*variance)
                ? nullptr
                : soleFeeder(variance->inputs[0], variance->id, std::nullopt);
            if (!eps || squared == nullptr || !squares(*squared))
                return nullptr;
            ch.epsilon = *eps;
            ch.members = { sqrt->id.index(), addEps->id.index(), variance->id.index(), squared->id.index() };
            return squared;
        }

        // RMSNorm: x * Reciprocal(deviation of x) (torch's rsqrt), then a Mul by C values over the
        // last dim (the module's weight, in either operand order).
        [[nodiscard]] std::optional<GroupNormChain> rmsNorm(const Node& mul) const
        {
            if (mul.inputs.size() != 2)
                return std::nullopt;
            for (int side = 0; side < 2; ++side) {
                const auto x = mul.inputs[static_cast<std::size_t>(side)];
                const auto* inverse =
                    soleFeeder(mul.inputs[static_cast<std::size_t>(1 - side)], mul.id, OpType::Reciprocal);
                GroupNormChain ch;
                const auto* squared = inverse == nullptr ? nullptr : deviation(inverse->inputs[0], inverse->id, ch);
                const auto& xs = m_g.tensor(x).shape;
                if (squared == nullptr || squared->inputs[0] != x || xs.size() < 2 || m_g.tensor(x).dtype != DType::F32)
                    continue;
                ch.op = OpType::RMSNorm;
                ch.x = x;
                ch.div = mul.id.index();
                ch.members.insert(ch.members.end(), { inverse->id.index(), mul.id.index() });
                if (lastDimAffine(mul, ch, false))
                    return ch;
            }
            return std::nullopt;
        }

        // LayerNorm's and RMSNorm's scale (a Mul, required) and LayerNorm's shift (an Add or
        // BiasAdd, optional) by parameters or constants of C values over the last dim.
        bool lastDimAffine(const Node& from, GroupNormChain& ch, bool shift) const
        {
            const auto c = m_g.tensor(ch.x).shape.back();
            const auto perLastDim = [&](TensorId t) {
                const auto& tensor = m_g.tensor(t);
                return tensor.shape == Shape { c } && tensor.dtype == DType::F32
                    && (tensor.kind == TensorKind::Parameter || tensor.kind == TensorKind::Constant);
            };
            const auto next = [&](TensorId t) -> const Node* {
                const auto& r = m_consumers[t.index()];
                return r.size() == 1 && !m_outputs.contains(t) ? &m_g.node(r.front()) : nullptr;
            };
            const auto* scale = next(from.outputs[0]);
            if (scale == nullptr || scale->op != OpType::Mul || scale->inputs.size() != 2)
                return false;
            const auto other = scale->inputs[0] == from.outputs[0] ? scale->inputs[1] : scale->inputs[0];
            if (!perLastDim(other) || other == from.outputs[0])
                return false;
            ch.gamma = other;
            ch.members.push_back(scale->id.index());
            ch.last = scale->id.index();
            ch.end = scale->outputs[0];
            const auto* add = shift ? next(ch.end) : nullptr;
            if (add != nullptr && (add->op == OpType::Add || add->op == OpType::BiasAdd) && add->inputs.size() == 2
                && add->inputs[0] == ch.end && perLastDim(add->inputs[1])) {
                ch.beta = add->inputs[1];
                ch.members.push_back(add->id.index());
                ch.last = add->id.index();
                ch.end = add->outputs[0];
            }
            return true;
        }

        // The producer of `t` (of op `op`, where given) when it is f32, no graph output and produced
        // by a node of one output.
        [[nodiscard]] const Node* feeder(TensorId t, std::optional<OpType> op) const
        {
            const auto& tensor = m_g.tensor(t);
            if (!tensor.producer.valid() || tensor.dtype != DType::F32 || m_outputs.contains(t))
                return nullptr;
            const auto& producer = m_g.node(tensor.producer);
            return producer.outputs.size() == 1 && (!op || producer.op == *op) ? &producer : nullptr;
        }
        [[nodiscard]] bool readOnlyBy(TensorId t, std::initializer_list<NodeId> readers) const
        {
            const auto& r = m_consumers[t.index()];
            return !r.empty() && std::all_of(r.begin(), r.end(), [&](NodeId n) {
                return std::find(readers.begin(), readers.end(), n) != readers.end();
            });
        }
        [[nodiscard]] const Node* soleFeeder(TensorId t, NodeId reader, std::optional<OpType> op) const
        {
            const auto* f = feeder(t, op);
            return f != nullptr && readOnlyBy(t, { reader }) ? f : nullptr;
        }
        [[nodiscard]] bool reducesLast(const Node& n) const
        {
            const auto axes = n.intsAttr("axes");
            const auto rank = static_cast<std::int64_t>(m_g.tensor(n.inputs[0]).shape.size());
            return n.intAttr("keepdims", 1) == 1 && axes.size() == 1 && (axes[0] == rank - 1 || axes[0] == -1);
        }
        static bool squares(const Node& n)
        {
            if (n.op == OpType::Mul)
                return n.inputs.size() == 2 && n.inputs[0] == n.inputs[1];
            return n.op == OpType::Pow && n.inputs.size() == 1 && n.floatAttr("exponent", 0.0) == 2.0;
        }

        // x: the furthest tensor up a run of Reshapes into `a` (N, G, L) that is (N, C, ...) with G
        // dividing C; the Reshapes join the chain.
        bool findInput(TensorId a, GroupNormChain& ch) const
        {
            const auto& as = m_g.tensor(a).shape;
            std::vector<std::size_t> reshapes;
            std::optional<std::size_t> best;
            auto t = a;
            for (const Node* r = feeder(t, OpType::Reshape); r != nullptr;) {
                reshapes.push_back(r->id.index());
                t = r->inputs[0];
                const auto& s = m_g.tensor(t).shape;
                if (s.size() >= 2 && s[0] == as[0] && s[1] % as[1] == 0 && numElements(s) == numElements(as))
                    best = reshapes.size();
                r = m_consumers[t.index()].size() == 1 ? feeder(t, OpType::Reshape) : nullptr;
            }
            if (!best)
                return false;
            ch.members.insert(
                ch.members.end(), reshapes.begin(), reshapes.begin() + static_cast<std::ptrdiff_t>(*best));
            ch.x = m_g.node(NodeId(static_cast<std::uint32_t>(reshapes[*best - 1]))).inputs[0];
            return true;
        }

        // The C values of a per-channel scale or shift `p` applied to `t`: p itself (a parameter
        // or constant) or the parameter/constant a Reshape read by `reader` alone made it from.
        [[nodiscard]] std::optional<TensorId> perChannel(
            TensorId p, TensorId t, const Shape& xs, NodeId reader, std::vector<std::size_t>& drop) const
        {
            const auto& x = m_g.tensor(t).shape;
            const auto& ps = m_g.tensor(p).shape;
            if (x.size() < 2 || x[0] != xs[0] || x[1] != xs[1] || ps.size() + 1 > x.size() || numElements(ps) != xs[1])
                return std::nullopt;
            const auto offset = x.size() - ps.size(); // p's dims right-aligned with t's
            for (std::size_t i = 0; i < ps.size(); ++i) {
                if (ps[i] != (offset + i == 1 ? xs[1] : 1))
                    return std::nullopt;
            }
            const auto kindOk = [&](TensorId id) {
                const auto& tensor = m_g.tensor(id);
                return tensor.dtype == DType::F32
                    && (tensor.kind == TensorKind::Parameter || tensor.kind == TensorKind::Constant);
            };
            if (kindOk(p))
                return p;
            const auto* r = soleFeeder(p, reader, OpType::Reshape);
            if (r == nullptr || !kindOk(r->inputs[0]))
                return std::nullopt;
            drop.push_back(r->id.index());
            return r->inputs[0];
        }

        // Takes node `r` reading `t` as the chain's scale (the first Mul) or shift (an Add after it)
        // where its other operand is per channel.
        bool absorbAffine(
            const Node& r, TensorId t, const Shape& xs, GroupNormChain& ch, std::vector<std::size_t>& drop) const
        {
            const bool scale = r.op == OpType::Mul && !ch.gamma.valid();
            const bool shift = r.op == OpType::Add && ch.gamma.valid() && !ch.beta.valid();
            if ((!scale && !shift) || r.inputs.size() != 2 || r.inputs[0] == r.inputs[1])
                return false;
            const auto v = perChannel(r.inputs[0] == t ? r.inputs[1] : r.inputs[0], t, xs, r.id, drop);
            if (v)
                (scale ? ch.gamma : ch.beta) = *v;
            return v.has_value();
        }

        // Follows the Div's output through Reshapes, a per-channel Mul and then Add; ends the chain
        // at the last x-shaped tensor after the affine (else at the affine, else at the Div).
        void findOutput(const Node& div, GroupNormChain& ch) const
        {
            const auto& xs = m_g.tensor(ch.x).shape;
            auto t = div.outputs[0];
            ch.end = t;
            ch.last = div.id.index();
            std::vector<std::size_t> walked;
            while (m_consumers[t.index()].size() == 1 && !m_outputs.contains(t)) {
                const auto& r = m_g.node(m_consumers[t.index()].front());
                if (r.outputs.size() != 1 || m_g.tensor(r.outputs[0]).dtype != DType::F32)
                    break;
                std::vector<std::size_t> drop;
                const bool affine =
                    r.op != OpType::Reshape; // Reshapes join where an x-shaped end or the affine follows
                if (affine && !absorbAffine(r, t, xs, ch, drop))
                    break;
                walked.push_back(r.id.index());
                walked.insert(walked.end(), drop.begin(), drop.end());
                t = r.outputs[0];
                if (affine || m_g.tensor(t).shape == xs) {
                    ch.members.insert(ch.members.end(), walked.begin(), walked.end());
                    walked.clear();
                    ch.end = t;
                    ch.last = r.id.index();
                }
            }
        }
    };

    // Which nodes and tensors go, and the chain each kept node stands for (by the chain's last node).
    struct FusionPlan
    {
        std::vector<std::optional<GroupNormChain>> at;
        std::vector<char> dropNode;
        std::vector<char> dropTensor;
        std::map<OpType, std::size_t> counts; // chains by the op they become
    };

    FusionPlan planFusion(const Graph& graph, const std::set<OpType>& kinds)
    {
        const GroupNormFinder finder(graph);
        FusionPlan p { std::vector<std::optional<GroupNormChain>>(graph.nodeCount()),
            std::vector<char>(graph.nodeCount(), 0), std::vector<char>(graph.tensorCount(), 0), {} };
        for (const auto& node : graph.nodes()) {
            auto ch = finder.at(node);
            if (!ch || !kinds.contains(ch->op)
                || std::any_of(ch->members.begin(), ch->members.end(),
                    [&](std::size_t i) { return p.dropNode[i] != 0 || p.at[i]; }))
                continue;
            for (const auto i : ch->members) {
                if (i == ch->last)
                    continue;
                p.dropNode[i] = 1;
                p.dropTensor[graph.nodes()[i].outputs[0].index()] = 1;
            }
            ++p.counts[ch->op];
            p.at[ch->last] = std::move(ch);
        }
        const auto consumers = graph.consumers();
        std::set<TensorId> read; // by the fused nodes
        for (const auto& ch : p.at) {
            if (ch)
                read.insert({ ch->x, ch->gamma, ch->beta });
        }
        for (const auto& t : graph.tensors()) { // epsilon constants no node reads any more
            const auto& r = consumers[t.id.index()];
            if (t.kind == TensorKind::Constant && !r.empty() && !read.contains(t.id) && scalarValue(t)
                && std::all_of(
                    r.begin(), r.end(), [&](NodeId n) { return p.dropNode[n.index()] != 0 || p.at[n.index()]; }))
                p.dropTensor[t.id.index()] = 1;
        }
        return p;
    }

    // Writes the fused graph: kept tensors and nodes in their order, a GroupNorm (and where the
    // chain ends in another shape, a Reshape) at each chain's last node.
    class FusedGraphWriter
    {
    public:
        FusedGraphWriter(const Graph& graph, const FusionPlan& plan)
            : m_g(graph)
            , m_plan(plan)
            , m_out(graph.info())
            , m_newId(graph.tensorCount())
        {
            for (const auto& n : graph.nodes())
                m_taken.insert(n.name);
        }

        Graph write()
        {
            for (const auto& t : m_g.tensors()) {
                if (m_plan.dropTensor[t.id.index()] != 0)
                    continue;
                auto copy = t;
                copy.producer = NodeId();
                m_newId[t.id.index()] = m_out.addTensor(std::move(copy));
            }
            for (const auto& node : m_g.nodes()) {
                if (m_plan.dropNode[node.id.index()] != 0)
                    continue;
                if (const auto& ch = m_plan.at[node.id.index()]) {
                    addChain(*ch);
                    continue;
                }
                Node copy = node;
                copy.inputs = mapped(copy.inputs);
                copy.outputs = mapped(copy.outputs);
                m_out.addNode(std::move(copy));
            }
            m_out.setOutputs(mapped(m_g.outputs()));
            return std::move(m_out);
        }

    private:
        const Graph& m_g;
        const FusionPlan& m_plan;
        Graph m_out;
        std::vector<TensorId> m_newId;
        std::set<std::string> m_taken; // node names of the graph and given out
        std::vector<TensorId> mapped(std::vector<TensorId> ids) const
        {
            for (auto& id : ids)
                id = m_newId[id.index()];
            return ids;
        }
        // `base`, or base.2, base.3 ...: a name no node has and none given out before.
        std::string freeName(const std::string& base)
        {
            auto name = base;
            for (int i = 2; m_taken.contains(name); ++i)
                name = base + "." + std::to_string(i);
            m_taken.insert(name);
            return name;
        }

        void addChain(const GroupNormChain& ch)
        {
            const auto& div = m_g.nodes()[ch.div];
            const std::string kind = ch.op == OpType::GroupNorm ? "group_norm"
                : ch.op == OpType::LayerNorm                    ? "layer_norm"
                                                                : "rms_norm";
            const auto base = div.scope.empty() ? kind : div.scope + "." + kind;
            Node gn;
            gn.name = freeName(base);
            gn.op = ch.op;
            gn.scope = div.scope;
            gn.layer = div.layer;
            gn.attrs = { { "epsilon", ch.epsilon } };
            if (ch.op == OpType::GroupNorm)
                gn.attrs["groups"] = ch.groups;
            gn.inputs = { m_newId[ch.x.index()] };
            for (const auto p : { ch.gamma, ch.beta }) {
                if (p.valid())
                    gn.inputs.push_back(m_newId[p.index()]);
            }
            const auto& xs = m_g.tensor(ch.x).shape;
            const auto& end = m_g.tensor(ch.end);
            if (end.shape == xs) {
                gn.outputs = { m_newId[ch.end.index()] };
                m_out.addNode(std::move(gn));
                return;
            }
            Tensor normalized;
            normalized.name = end.name + "/group_norm";
            normalized.shape = xs;
            gn.outputs = { m_out.addTensor(std::move(normalized)) };
            Node reshape;
            reshape.name = freeName(base + ".reshape");
            reshape.op = OpType::Reshape;
            reshape.scope = div.scope;
            reshape.layer = div.layer;
            reshape.attrs = { { "shape", end.shape } };
            reshape.inputs = gn.outputs;
            reshape.outputs = { m_newId[ch.end.index()] };
            m_out.addNode(std::move(gn));
            m_out.addNode(std::move(reshape));
        }
    };

} // namespace

std::vector<Shape> groupNormShape(const Node& node, const ShapeInputs& in)
{
    const Shape& x = in[0]->shape;
    const auto groups = node.intAttr("groups", 1);
    if (x.size() < 2 || groups < 1 || x[1] % groups != 0)
        throw Error("GroupNorm needs an (N, C, ...) input whose C the groups (" + std::to_string(groups)
            + ") divide, got " + formatShape(x));
    for (std::size_t i = 1; i < in.size(); ++i) {
        const Shape& p = in[i]->shape;
        const auto ones = std::count(p.begin(), p.end(), 1);
        if (numElements(p) != x[1] || (x[1] != 1 && ones + 1 != static_cast<std::ptrdiff_t>(p.size())))
            throw Error("GroupNorm input '" + in[i]->name + "' has shape " + formatShape(p) + ", expected "
                + std::to_string(x[1]) + " values, one per channel");
    }
    return { x };
}

void groupNormState(const Graph& g, const Node& node, OpCost& cost)
{
    const auto& x = g.tensor(node.inputs[0]).shape;
    cost.savedExtraBytes += 2 * (x.empty() ? 1 : x[0]) * node.intAttr("groups", 1) * 4; // mean, rstd (fp32)
}

Graph fuseGroupNorm(const Graph& graph, std::size_t* fused)
{
    const auto plan = planFusion(graph, { OpType::GroupNorm });
    if (fused != nullptr)
        *fused = plan.counts.empty() ? 0 : plan.counts.begin()->second;
    return plan.counts.empty() ? graph : FusedGraphWriter(graph, plan).write();
}

Graph fuseNormalizations(const Graph& graph, NormalizationsFused* fused)
{
    const auto plan = planFusion(graph, { OpType::GroupNorm, OpType::LayerNorm, OpType::RMSNorm });
    if (fused != nullptr) {
        const auto count = [&](OpType op) { return plan.counts.contains(op) ? plan.counts.at(op) : 0; };
        *fused = { count(OpType::GroupNorm), count(OpType::LayerNorm), count(OpType::RMSNorm) };
    }
    return plan.counts.empty() ? graph : FusedGraphWriter(graph, plan).write();
}

} // namespace ps
