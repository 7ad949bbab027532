#include "onnx/shape_folding.h"

#include "onnx/shape_folding_support.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>

namespace ps::onnximport {
namespace {

    using namespace folding; // NOLINT(google-build-using-namespace): the importer's own helpers

    bool isIntegral(int type)
    {
        switch (type) {
        case T::INT64:
        case T::INT32:
        case T::INT16:
        case T::INT8:
        case T::UINT8:
        case T::UINT16:
        case T::UINT32:
        case T::BOOL:
            return true;
        default:
            return false;
        }
    }

    bool isSupported(int type)
    {
        return isIntegral(type) || type == T::FLOAT || type == T::DOUBLE;
    }

    // A value of element type `type`: integers truncate toward zero, bools become 0/1.
    double convert(double v, int type)
    {
        if (type == T::BOOL)
            return v != 0 ? 1 : 0;
        if (type == T::FLOAT)
            return static_cast<double>(static_cast<float>(v));
        if (isIntegral(type))
            return std::isfinite(v) ? std::trunc(v) : 0;
        return v;
    }

    std::optional<FoldedTensor> fromProto(const T& t)
    {
        FoldedTensor v { { t.dims().begin(), t.dims().end() }, t.data_type(), {} };
        const auto n = count(v.shape);
        if (!isSupported(t.data_type()) || n > kMaxElements || t.data_location() == T::EXTERNAL)
            return std::nullopt;
        const auto& raw = t.raw_data();
        const auto fromRaw = [&]<typename E>(E) {
            if (raw.size() != static_cast<std::size_t>(n) * sizeof(E))
                return false;
            for (std::int64_t i = 0; i < n; ++i) {
                E e {};
                std::memcpy(&e, raw.data() + i * static_cast<std::int64_t>(sizeof(E)), sizeof(E));
                v.values.push_back(static_cast<double>(e));
            }
            return true;
        };
        bool ok = true;
        if (t.has_raw_data()) {
            switch (t.data_type()) {
            case T::INT64:
                ok = fromRaw(std::int64_t {});
                break;
            case T::INT32:
            case T::UINT32:
                ok = fromRaw(std::int32_t {});
                break;
            case T::INT16:
            case T::UINT16:
                ok = fromRaw(std::int16_t {});
                break;
            case T::INT8:
                ok = fromRaw(std::int8_t {});
                break;
            case T::UINT8:
            case T::BOOL:
                ok = fromRaw(std::uint8_t {});
                break;
            case T::FLOAT:
                ok = fromRaw(float {});
                break;
            case T::DOUBLE:
                ok = fromRaw(double {});
                break;
            default:
                ok = false;
            }
        } else if (t.data_type() == T::INT64) {
            v.values.assign(t.int64_data().begin(), t.int64_data().end());
        } else if (t.data_type() == T::FLOAT) {
            v.values.assign(t.float_data().begin(), t.float_data().end());
        } else if (t.data_type() == T::DOUBLE) {
            v.values.assign(t.double_data().begin(), t.double_data().end());
        } else {
            v.values.assign(t.int32_data().begin(), t.int32_data().end());
        }
        if (!ok || static_cast<std::int64_t>(v.values.size()) != n)
            return std::nullopt;
        return v;
    }

    std::optional<T> toProto(const std::string& name, const FoldedTensor& v)
    {
        T t;
        t.set_name(name);
        t.set_data_type(v.elemType);
        for (auto d : v.shape)
            t.add_dims(d);
        if (v.elemType == T::INT64) {
            for (auto x : v.ints())
                t.add_int64_data(x);
        } else if (v.elemType == T::FLOAT) {
            for (auto x : v.values)
                t.add_float_data(static_cast<float>(x));
        } else if (v.elemType == T::DOUBLE) {
            for (auto x : v.values)
                t.add_double_data(x);
        } else if (isIntegral(v.elemType) && v.elemType != T::UINT32) {
            for (auto x : v.values)
                t.add_int32_data(static_cast<std::int32_t>(x));
        } else {
            return std::nullopt;
        }
        return t;
    }

