#include "op_rules.h"

#include "util/error.h"

#include <algorithm>
#include <string>

namespace ps::engine {
namespace {

    bool isReducedAxis(const std::vector<std::int64_t>& axes, std::size_t axis, std::size_t rank)
    {
        if (axes.empty())
            return true;
        return std::any_of(axes.begin(), axes.end(), [&](std::int64_t a) {
            return static_cast<std::size_t>(a < 0 ? a + static_cast<std::int64_t>(rank) : a) == axis;
        });
    }

    // "node 'name' (Op): ", as the kernels name a node in their errors.
    std::string prefix(const Node& node)
    {
        return "node '" + node.name + "' (" + std::string(toString(node.op)) + "): ";
    }

} // namespace

ReduceShapes reduceMeanShapes(const Node& node, const Shape& in)
{
    const auto axes = node.intsAttr("axes");
    ReduceShapes s { in, {} };
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (isReducedAxis(axes, i, in.size()))
            s.kept[i] = 1;
    }
    const bool keep = node.intAttr("keepdims", 1) != 0;
    for (std::size_t i = 0; i < s.kept.size(); ++i) {
        if (keep || !isReducedAxis(axes, i, in.size()))
            s.out.push_back(s.kept[i]);
    }
    return s;
}

ReduceShapes reduceShapes(const Node& node, const Shape& in)
{
    const auto rank = static_cast<std::int64_t>(in.size());
    const auto axes = node.intsAttr("axes");
    std::vector<bool> reduced(in.size(), axes.empty() && node.intAttr("noop_with_empty_axes", 0) == 0);
    for (auto a : axes) {
        const auto axis = a < 0 ? a + rank : a;
        if (axis < 0 || axis >= rank || reduced[static_cast<std::size_t>(axis)])
            throw Error(prefix(node) + "axis " + std::to_string(a) + " is out of range or repeated for input "
                + formatShape(in));
        reduced[static_cast<std::size_t>(axis)] = true;
    }
    const bool keep = node.intAttr("keepdims", 1) != 0;
    ReduceShapes r { in, {} };
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (reduced[i])
            r.kept[i] = 1;
        if (keep || !reduced[i])
            r.out.push_back(r.kept[i]);
    }
    return r;
}

AxisSplit axisSplitOf(const Node& node, const Shape& shape, std::int64_t fallback)
{
    const auto rank = static_cast<std::int64_t>(shape.size());
    const auto attr = node.intAttr("axis", fallback);
    const auto axis = attr < 0 ? attr + rank : attr;
    if (axis < 0 || axis >= rank)
        throw Error(prefix(node) + "axis " + std::to_string(attr) + " is out of range for input " + formatShape(shape));
    AxisSplit split;
    split.axis = static_cast<std::size_t>(axis);
    split.length = shape[split.axis];
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i < split.axis)
            split.outer *= shape[i];
        else if (i > split.axis)
            split.inner *= shape[i];
    }
    return split;
}

ScatterNdPlan scatterNdOf(const Node& node, const Shape& ds, const Shape& is, const Shape& us)
{
    const auto it = node.attrs.find("reduction");
    const auto* reduction = it == node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    if (it != node.attrs.end() && (reduction == nullptr || *reduction != "none"))
        throw Error(prefix(node) + "only reduction 'none' is supported");
    const auto k = is.empty() ? -1 : is.back();
    if (k < 0 || k > static_cast<std::int64_t>(ds.size()))
        throw Error(prefix(node) + "indices " + formatShape(is) + " do not index data " + formatShape(ds));
    if (k > math::kMaxGatherRank)
        throw Error(prefix(node) + "indexes at most " + std::to_string(math::kMaxGatherRank) + " leading axes");
    Shape expect(is.begin(), is.end() - 1);
    expect.insert(expect.end(), ds.begin() + k, ds.end());
    if (us != expect)
        throw Error(prefix(node) + "updates must be " + formatShape(expect) + ", got " + formatShape(us));
    ScatterNdPlan plan;
    plan.gather.depth = static_cast<int>(k);
    for (std::int64_t j = 0; j < k; ++j) {
        plan.gather.sliceDims[j] = ds[static_cast<std::size_t>(j)];
        plan.gather.slicesPerBatch *= ds[static_cast<std::size_t>(j)];
    }
    plan.inner = numElements(Shape(ds.begin() + k, ds.end()));
    plan.rows = numElements(Shape(is.begin(), is.end() - 1));
    plan.gather.rowsPerBatch = std::max<std::int64_t>(plan.rows, 1); // one batch: row / rowsPerBatch is 0
    return plan;
}

Shape expandedShape(const Node& node, const Shape& in)
{
    const auto rank = in.size();
    const auto target = node.intsAttr("shape");
    const auto r = std::max(target.size(), rank);
    Shape shape(r, 1);
    for (std::size_t i = 0; i < r; ++i) {
        const auto a = i < r - rank ? 1 : in[i - (r - rank)];
        const auto b = i < r - target.size() ? 1 : target[i - (r - target.size())];
        shape[i] = a == 1 ? b : a;
    }
    return shape;
}

