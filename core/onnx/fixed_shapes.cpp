#include "onnx/fixed_shapes.h"

#include "onnx/shape_arith.h"
#include "onnx/shape_folding.h"
#include "util/error.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

namespace ps::onnximport {
namespace {

    using namespace arith;
    using Dims = std::vector<std::int64_t>;
    using ShapeMap = std::unordered_map<std::string, Dims>;

    std::string format(const Dims& d)
    {
        std::string s = "[";
        for (std::size_t i = 0; i < d.size(); ++i)
            s += (i ? ", " : "") + std::to_string(d[i]);
        return s + "]";
    }

    // Concrete shapes of every value shape inference resolved (shape_folding's), graph outputs and
    // Constant nodes' values too.
    ShapeMap knownShapes(const onnx::ModelProto& inferred)
    {
        auto shapes = shapesOf(inferred);
        for (const auto& v : inferred.graph().output()) {
            if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
                continue;
            Dims d;
            for (const auto& dim : v.type().tensor_type().shape().dim())
                d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
            if (std::none_of(d.begin(), d.end(), [](std::int64_t x) { return x < 0; }))
                shapes[v.name()] = std::move(d);
        }
        for (const auto& n : inferred.graph().node()) {
            if (n.op_type() != "Constant")
                continue;
            for (const auto& a : n.attribute()) {
                if (a.name() == "value" && a.has_t())
                    shapes[n.output(0)] = Dims(a.t().dims().begin(), a.t().dims().end());
            }
        }
        return shapes;
    }

    // A resized dimension: its size in the file and the size asked for.
    struct Change
    {
        std::int64_t from = 0;
        std::int64_t to = 0;
        bool batch = false;
    };

    // Where a resized factor of size f sits in the output of a reshape, given its position in the
    // input (outer = the product of everything before it): the output axes whose outer extent and
    // span contain [outer, outer * f] in the row-major layout at the exported size.
    std::vector<std::size_t> containingAxes(const Dims& out0, std::int64_t outer, std::int64_t f)
    {
        std::vector<std::size_t> axes;
        const auto span = mul(outer, f);
        for (std::size_t k = 0; k < out0.size(); ++k) {
            const auto o = product(out0, 0, k);
            const auto sp = mul(o, out0[k]);
            if (o > 0 && o <= outer && outer % o == 0 && sp >= span && span > 0 && sp % span == 0)
                axes.push_back(k);
        }
        return axes;
    }

    // Reshape: each input axis whose size changed holds a resized factor (a batch or sequence size
    // of the file, possibly merged with others: B*H, B*T, T*B). Where the factor sits inside its
    // axis, and which output axis then holds it, the exported shapes alone may not say: every
    // placement consistent with the row-major layout is a candidate, most likely first (the factor
    // keeps an axis of its own; the last axis, a feature size fixed by weights, keeps its size; a
    // batch is the outermost factor of a merged axis). The caller tries them in that order.
    // One output axis a resized input axis of a Reshape may have gone to, by which size change.
    struct ReshapeOption
    {
        std::size_t axis;
        Change change;
        int rank; // lower is likelier
    };

    // Where a Reshape's input axis `a` (resized from in0[a] to in1[a]) may sit in its output out0:
    // output axes holding the axis's size or a change's factor of it, likelier first.
    std::vector<ReshapeOption> reshapeOptions(
        const Dims& in0, const Dims& in1, const Dims& out0, const std::vector<Change>& changes, std::size_t a)
    {
        std::vector<Change> fits;
        for (const auto& c : changes) {
            if (c.from > 0 && in0[a] % c.from == 0 && sameRatio(in1[a], in0[a], c.to, c.from))
                fits.push_back(c);
        }
        for (const auto& b : changes) {
            for (const auto& t : changes) {
                const auto from = mul(b.from, t.from);
                const auto to = mul(b.to, t.to);
                if (b.batch && !t.batch && from > 0 && to > 0 && in0[a] % from == 0
                    && sameRatio(in1[a], in0[a], to, from))
                    fits.push_back({ from, to, true });
            }
        }
        const auto outer = product(in0, 0, a);
        std::vector<ReshapeOption> options;
        for (const auto& c : fits) {
            const auto rest = in0[a] / c.from;
            // Outermost, innermost, or after a small factor (heads, windows) merged before it.
            std::vector<std::int64_t> positions { 1 };
            for (std::int64_t p = 2; p <= rest && p <= 1024; ++p) {
                if (rest % p == 0)
                    positions.push_back(p);
            }
            if (rest > 1024)
                positions.push_back(rest);
            for (auto p : positions) {
                for (auto k : containingAxes(out0, mul(outer, p), c.from)) {
                    const bool own = out0[k] == c.from;
                    const bool last = k + 1 == out0.size();
                    const int rank = (own ? 0 : 4) + (last ? 2 : 0) + (c.batch && p != 1 ? 1 : 0);
                    if (std::none_of(options.begin(), options.end(),
                            [&](const ReshapeOption& o) { return o.axis == k && o.change.from == c.from; }))
                        options.push_back({ k, c, rank });
                }
            }
        }
        std::stable_sort(options.begin(), options.end(),
            [](const ReshapeOption& x, const ReshapeOption& y) { return x.rank < y.rank; });
        return options;
    }