    std::optional<Dims> broadcast(const Dims& a, const Dims& b)
    {
        const auto rank = std::max(a.size(), b.size());
        Dims out(rank, 1);
        for (std::size_t i = 0; i < rank; ++i) {
            const auto da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
            const auto db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
            if (da != db && da != 1 && db != 1)
                return std::nullopt;
            out[i] = da == 1 ? db : da;
        }
        return out;
    }

    // Offset into an operand of shape `operand` for every element of `out` (NumPy broadcasting).
    std::vector<std::int64_t> broadcastOffsets(const Dims& out, const Dims& operand)
    {
        const auto own = stridesOf(operand);
        Dims strides(out.size(), 0);
        const auto offset = out.size() - operand.size();
        for (std::size_t i = 0; i < operand.size(); ++i)
            strides[offset + i] = operand[i] == 1 ? 0 : own[i];
        const auto total = count(out);
        std::vector<std::int64_t> offsets(static_cast<std::size_t>(total));
        Dims index(out.size(), 0);
        std::int64_t at = 0;
        for (std::int64_t i = 0; i < total; ++i) {
            offsets[static_cast<std::size_t>(i)] = at;
            for (std::size_t d = out.size(); d-- > 0;) {
                ++index[d];
                at += strides[d];
                if (index[d] < out[d])
                    break;
                at -= strides[d] * out[d];
                index[d] = 0;
            }
        }
        return offsets;
    }

    template <typename F>
    std::optional<FoldedTensor> elementwise(const std::vector<const FoldedTensor*>& in, int outType, F f)
    {
        Dims shape = in[0]->shape;
        for (std::size_t i = 1; i < in.size(); ++i) {
            auto b = broadcast(shape, in[i]->shape);
            if (!b)
                return std::nullopt;
            shape = *b;
        }
        if (count(shape) > kMaxElements)
            return std::nullopt;
        std::vector<std::vector<std::int64_t>> offsets;
        for (const auto* t : in)
            offsets.push_back(broadcastOffsets(shape, t->shape));
        FoldedTensor out { shape, outType, {} };
        const auto total = count(shape);
        out.values.resize(static_cast<std::size_t>(total));
        std::vector<double> args(in.size());
        for (std::int64_t i = 0; i < total; ++i) {
            for (std::size_t k = 0; k < in.size(); ++k)
                args[k] = in[k]->values[static_cast<std::size_t>(offsets[k][static_cast<std::size_t>(i)])];
            out.values[static_cast<std::size_t>(i)] = convert(f(args), outType);
        }
        return out;
    }

    std::optional<double> arithmetic(const std::string& op, double x, double y, int type, std::int64_t fmod)
    {
        const bool integral = isIntegral(type);
        if (op == "Add")
            return x + y;
        if (op == "Sub")
            return x - y;
        if (op == "Mul")
            return x * y;
        if (op == "Div") {
            if (integral && y == 0)
                return std::nullopt;
            return integral ? std::trunc(x / y) : x / y;
        }
        if (op == "Mod") {
            if (y == 0)
                return std::nullopt;
            const double r = std::fmod(x, y);
            return fmod != 0 || r == 0 || (r < 0) == (y < 0) ? r : r + y; // fmod 0: the divisor's sign
        }
        if (op == "Pow")
            return std::pow(x, y);
        if (op == "Max")
            return std::max(x, y);
        if (op == "Min")
            return std::min(x, y);
        if (op == "Equal")
            return x == y ? 1 : 0;
        if (op == "Less")
            return x < y ? 1 : 0;
        if (op == "LessOrEqual")
            return x <= y ? 1 : 0;
        if (op == "Greater")
            return x > y ? 1 : 0;
        if (op == "GreaterOrEqual")
            return x >= y ? 1 : 0;
        if (op == "And")
            return (x != 0 && y != 0) ? 1 : 0;
        if (op == "Or")
            return (x != 0 || y != 0) ? 1 : 0;
        if (op == "Xor")
            return ((x != 0) != (y != 0)) ? 1 : 0;
        return std::nullopt;
    }

    bool isComparison(const std::string& op)
    {
        return op == "Equal" || op == "Less" || op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual"
            || op == "And" || op == "Or" || op == "Xor";
    }

    // Axes from input 1 (opset 13) or the attribute (older opsets).
    std::optional<Dims> axesOf(const onnx::NodeProto& n, const Known& k)
    {
        if (n.input_size() > 1 && !n.input(1).empty())
            return k.at(n.input(1)).ints();
        return attrInts(n, "axes");
    }

