#include "onnx/frequency_tables.h"

#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {
namespace {

    bool holdsFloats(int t)
    {
        using P = onnx::TensorProto;
        return t == P::FLOAT || t == P::DOUBLE || t == P::FLOAT16 || t == P::BFLOAT16;
    }

    // Ops whose outputs differ from run to run on the same inputs, or that run subgraphs.
    bool sameOnEveryRun(const std::string& op)
    {
        return !op.starts_with("Random") && op != "Dropout" && op != "Multinomial" && op != "Bernoulli" && op != "If"
            && op != "Loop" && op != "Scan";
    }

    // Ops that combine their operands by products: the positions times (or over) the frequencies.
    bool product(const std::string& op)
    {
        return op == "Mul" || op == "Div" || op == "MatMul" || op == "Einsum" || op == "Gemm";
    }

    // What each value is, as far as the data cannot change it.
    struct StaticValues
    {
        std::set<std::string> known; // static: the data cannot change it once sizes are bound
        std::set<std::string> sizes; // static and computed from the bound sizes (Shape, Size, Range)
        std::set<std::string> weights; // static and computed from a float tensor of several elements
    };

    bool weightTensor(const onnx::TensorProto& t)
    {
        std::int64_t n = 1;
        for (auto d : t.dims())
            n *= d;
        return holdsFloats(t.data_type()) && t.dims_size() > 0 && n > 1;
    }

    // Nodes are taken to be in any order: passes repeat until nothing joins (exported graphs are
    // sorted, so one or two passes).
    StaticValues staticValues(const onnx::GraphProto& g)
    {
        StaticValues v;
        for (const auto& t : g.initializer()) {
            v.known.insert(t.name());
            if (weightTensor(t))
                v.weights.insert(t.name());
        }
        for (bool grew = true; grew;) {
            grew = false;
            for (const auto& n : g.node()) {
                if (n.output_size() == 0 || v.known.contains(n.output(0)))
                    continue;
                const auto& op = n.op_type();
                bool isStatic = op == "Constant" || op == "Shape" || op == "Size";
                if (!isStatic && sameOnEveryRun(op)) {
                    isStatic = true;
                    for (const auto& in : n.input())
                        isStatic = isStatic && (in.empty() || v.known.contains(in));
                }
                if (!isStatic)
                    continue;
                bool sizes = op == "Shape" || op == "Size" || op == "Range";
                bool weights = op == "Constant" && n.attribute_size() > 0 && n.attribute(0).has_t()
                    && weightTensor(n.attribute(0).t());
                if (op != "Shape" && op != "Size") {
                    for (const auto& in : n.input()) {
                        sizes = sizes || v.sizes.contains(in);
                        weights = weights || v.weights.contains(in);
                    }
                }
                for (const auto& o : n.output()) {
                    v.known.insert(o);
                    if (sizes)
                        v.sizes.insert(o);
                    if (weights)
                        v.weights.insert(o);
                }
                grew = true;
            }
        }
        return v;
    }

    // Every name read inside a subgraph (If/Loop/Scan bodies), where the walk below cannot follow.
    void namesInSubgraphs(const onnx::GraphProto& g, bool inside, std::set<std::string>& out)
    {
        for (const auto& n : g.node()) {
            if (inside) {
                for (const auto& in : n.input())
                    out.insert(in);
            }
            for (const auto& a : n.attribute()) {
                if (a.has_g())
                    namesInSubgraphs(a.g(), true, out);
                for (const auto& sub : a.graphs())
                    namesInSubgraphs(sub, true, out);
            }
        }
    }