CastTarget castTarget(const Node& node)
{
    const auto it = node.attrs.find("to");
    const auto* name = it == node.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
    const auto dtype = name ? parseDType(*name) : std::nullopt;
    if (!dtype)
        throw Error("node '" + node.name + "' (" + std::string(toString(node.op))
            + "): attribute 'to' must name a dtype (f32, f16, bf16, f64, i64, i32, i8, u8, bool)");
    CastTarget t { *dtype, std::nullopt };
    switch (*dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::F64:
        break;
    case DType::I32:
        t.integer = math::IntegerType::I32;
        break;
    case DType::I8:
        t.integer = math::IntegerType::I8;
        break;
    case DType::U8:
        t.integer = math::IntegerType::U8;
        break;
    case DType::Bool:
        t.integer = math::IntegerType::Bool;
        break;
    default:
        t.integer = math::IntegerType::I64;
        break;
    }
    return t;
}

StridedView collapseAxes(StridedView view)
{
    StridedView out;
    out.strides.resize(view.strides.size());
    for (std::size_t i = 0; i < view.size.size(); ++i) {
        if (view.size[i] == 1 && view.size.size() > 1)
            continue;
        bool merges = !out.size.empty();
        for (std::size_t o = 0; merges && o < view.strides.size(); ++o)
            merges = out.strides[o].back() == view.strides[o][i] * view.size[i];
        if (merges) {
            out.size.back() *= view.size[i];
            for (std::size_t o = 0; o < view.strides.size(); ++o)
                out.strides[o].back() = view.strides[o][i];
            continue;
        }
        out.size.push_back(view.size[i]);
        for (std::size_t o = 0; o < view.strides.size(); ++o)
            out.strides[o].push_back(view.strides[o][i]);
    }
    return out;
}

math::ElementGather elementGatherOf(const Node& node, const Shape& ds, const Shape& is)
{
    const auto label = "node '" + node.name + "' (" + std::string(toString(node.op)) + "): ";
    if (ds.size() != is.size() || ds.empty())
        throw Error(label + "indices " + formatShape(is) + " must have the rank of data " + formatShape(ds));
    if (ds.size() > static_cast<std::size_t>(math::kMaxGatherRank))
        throw Error(label + "gathers over at most " + std::to_string(math::kMaxGatherRank) + " dimensions");
    const auto rank = static_cast<std::int64_t>(ds.size());
    const auto axis = node.intAttr("axis", 0);
    if (axis < -rank || axis >= rank)
        throw Error(label + "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
    math::ElementGather g;
    g.rank = static_cast<int>(rank);
    g.axis = static_cast<int>(axis < 0 ? axis + rank : axis);
    std::int64_t stride = 1;
    for (auto d = ds.size(); d-- > 0;) {
        if (static_cast<int>(d) != g.axis && is[d] > ds[d])
            throw Error(label + "indices " + formatShape(is) + " are larger than data " + formatShape(ds));
        g.indexDims[d] = is[d];
        g.dataStrides[d] = stride;
        stride *= ds[d];
    }
    g.axisLength = ds[static_cast<std::size_t>(g.axis)];
    return g;
}

NdGatherPlan ndGatherOf(const Node& node, const Shape& ds, const Shape& is)
{
    const auto label = "node '" + node.name + "' (" + std::string(toString(node.op)) + "): ";
    const auto b = node.intAttr("batch_dims", 0);
    const auto r = is.empty() ? 0 : is.back();
    if (b < 0 || is.empty() || static_cast<std::size_t>(b) >= is.size() || r < 1 || r > math::kMaxGatherRank
        || static_cast<std::size_t>(b + r) > ds.size())
        throw Error(label + "indices " + formatShape(is) + " (batch_dims " + std::to_string(b) + ") do not index data "
            + formatShape(ds));
    for (std::size_t d = 0; d < static_cast<std::size_t>(b); ++d) {
        if (is[d] != ds[d])
            throw Error(label + "batch axis " + std::to_string(d) + " of indices " + formatShape(is)
                + " differs from data " + formatShape(ds));
    }
    NdGatherPlan plan;
    plan.gather.depth = static_cast<int>(r);
    for (std::int64_t j = 0; j < r; ++j)
        plan.gather.sliceDims[j] = ds[static_cast<std::size_t>(b + j)];
    plan.gather.rowsPerBatch = numElements(Shape(is.begin() + b, is.end() - 1));
    plan.gather.slicesPerBatch = numElements(Shape(ds.begin() + b, ds.begin() + b + r));
    plan.out.assign(is.begin(), is.end() - 1);
    plan.out.insert(plan.out.end(), ds.begin() + b + r, ds.end());
    plan.inner = numElements(Shape(ds.begin() + b + r, ds.end()));
    plan.rows = numElements(Shape(is.begin(), is.end() - 1));
    return plan;
}

} // namespace ps::engine