    FoldedTensor vector1d(std::vector<double> values, int type = T::INT64)
    {
        const auto n = static_cast<std::int64_t>(values.size());
        return { { n }, type, std::move(values) };
    }

    // The one-input element-wise ops the folder evaluates. Rotary tables computed in the forward
    // (positions times a frequency table, then Sin and Cos) are static: they fold to constants.
    std::function<double(double)> unaryOf(const std::string& op)
    {
        static const std::unordered_map<std::string, double (*)(double)> ops {
            { "Neg", [](double x) { return -x; } },
            { "Abs", [](double x) { return std::abs(x); } },
            { "Sqrt", [](double x) { return std::sqrt(x); } },
            { "Floor", [](double x) { return std::floor(x); } },
            { "Ceil", [](double x) { return std::ceil(x); } },
            { "Reciprocal", [](double x) { return 1.0 / x; } },
            { "Sin", [](double x) { return std::sin(x); } },
            { "Cos", [](double x) { return std::cos(x); } },
        };
        const auto it = ops.find(op);
        return it == ops.end() ? std::function<double(double)> {} : std::function<double(double)>(it->second);
    }

    std::optional<FoldedTensor> unsqueeze(const onnx::NodeProto& n, const Known& k, const FoldedTensor& x)
    {
        auto axes = axesOf(n, k);
        if (!axes)
            return std::nullopt;
        auto shape = x.shape;
        const auto rank = static_cast<std::int64_t>(shape.size() + axes->size());
        for (auto& a : *axes)
            a = normalize(a, rank);
        std::sort(axes->begin(), axes->end());
        for (auto a : *axes) {
            if (a < 0 || a > static_cast<std::int64_t>(shape.size()))
                return std::nullopt;
            shape.insert(shape.begin() + a, 1);
        }
        return FoldedTensor { shape, x.elemType, x.values };
    }

    FoldedTensor squeeze(const onnx::NodeProto& n, const Known& k, const FoldedTensor& x)
    {
        const auto axes = axesOf(n, k);
        Dims shape;
        for (std::size_t i = 0; i < x.shape.size(); ++i) {
            const auto rank = static_cast<std::int64_t>(x.shape.size());
            const bool listed = axes && std::any_of(axes->begin(), axes->end(), [&](std::int64_t a) {
                return normalize(a, rank) == static_cast<std::int64_t>(i);
            });
            if (!(axes && !axes->empty() ? listed : x.shape[i] == 1))
                shape.push_back(x.shape[i]);
        }
        return FoldedTensor { shape, x.elemType, x.values };
    }

    std::optional<FoldedTensor> flatten(const onnx::NodeProto& n, const FoldedTensor& x)
    {
        const auto rank = static_cast<std::int64_t>(x.shape.size());
        const auto axis = normalize(attrInt(n, "axis", 1), rank);
        if (axis < 0 || axis > rank)
            return std::nullopt;
        return FoldedTensor { { count(Dims(x.shape.begin(), x.shape.begin() + axis)),
                                  count(Dims(x.shape.begin() + axis, x.shape.end())) },
            x.elemType, x.values };
    }

    std::optional<FoldedTensor> cast(const onnx::NodeProto& n, const FoldedTensor& x)
    {
        const auto to = static_cast<int>(attrInt(n, "to", T::FLOAT));
        if (!isSupported(to))
            return std::nullopt;
        FoldedTensor out = x;
        out.elemType = to;
        for (auto& v : out.values)
            v = convert(v, to);
        return out;
    }

    std::optional<FoldedTensor> expand(const FoldedTensor& x, const Dims& target)
    {
        const auto shape = broadcast(x.shape, target);
        if (!shape || count(*shape) > kMaxElements)
            return std::nullopt;
        FoldedTensor out { *shape, x.elemType, {} };
        for (auto o : broadcastOffsets(*shape, x.shape))
            out.values.push_back(x.values[static_cast<std::size_t>(o)]);
        return out;
    }