    std::vector<Dims> reshapeTargets(
        const Dims& in0, const Dims& in1, const Dims& out0, const std::vector<Change>& changes)
    {
        if (in0.size() != in1.size())
            return {};
        std::vector<std::vector<ReshapeOption>> perAxis;
        for (std::size_t a = 0; a < in0.size(); ++a) {
            if (in0[a] == in1[a])
                continue;
            auto options = reshapeOptions(in0, in1, out0, changes, a);
            if (options.empty())
                return {};
            perAxis.push_back(std::move(options));
        }
        // Every combination (usually one resized axis), in order of likelihood.
        std::vector<Dims> targets;
        std::vector<std::size_t> pick(perAxis.size(), 0);
        for (int guard = 0; guard < 64; ++guard) {
            std::vector<std::pair<std::int64_t, std::int64_t>> scale(out0.size(), { 1, 1 });
            for (std::size_t i = 0; i < perAxis.size(); ++i) {
                const auto& o = perAxis[i][pick[i]];
                scale[o.axis].first = mul(scale[o.axis].first, o.change.to);
                scale[o.axis].second = mul(scale[o.axis].second, o.change.from);
            }
            Dims out1 = out0;
            bool ok = true;
            for (std::size_t k = 0; k < out0.size() && ok; ++k) {
                const auto v = mul(out0[k], scale[k].first);
                ok = v >= 0 && scale[k].second > 0 && v % scale[k].second == 0;
                out1[k] = ok ? v / scale[k].second : 0;
            }
            if (ok && product(out1, 0, out1.size()) == product(in1, 0, in1.size())
                && std::find(targets.begin(), targets.end(), out1) == targets.end())
                targets.push_back(out1);
            std::size_t i = 0;
            while (i < pick.size() && ++pick[i] == perAxis[i].size())
                pick[i++] = 0;
            if (i == pick.size())
                break;
        }
        return targets;
    }

    // Expand: an input axis that passed through (its size was the output's) follows the input.
    std::optional<Dims> expandTarget(const Dims& in0, const Dims& in1, const Dims& out0)
    {
        if (in0.size() != in1.size() || in0.size() > out0.size())
            return std::nullopt;
        Dims out1 = out0;
        const auto offset = out0.size() - in0.size();
        for (std::size_t a = 0; a < in0.size(); ++a) {
            if (in0[a] == in1[a])
                continue;
            const auto k = a + offset;
            if (out0[k] != in0[a] && in1[a] != 1 && in1[a] != out0[k])
                return std::nullopt;
            out1[k] = out0[k] == in0[a] ? in1[a] : out0[k];
        }
        return out1;
    }

    // A node that cannot be re-specialised: what the user reads, and whether another placement of
    // an earlier reshape could still avoid it.
    struct Refusal
    {
        std::string message;
    };

    class Respecialiser
    {
    public:
        Respecialiser(onnx::ModelProto& model, const std::vector<InputDim>& dims, const std::vector<int>& order,
            const std::function<void(onnx::ModelProto&)>& infer)
            : m_model(model)
            , m_dims(dims)
            , m_order(order)
            , m_infer(infer)
        {
        }

        int run();

