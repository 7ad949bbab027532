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

} // namespace ps::engine