    std::optional<FoldedTensor> constantOfShape(const onnx::NodeProto& n, const Dims& shape)
    {
        FoldedTensor fill { {}, T::FLOAT, { 0.0 } };
        if (const auto* a = findAttr(n, "value"); a != nullptr && a->has_t()) {
            const auto v = fromProto(a->t());
            if (!v || v->values.empty())
                return std::nullopt;
            fill = *v;
        }
        if (count(shape) > kMaxElements)
            return std::nullopt;
        return FoldedTensor { shape, fill.elemType,
            std::vector<double>(static_cast<std::size_t>(count(shape)), fill.values.front()) };
    }

    std::optional<FoldedTensor> range(const FoldedTensor& first, const FoldedTensor& limit, const FoldedTensor& step)
    {
        const auto start = first.values.at(0);
        const auto delta = step.values.at(0);
        if (delta == 0)
            return std::nullopt;
        const auto steps = std::max(0.0, std::ceil((limit.values.at(0) - start) / delta));
        if (steps > static_cast<double>(kMaxElements))
            return std::nullopt;
        std::vector<double> values;
        for (std::int64_t i = 0; i < static_cast<std::int64_t>(steps); ++i)
            values.push_back(convert(start + static_cast<double>(i) * delta, first.elemType));
        return vector1d(std::move(values), first.elemType);
    }

    // A comparison or an arithmetic op of two operands, broadcast.
    std::optional<FoldedTensor> binary(const onnx::NodeProto& n, const FoldedTensor& a, const FoldedTensor& b)
    {
        const auto& op = n.op_type();
        const int type = isComparison(op) ? static_cast<int>(T::BOOL) : a.elemType;
        const auto fmod = attrInt(n, "fmod", 0);
        bool failed = false;
        auto out = elementwise({ &a, &b }, type, [&](const std::vector<double>& v) {
            const auto r = arithmetic(op, v[0], v[1], a.elemType, fmod);
            failed = failed || !r;
            return r.value_or(0);
        });
        if (failed)
            return std::nullopt;
        return out;
    }

    std::optional<FoldedTensor> evaluate(const onnx::NodeProto& n, const Known& k, const Shapes& shapes)
    {
        const auto& op = n.op_type();
        const auto in = [&](int i) -> const FoldedTensor& { return k.at(n.input(i)); };
        if (op == "Shape") {
            const auto& s = shapes.at(n.input(0));
            const auto rank = static_cast<std::int64_t>(s.size());
            const auto start = std::clamp(normalize(attrInt(n, "start", 0), rank), std::int64_t { 0 }, rank);
            const auto end = std::clamp(normalize(attrInt(n, "end", rank), rank), std::int64_t { 0 }, rank);
            return vector1d({ s.begin() + start, s.begin() + std::max(start, end) });
        }
        if (op == "Size")
            return FoldedTensor { {}, T::INT64, { static_cast<double>(count(shapes.at(n.input(0)))) } };
        if (op == "Gather")
            return gather(n, in(0), in(1));
        if (op == "Unsqueeze")
            return unsqueeze(n, k, in(0));
        if (op == "Squeeze")
            return squeeze(n, k, in(0));
        if (op == "Flatten")
            return flatten(n, in(0));
        if (op == "Concat")
            return concat(n, k);
        if (op == "MatMul" && in(0).isFloat() && in(1).isFloat())
            return matmul(in(0), in(1), [&](double v) { return convert(v, in(0).elemType); });
        if (op == "Identity")
            return in(0);
        if (op == "Cast")
            return cast(n, in(0));
        if (op == "Reshape")
            return reshape(in(0), in(1).ints());
        if (op == "Expand")
            return expand(in(0), in(1).ints());
        if (op == "ConstantOfShape")
            return constantOfShape(n, in(0).ints());
        if (op == "Range")
            return range(in(0), in(1), in(2));
        if (op == "Slice")
            return slice(n, k);
        if (op == "Transpose")
            return transpose(n, in(0));
        if (op == "Trilu")
            return trilu(n, k);
        if (op == "ScatterND")
            return scatterNd(k, n);
        if (op == "Where")
            return elementwise({ &in(0), &in(1), &in(2) }, in(1).elemType,
                [](const std::vector<double>& a) { return a[0] != 0 ? a[1] : a[2]; });
        if (op == "Not")
            return elementwise({ &in(0) }, T::BOOL, [](const std::vector<double>& a) { return a[0] != 0 ? 0.0 : 1.0; });
        if (auto unary = unaryOf(op))
            return elementwise(
                { &in(0) }, in(0).elemType, [&unary](const std::vector<double>& a) { return unary(a[0]); });
        if (n.input_size() == 2 && (isComparison(op) || arithmetic(op, 1, 1, T::FLOAT, 0)))
            return binary(n, in(0), in(1));
        return std::nullopt;
    }