    private:
        ShapeMap inferredShapes()
        {
            // Each inference is a full pass over the graph: a malformed file must not make the
            // placement search run for long.
            constexpr int kMaxInferences = 512;
            if (++m_inferences > kMaxInferences)
                throw Error("exported with fixed shapes; re-specialising did not settle after "
                    + std::to_string(kMaxInferences) + " rounds of shape inference: " + exportAdvice());
            auto copy = m_model;
            m_infer(copy);
            return knownShapes(copy);
        }
        void setInputSizes();
        void attempt();
        void replaceShapeInput(int nodeIndex, const Dims& values);
        bool resizeExpandedInput(const onnx::NodeProto& node, const ShapeMap& now);
        void checkGrowth(const ShapeMap& now) const;
        [[nodiscard]] Refusal refusal(const onnx::NodeProto& node, const std::string& why) const;
        // A node whose output lost its shape at the new size: which of its inputs were resized and
        // which stayed at the exported size (`inputs`: the graph's, resized on purpose).
        [[nodiscard]] Refusal shapelessRefusal(
            const onnx::NodeProto& node, const ShapeMap& now, const std::set<std::string>& inputs) const;
        std::string exportAdvice() const;

        onnx::ModelProto& m_model;
        const std::vector<InputDim>& m_dims;
        const std::vector<int>& m_order;
        const std::function<void(onnx::ModelProto&)>& m_infer;
        ShapeMap m_old;
        std::vector<Change> m_changes;
        int m_rewritten = 0;
        int m_inferences = 0;
        std::map<int, std::size_t> m_choice; // reshape node -> which of its candidate targets
        std::vector<std::pair<int, std::size_t>> m_trail; // reshapes with several candidates, in decision order
    };

    std::string Respecialiser::exportAdvice() const
    {
        std::map<std::string, std::string> axes;
        for (const auto& d : m_dims) {
            if (d.dynamic || d.role == DimRole::Other || d.size == d.exported)
                continue;
            auto& a = axes[d.input];
            a += (a.empty() ? "" : ", ") + std::to_string(d.axis) + ": '" + (d.role == DimRole::Batch ? "batch" : "seq")
                + "'";
        }
        std::string s;
        for (const auto& [input, a] : axes)
            s += (s.empty() ? "" : ", ") + ("'" + input + "': {" + a + "}");
        return "export with torch.onnx.export(..., dynamic_axes={" + s
            + "}) (dynamic_shapes= with the torch.export-based exporter), or import at the exported size";
    }

    Refusal Respecialiser::refusal(const onnx::NodeProto& node, const std::string& why) const
    {
        std::string sizes;
        for (const auto& d : m_dims) {
            if (!d.dynamic && d.role != DimRole::Other && d.size != d.exported)
                sizes += (sizes.empty() ? "" : ", ") + std::string(toString(d.role)) + " " + std::to_string(d.exported)
                    + " -> " + std::to_string(d.size);
        }
        return { "exported with fixed shapes; cannot re-specialise (" + sizes + "): node '" + node.name() + "' ("
            + node.op_type() + ") " + why + "; " + exportAdvice() };
    }

    void Respecialiser::setInputSizes()
    {
        for (auto& input : *m_model.mutable_graph()->mutable_input()) {
            for (const auto& d : m_dims) {
                if (d.input != input.name() || d.dynamic || d.size == d.exported)
                    continue;
                auto* shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
                if (d.axis < shape->dim_size())
                    shape->mutable_dim(d.axis)->set_dim_value(d.size);
            }
        }
        // Shapes the exporter wrote for intermediate values and outputs are those of the exported
        // size: inference writes them again.
        auto* g = m_model.mutable_graph();
        g->clear_value_info();
        for (auto& out : *g->mutable_output()) {
            if (out.type().has_tensor_type())
                out.mutable_type()->mutable_tensor_type()->clear_shape();
        }
    }

