#include "onnx/shape_folding.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <set>

namespace ps::onnximport {
namespace {

    using Known = std::unordered_map<std::string, IntTensor>;
    using Shapes = std::unordered_map<std::string, std::vector<std::int64_t>>;

    std::optional<IntTensor> fromProto(const onnx::TensorProto& t)
    {
        IntTensor v { { t.dims().begin(), t.dims().end() }, {} };
        const auto count = std::accumulate(v.shape.begin(), v.shape.end(), std::int64_t { 1 }, std::multiplies<>());
        if (t.data_type() == onnx::TensorProto::INT64) {
            if (t.has_raw_data()) {
                v.values.resize(static_cast<std::size_t>(count));
                std::memcpy(v.values.data(), t.raw_data().data(), std::min(t.raw_data().size(), v.values.size() * 8));
            } else {
                v.values.assign(t.int64_data().begin(), t.int64_data().end());
            }
        } else if (t.data_type() == onnx::TensorProto::INT32 && !t.has_raw_data()) {
            v.values.assign(t.int32_data().begin(), t.int32_data().end());
        } else {
            return std::nullopt;
        }
        if (static_cast<std::int64_t>(v.values.size()) != count)
            return std::nullopt;
        return v;
    }

    onnx::TensorProto toProto(const std::string& name, const IntTensor& v)
    {
        onnx::TensorProto t;
        t.set_name(name);
        t.set_data_type(onnx::TensorProto::INT64);
        for (auto d : v.shape)
            t.add_dims(d);
        for (auto x : v.values)
            t.add_int64_data(x);
        return t;
    }

    std::int64_t attrInt(const onnx::NodeProto& n, const char* name, std::int64_t fallback)
    {
        for (const auto& a : n.attribute()) {
            if (a.name() == name)
                return a.i();
        }
        return fallback;
    }

    std::int64_t normalize(std::int64_t i, std::int64_t size)
    {
        return i < 0 ? i + size : i;
    }

    IntTensor vector1d(std::vector<std::int64_t> values)
    {
        const auto n = static_cast<std::int64_t>(values.size());
        return { { n }, std::move(values) };
    }

    // Elementwise integer ops on equal sizes or against a scalar.
    std::optional<IntTensor> binary(const std::string& op, const IntTensor& a, const IntTensor& b)
    {
        const bool aScalar = a.values.size() == 1;
        const bool bScalar = b.values.size() == 1;
        if (a.values.size() != b.values.size() && !aScalar && !bScalar)
            return std::nullopt;
        IntTensor out = a.values.size() >= b.values.size() ? a : b;
        for (std::size_t i = 0; i < out.values.size(); ++i) {
            const auto x = a.values[aScalar ? 0 : i];
            const auto y = b.values[bScalar ? 0 : i];
            if (op == "Add")
                out.values[i] = x + y;
            else if (op == "Sub")
                out.values[i] = x - y;
            else if (op == "Mul")
                out.values[i] = x * y;
            else if (op == "Div" && y != 0)
                out.values[i] = x / y;
            else if (op == "Equal")
                out.values[i] = x == y ? 1 : 0;
            else
                return std::nullopt;
        }
        return out;
    }

    std::optional<IntTensor> slice(const onnx::NodeProto& n, const Known& k)
    {
        const auto& data = k.at(n.input(0));
        if (data.shape.size() != 1)
            return std::nullopt;
        const auto size = static_cast<std::int64_t>(data.values.size());
        auto start = std::clamp(normalize(k.at(n.input(1)).values.at(0), size), std::int64_t { 0 }, size);
        auto end = std::clamp(normalize(k.at(n.input(2)).values.at(0), size), std::int64_t { 0 }, size);
        const std::int64_t step = n.input_size() > 4 ? k.at(n.input(4)).values.at(0) : 1;
        if (step != 1)
            return std::nullopt;
        return vector1d({ data.values.begin() + start, data.values.begin() + std::max(start, end) });
    }