    bool inputsKnown(const onnx::NodeProto& n, const Known& k, const Shapes& shapes)
    {
        if (n.op_type() == "Shape" || n.op_type() == "Size")
            return shapes.contains(n.input(0));
        return n.input_size() > 0 && std::all_of(n.input().begin(), n.input().end(), [&](const std::string& i) {
            return i.empty() || k.contains(i);
        });
    }

} // namespace

std::unordered_map<std::string, std::vector<std::int64_t>> shapesOf(const onnx::ModelProto& m)
{
    std::unordered_map<std::string, std::vector<std::int64_t>> shapes;
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

std::vector<std::int64_t> FoldedTensor::ints() const
{
    std::vector<std::int64_t> out;
    out.reserve(values.size());
    constexpr auto kMax = static_cast<double>(std::numeric_limits<std::int64_t>::max());
    constexpr auto kMin = static_cast<double>(std::numeric_limits<std::int64_t>::min());
    for (auto v : values) {
        if (std::isnan(v))
            out.push_back(0);
        else if (v >= kMax)
            out.push_back(std::numeric_limits<std::int64_t>::max());
        else if (v <= kMin)
            out.push_back(std::numeric_limits<std::int64_t>::min());
        else
            out.push_back(static_cast<std::int64_t>(v));
    }
    return out;
}

std::unordered_map<std::string, FoldedTensor> foldShapeComputations(const onnx::ModelProto& model,
    onnx::ModelProto& inferred, const std::function<void(onnx::ModelProto&)>& infer,
    const std::set<std::string>& constantFloats)
{
    Known known;
    // Integer initializers (shapes, indices); float ones are weights but for frequency tables.
    for (const auto& t : model.graph().initializer()) {
        if (isIntegral(t.data_type()) || constantFloats.contains(t.name())) {
            if (auto v = fromProto(t))
                known[t.name()] = *v;
        }
    }
    // Constant nodes of integers, and float scalars (scales, epsilons, mask fills); a float constant
    // with several elements is a folded slice of a parameter, unless a frequency table.
    for (const auto& n : model.graph().node()) {
        if (n.op_type() != "Constant")
            continue;
        for (const auto& a : n.attribute()) {
            if (a.name() == "value" && a.has_t()) {
                if (auto v = fromProto(a.t());
                    v && (!v->isFloat() || v->values.size() <= 1 || constantFloats.contains(n.output(0))))
                    known[n.output(0)] = *v;
            }
        }
    }
    std::set<int> folded;
    for (int round = 0; round < 64; ++round) {
        // Working copy: folded nodes replaced by initializers holding their values.
        inferred = model;
        auto* g = inferred.mutable_graph();
        g->clear_node();
        g->clear_value_info();
        for (int i = 0; i < model.graph().node_size(); ++i) {
            if (!folded.contains(i))
                *g->add_node() = model.graph().node(i);
        }
        for (int i : folded) {
            const auto& name = model.graph().node(i).output(0);
            if (auto t = toProto(name, known.at(name)))
                *g->add_initializer() = std::move(*t);
        }
        infer(inferred);
        const auto shapes = shapesOf(inferred);
        bool progress = false;
        for (int i = 0; i < model.graph().node_size(); ++i) {
            const auto& n = model.graph().node(i);
            if (folded.contains(i) || n.output_size() != 1 || n.op_type() == "Constant"
                || !inputsKnown(n, known, shapes))
                continue;
            std::optional<FoldedTensor> v;
            try {
                v = evaluate(n, known, shapes);
            } catch (const std::exception&) {
                v.reset(); // out-of-range index or missing input: leave it to shape inference
            }
            if (v && count(v->shape) == static_cast<std::int64_t>(v->values.size())) {
                known[n.output(0)] = std::move(*v);
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