    // A frequency table's values: all positive and monotonic (rotary and sinusoidal frequencies fall
    // from 1 by a constant ratio, scaled variants keep the order; divisors rise). Unreadable values
    // (an import without weights) leave the decision to the structure.
    bool frequencyValues(const onnx::TensorProto& t)
    {
        if (t.data_type() != onnx::TensorProto::FLOAT)
            return true;
        std::vector<float> v(t.float_data().begin(), t.float_data().end());
        if (v.empty() && t.has_raw_data()) {
            v.resize(t.raw_data().size() / sizeof(float));
            std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
        }
        if (v.empty())
            return true;
        bool rising = true, falling = true;
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (!(v[i] > 0) || !std::isfinite(v[i]))
                return false;
            if (i > 0) {
                rising = rising && v[i] >= v[i - 1];
                falling = falling && v[i] <= v[i - 1];
            }
        }
        return rising || falling;
    }

    // Follows the values computed from `name` (a frequency candidate) as the header says.
    bool reachesTrigThroughPositions(const onnx::GraphProto& g, const std::string& name, const StaticValues& sv,
        const std::unordered_map<std::string, std::vector<int>>& readers, const std::set<std::string>& outputs)
    {
        std::set<std::string> derived { name }; // values computed from the candidate
        std::set<std::string> positioned; // ... that were multiplied by (or divided into) positions
        std::deque<std::string> open { name };
        bool trig = false;
        while (!open.empty()) {
            const auto value = open.front();
            open.pop_front();
            if (outputs.contains(value))
                return false;
            const auto it = readers.find(value);
            if (it == readers.end())
                continue;
            for (int i : it->second) {
                const auto& n = g.node(i);
                const auto& op = n.op_type();
                if (op == "Shape" || op == "Size")
                    continue; // its sizes, not its values
                if (n.output_size() == 0 || !sv.known.contains(n.output(0)))
                    return false; // meets the data
                if (op == "Sin" || op == "Cos") {
                    if (!positioned.contains(value))
                        return false; // a trigonometric function of the tensor itself: an angle
                    trig = true;
                    continue;
                }
                bool byPositions = positioned.contains(value);
                for (const auto& in : n.input()) {
                    if (in.empty() || derived.contains(in))
                        continue;
                    if (sv.weights.contains(in))
                        return false; // meets another weight: a learned scale or offset
                    byPositions = byPositions || (product(op) && sv.sizes.contains(in));
                }
                for (const auto& o : n.output()) {
                    if (byPositions)
                        positioned.insert(o);
                    if (derived.insert(o).second)
                        open.push_back(o);
                }
            }
        }
        return trig;
    }

} // namespace

std::set<std::string> frequencyTables(const onnx::ModelProto& model)
{
    const auto& g = model.graph();
    const auto sv = staticValues(g);
    std::unordered_map<std::string, std::vector<int>> readers;
    for (int i = 0; i < g.node_size(); ++i) {
        for (const auto& in : g.node(i).input())
            readers[in].push_back(i);
    }
    std::set<std::string> outputs;
    for (const auto& o : g.output())
        outputs.insert(o.name());
    std::set<std::string> inSubgraphs;
    namesInSubgraphs(g, false, inSubgraphs);
    // Candidates: float initializers and Constant nodes holding float tensors of several elements
    // (torch's constant folding turns a non-persistent buffer into a Constant).
    std::vector<const onnx::TensorProto*> candidates;
    std::vector<std::string> names;
    for (const auto& t : g.initializer()) {
        if (weightTensor(t)) {
            candidates.push_back(&t);
            names.push_back(t.name());
        }
    }
    for (const auto& n : g.node()) {
        if (n.op_type() == "Constant" && n.output_size() == 1 && n.attribute_size() > 0 && n.attribute(0).has_t()
            && n.attribute(0).name() == "value" && weightTensor(n.attribute(0).t())) {
            candidates.push_back(&n.attribute(0).t());
            names.push_back(n.output(0));
        }
    }
    std::set<std::string> tables;
    for (std::size_t c = 0; c < candidates.size(); ++c) {
        if (!inSubgraphs.contains(names[c]) && frequencyValues(*candidates[c])
            && reachesTrigThroughPositions(g, names[c], sv, readers, outputs))
            tables.insert(names[c]);
    }
    return tables;
}

} // namespace ps::onnximport