    // The node reads a new initializer holding `values` instead of its shape input (a literal, or a
    // computation that folded a size of the file into a constant: torch's static trace writes
    // B = 1 as a Constant feeding the Concat of a view's shape).
    void Respecialiser::replaceShapeInput(int nodeIndex, const Dims& values)
    {
        auto* node = m_model.mutable_graph()->mutable_node(nodeIndex);
        const auto name = node->input(1) + "__ps_" + std::to_string(nodeIndex);
        onnx::TensorProto t;
        t.set_name(name);
        t.set_data_type(onnx::TensorProto::INT64);
        t.add_dims(static_cast<std::int64_t>(values.size()));
        t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(std::int64_t)));
        auto* g = m_model.mutable_graph();
        node->set_input(1, name);
        for (auto& existing : *g->mutable_initializer()) {
            if (existing.name() == name) {
                existing = std::move(t);
                return;
            }
        }
        *g->add_initializer() = std::move(t);
        ++m_rewritten;
    }

    Refusal Respecialiser::shapelessRefusal(
        const onnx::NodeProto& node, const ShapeMap& now, const std::set<std::string>& inputs) const
    {
        std::string fixed;
        std::string resized;
        for (const auto& in : node.input()) {
            const auto o = m_old.find(in);
            const auto n = now.find(in);
            if (o == m_old.end() || n == now.end())
                continue;
            if (o->second == n->second && !inputs.contains(in))
                fixed += (fixed.empty() ? "'" : ", '") + in + "' " + format(n->second);
            else if (o->second != n->second)
                resized += (resized.empty() ? "'" : ", '") + in + "' " + format(n->second);
        }
        return refusal(node,
            "has no shape at the new size: it reads " + (resized.empty() ? "no resized value" : resized)
                + (fixed.empty() ? std::string() : " with " + fixed + ", fixed at the exported size"));
    }

    // One try with the current choices: rounds of {infer, rewrite every Reshape/Expand whose input
    // changed and whose output does not follow} until nothing changes. Throws a Refusal.
    void Respecialiser::attempt()
    {
        const auto& nodes = m_model.graph().node();
        std::set<std::string> inputs;
        for (const auto& i : m_model.graph().input())
            inputs.insert(i.name());
        std::set<int> decided;
        for (std::size_t round = 0; round <= m_order.size(); ++round) {
            const auto now = inferredShapes();
            std::set<std::string> pending; // values downstream of a constant rewritten this round
            bool changed = false;
            for (int i : m_order) {
                const auto& node = nodes.Get(i);
                const auto mark = [&] {
                    for (const auto& o : node.output())
                        pending.insert(o);
                };
                if (std::any_of(
                        node.input().begin(), node.input().end(), [&](const auto& n) { return pending.contains(n); })) {
                    mark();
                    continue;
                }
                const bool reshape = node.op_type() == "Reshape";
                if ((reshape || node.op_type() == "Expand") && node.input_size() >= 2 && node.output_size() == 1) {
                    const auto in0 = m_old.find(node.input(0));
                    const auto in1 = now.find(node.input(0));
                    const auto out0 = m_old.find(node.output(0));
                    if (in0 != m_old.end() && in1 != now.end() && out0 != m_old.end() && in0->second != in1->second) {
                        std::vector<Dims> targets;
                        if (reshape) {
                            targets = reshapeTargets(in0->second, in1->second, out0->second, m_changes);
                        } else if (auto t = expandTarget(in0->second, in1->second, out0->second)) {
                            targets.push_back(*t);
                        }
                        if (targets.empty())
                            throw refusal(node,
                                "changes " + format(in0->second) + " into the constant shape " + format(out0->second)
                                    + ", which splits a resized dimension");
                        if (targets.size() > 1 && !decided.contains(i)) {
                            decided.insert(i);
                            m_trail.emplace_back(i, targets.size());
                        }
                        const auto& target = targets[std::min(m_choice[i], targets.size() - 1)];
                        const auto out1 = now.find(node.output(0));
                        if (out1 == now.end() || out1->second != target) {
                            replaceShapeInput(i, target);
                            changed = true;
                            mark();
                            continue;
                        }
                    }
                }
                // A value the exported size gave a shape to must have one at the new size: when
                // inference fails here, a constant of the exported size meets a resized value.
                for (const auto& out : node.output()) {
                    if (out.empty() || !m_old.contains(out) || now.contains(out))
                        continue;
                    if (resizeExpandedInput(node, now)) { // a class token expanded to the batch
                        changed = true;
                        mark();
                        break;
                    }
                    throw shapelessRefusal(node, now, inputs);
                }
            }
            if (!changed) {
                checkGrowth(now);
                return;
            }
        }
    }

    // Samples never meet: a batch change scales every value by the change or leaves it alone, and a
    // sequence change by at most its square (attention scores). A value growing otherwise means a
    // resized factor was placed on the wrong axis of some reshape (batch merged into a sequence):
    // refused, so the next placement is tried.
    void Respecialiser::checkGrowth(const ShapeMap& now) const
    {
        std::vector<double> allowed { 1.0 };
        for (const auto& c : m_changes) {
            const double r = static_cast<double>(c.to) / static_cast<double>(c.from);
            const auto before = allowed;
            for (double a : before) {
                allowed.push_back(a * r);
                if (!c.batch)
                    allowed.push_back(a * r * r);
            }
        }
        const auto& nodes = m_model.graph().node();
        for (int i : m_order) {
            const auto& node = nodes.Get(i);
            for (const auto& out : node.output()) {
                const auto o = m_old.find(out);
                const auto n = now.find(out);
                if (o == m_old.end() || n == now.end())
                    continue;
                const auto was = static_cast<double>(product(o->second, 0, o->second.size()));
                const auto is = static_cast<double>(product(n->second, 0, n->second.size()));
                if (was <= 0 || std::any_of(allowed.begin(), allowed.end(), [&](double a) {
                        return std::abs(is - was * a) <= 1e-9 * is;
                    }))
                    continue;
                throw refusal(node,
                    "would compute " + format(n->second) + " from " + format(o->second)
                        + ": the resized dimension cannot be placed in the reshapes before it");
            }
        }
    }

    // A node meeting a resized value and an Expand output still at the exported size, where the
    // Expand repeats a batch-free tensor up to the batch (a ViT class token: cls.expand(B, -1, -1)):
    // the Expand's target takes the resized value's size on every axis where both had the same size
    // at the exported size and the resized value changed by one of the resizes (a Concat's own axis
    // aside). True when such an Expand was rewritten.
    bool Respecialiser::resizeExpandedInput(const onnx::NodeProto& node, const ShapeMap& now)
    {
        const auto& g = m_model.graph();
        std::optional<std::int64_t> concatAxis;
        if (node.op_type() == "Concat") {
            for (const auto& a : node.attribute()) {
                if (a.name() == "axis")
                    concatAxis = a.i();
            }
        }
        for (const auto& in : node.input()) {
            const auto o = m_old.find(in);
            const auto n = now.find(in);
            if (o == m_old.end() || n == now.end() || o->second != n->second)
                continue;
            int producer = -1;
            for (int i = 0; i < g.node_size(); ++i) {
                if (g.node(i).op_type() == "Expand" && g.node(i).output_size() == 1 && g.node(i).output(0) == in)
                    producer = i;
            }
            if (producer < 0)
                continue;
            Dims target = o->second;
            bool resized = false;
            for (const auto& other : node.input()) {
                const auto ro = m_old.find(other);
                const auto rn = now.find(other);
                if (ro == m_old.end() || rn == now.end() || ro->second == rn->second
                    || ro->second.size() != target.size())
                    continue;
                const auto rank = static_cast<std::int64_t>(target.size());
                for (std::int64_t k = 0; k < rank; ++k) {
                    const auto ku = static_cast<std::size_t>(k);
                    if (concatAxis && (*concatAxis == k || *concatAxis + rank == k))
                        continue;
                    const bool byAResize = std::any_of(m_changes.begin(), m_changes.end(), [&](const Change& c) {
                        return ro->second[ku] % c.from == 0 && sameRatio(rn->second[ku], ro->second[ku], c.to, c.from);
                    });
                    if (target[ku] == ro->second[ku] && rn->second[ku] != ro->second[ku] && byAResize) {
                        target[ku] = rn->second[ku];
                        resized = true;
                    }
                }
            }
            if (resized) {
                replaceShapeInput(producer, target);
                return true;
            }
        }
        return false;
    }

    // Tries the likeliest placement of every resized factor first; when a node downstream cannot
    // take the result, the latest reshape with another candidate takes its next one (depth first).
    // The first refusal is the one reported when none works.
    int Respecialiser::run()
    {
        constexpr int kMaxAttempts = 64;
        m_old = inferredShapes();
        for (const auto& d : m_dims) {
            if (!d.dynamic && d.role != DimRole::Other && d.size != d.exported)
                m_changes.push_back({ d.exported, d.size, d.role == DimRole::Batch });
        }
        const auto original = m_model;
        std::optional<Refusal> first;
        for (int n = 0; n < kMaxAttempts; ++n) {
            m_model = original;
            m_rewritten = 0;
            m_trail.clear();
            setInputSizes();
            try {
                attempt();
                return m_rewritten;
            } catch (const Refusal& r) {
                if (!first)
                    first = r;
            }
            bool next = false;
            while (!m_trail.empty() && !next) {
                auto [node, count] = m_trail.back();
                m_trail.pop_back();
                if (m_choice[node] + 1 < count) {
                    ++m_choice[node];
                    next = true;
                } else {
                    m_choice.erase(node);
                }
            }
            if (!next)
                break;
        }
        m_model = original;
        throw Error(first->message);
    }

} // namespace

int respecialise(onnx::ModelProto& model, const std::vector<InputDim>& dims, const std::vector<int>& order,
    const std::function<void(onnx::ModelProto&)>& infer)
{
    Respecialiser r(model, dims, order, infer);
    return r.run();
}

} // namespace ps::onnximport