    std::optional<IntTensor> evaluate(const onnx::NodeProto& n, const Known& k, const Shapes& shapes)
    {
        const auto& op = n.op_type();
        const auto in = [&](int i) -> const IntTensor& { return k.at(n.input(i)); };
        if (op == "Shape") {
            const auto& s = shapes.at(n.input(0));
            const auto rank = static_cast<std::int64_t>(s.size());
            const auto start = std::clamp(normalize(attrInt(n, "start", 0), rank), std::int64_t { 0 }, rank);
            const auto end = std::clamp(normalize(attrInt(n, "end", rank), rank), std::int64_t { 0 }, rank);
            return vector1d({ s.begin() + start, s.begin() + std::max(start, end) });
        }
        if (op == "Gather" && in(0).shape.size() == 1) {
            IntTensor out { in(1).shape, {} };
            for (auto i : in(1).values)
                out.values.push_back(in(0).values.at(
                    static_cast<std::size_t>(normalize(i, static_cast<std::int64_t>(in(0).values.size())))));
            return out;
        }
        if (op == "Unsqueeze" && in(0).values.size() == 1 && in(0).shape.empty())
            return vector1d(in(0).values);
        if (op == "Squeeze" && in(0).values.size() == 1)
            return IntTensor { {}, in(0).values };
        if (op == "Concat") {
            std::vector<std::int64_t> all;
            for (int i = 0; i < n.input_size(); ++i)
                all.insert(all.end(), in(i).values.begin(), in(i).values.end());
            return vector1d(std::move(all));
        }
        if (op == "Cast" || op == "Identity")
            return in(0);
        if (op == "Reshape") {
            IntTensor out = in(0);
            out.shape = in(1).values;
            const auto total = static_cast<std::int64_t>(out.values.size());
            std::int64_t known = 1;
            for (std::size_t i = 0; i < out.shape.size(); ++i) {
                if (out.shape[i] == 0 && i < in(0).shape.size())
                    out.shape[i] = in(0).shape[i];
                if (out.shape[i] != -1)
                    known *= out.shape[i];
            }
            for (auto& d : out.shape) {
                if (d == -1 && known > 0)
                    d = total / known;
            }
            return out;
        }
        if (op == "ConstantOfShape") {
            std::int64_t fill = 0;
            for (const auto& a : n.attribute()) {
                if (a.name() == "value" && a.has_t()) {
                    const auto v = fromProto(a.t());
                    if (!v || v->values.empty())
                        return std::nullopt; // a float fill: not an integer computation
                    fill = v->values.front();
                }
            }
            IntTensor out { in(0).values, {} };
            const auto count =
                std::accumulate(out.shape.begin(), out.shape.end(), std::int64_t { 1 }, std::multiplies<>());
            if (count > 4096)
                return std::nullopt;
            out.values.assign(static_cast<std::size_t>(count), fill);
            return out;
        }
        if (op == "Slice")
            return slice(n, k);
        if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal")
            return binary(op, in(0), in(1));
        if (op == "Where" && in(0).values.size() == in(1).values.size() && in(1).values.size() == in(2).values.size()) {
            IntTensor out = in(1);
            for (std::size_t i = 0; i < out.values.size(); ++i)
                out.values[i] = in(0).values[i] != 0 ? in(1).values[i] : in(2).values[i];
            return out;
        }
        return std::nullopt;
    }

    bool inputsKnown(const onnx::NodeProto& n, const Known& k, const Shapes& shapes)
    {
        if (n.op_type() == "Shape")
            return shapes.contains(n.input(0));
        return std::all_of(
            n.input().begin(), n.input().end(), [&](const std::string& i) { return i.empty() || k.contains(i); });
    }

    Shapes shapesOf(const onnx::ModelProto& m)
    {
        Shapes shapes;
        const auto add = [&shapes](const onnx::ValueInfoProto& v) {
            if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
                return;
            std::vector<std::int64_t> s;
            for (const auto& d : v.type().tensor_type().shape().dim()) {
                if (!d.has_dim_value())
                    return;
                s.push_back(d.dim_value());
            }
            shapes[v.name()] = s;
        };
        for (const auto& v : m.graph().input())
            add(v);
        for (const auto& v : m.graph().value_info())
            add(v);
        for (const auto& t : m.graph().initializer())
            shapes[t.name()] = { t.dims().begin(), t.dims().end() };
        return shapes;
    }

} // namespace

std::unordered_map<std::string, IntTensor> foldShapeComputations(
    const onnx::ModelProto& model, onnx::ModelProto& inferred, const std::function<void(onnx::ModelProto&)>& infer)
{
    Known known;
    for (const auto& t : model.graph().initializer()) {
        if (auto v = fromProto(t))
            known[t.name()] = *v;
    }
    for (const auto& n : model.graph().node()) {
        if (n.op_type() == "Constant") {
            for (const auto& a : n.attribute()) {
                if (a.name() == "value" && a.has_t()) {
                    if (auto v = fromProto(a.t()))
                        known[n.output(0)] = *v;
                }
            }
        }
    }
    std::set<int> folded;
    for (int round = 0; round < 32; ++round) {
        // Working copy: folded nodes replaced by initializers holding their values.
        inferred = model;
        auto* g = inferred.mutable_graph();
        g->clear_node();
        g->clear_value_info();
        for (int i = 0; i < model.graph().node_size(); ++i) {
            if (!folded.contains(i))
                *g->add_node() = model.graph().node(i);
        }
        for (int i : folded)
            *g->add_initializer() = toProto(model.graph().node(i).output(0), known.at(model.graph().node(i).output(0)));
        infer(inferred);
        const auto shapes = shapesOf(inferred);
        bool progress = false;
        for (int i = 0; i < model.graph().node_size(); ++i) {
            const auto& n = model.graph().node(i);
            if (folded.contains(i) || n.output_size() != 1 || n.op_type() == "Constant"
                || !inputsKnown(n, known, shapes))
                continue;
            std::optional<IntTensor> v;
            try {
                v = evaluate(n, known, shapes);
            } catch (const std::exception&) {
                v.reset(); // out-of-range index or missing input: leave it to shape inference
            }
            if (v) {
                known[n.output(0)] = *v;
                folded.insert(i);
                progress = true;
            }
        }
        if (!progress)
            break;
    }
    return known;
}

} // namespace ps::onnximport
