#include "reduce_shapes.h"

#include <algorithm>

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

} // namespace ps::engine
