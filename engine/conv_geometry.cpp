#include "conv_geometry.h"

#include "util/error.h"

#include <string>
#include <vector>

namespace ps::engine {
namespace {

    std::string where(const Node& node)
    {
        return std::string(toString(node.op)) + " '" + node.name + "': ";
    }

    // An int list attribute of `count` values, or `fallback` when absent.
    std::vector<std::int64_t> intsOr(
        const Node& node, const char* key, std::vector<std::int64_t> fallback, std::size_t count)
    {
        auto v = node.intsAttr(key);
        if (v.empty())
            return fallback;
        if (v.size() != count)
            throw Error(where(node) + "attribute '" + key + "' needs " + std::to_string(count) + " values, got "
                + std::to_string(v.size()));
        return v;
    }

    std::int64_t slideCount(std::int64_t size, std::int64_t padBefore, std::int64_t padAfter, std::int64_t dilation,
        std::int64_t k, std::int64_t stride, bool ceil)
    {
        const auto span = size + padBefore + padAfter - dilation * (k - 1) - 1;
        if (!ceil)
            return span / stride + 1;
        auto out = (span + stride - 1) / stride + 1;
        if ((out - 1) * stride >= size + padBefore)
            --out;
        return out;
    }

    math::PoolDim poolDim(const Node& node, std::int64_t size, std::int64_t k, std::int64_t s, std::int64_t pb,
        std::int64_t pa, bool ceil)
    {
        if (k < 1 || s < 1 || pb < 0 || pa < 0)
            throw Error(where(node) + "needs kernel and strides >= 1 and pads >= 0");
        const auto span = size + pb + pa - k;
        if (span < 0)
            throw Error(where(node) + "kernel " + std::to_string(k) + " is larger than the padded input "
                + std::to_string(size + pb + pa));
        auto out = (ceil ? (span + s - 1) / s : span / s) + 1;
        if (ceil && (out - 1) * s >= size + pb) // the last window must start inside the input or its left pad
            --out;
        return { size, k, s, pb, pa, out };
    }

} // namespace

math::Window2d slidingWindow(const Node& node, const Shape& x, std::int64_t kh, std::int64_t kw)
{
    if (x.size() != 4)
        throw Error(where(node) + "needs an (N, C, H, W) input, got " + formatShape(x));
    const auto s = intsOr(node, "strides", { 1, 1 }, 2);
    const auto p = intsOr(node, "pads", { 0, 0, 0, 0 }, 4);
    const auto d = intsOr(node, "dilations", { 1, 1 }, 2);
    const bool ceil = node.intAttr("ceil_mode", 0) != 0;
    math::Window2d w { kh, kw, s[0], s[1], p[0], p[1], d[0], d[1], x[2], x[3], 0, 0 };
    w.oh = slideCount(x[2], p[0], p[2], d[0], kh, s[0], ceil);
    w.ow = slideCount(x[3], p[1], p[3], d[1], kw, s[1], ceil);
    return w;
}

math::Window2d maxPoolWindow(const Node& node, const Shape& x)
{
    const auto k = intsOr(node, "kernel", {}, 2);
    if (k.empty())
        throw Error(where(node) + "needs attribute 'kernel' (2 values)");
    return slidingWindow(node, x, k[0], k[1]);
}

AvgPoolGeometry avgPoolGeometry(const Node& node, const Shape& x)
{
    if (x.size() != 4)
        throw Error(where(node) + "needs an (N, C, H, W) input, got " + formatShape(x));
    const auto k = intsOr(node, "kernel", {}, 2);
    if (k.empty())
        throw Error(where(node) + "needs attribute 'kernel' (2 values)");
    const auto s = intsOr(node, "strides", { 1, 1 }, 2);
    const auto p = intsOr(node, "pads", { 0, 0, 0, 0 }, 4);
    const auto d = intsOr(node, "dilations", { 1, 1 }, 2);
    if (d[0] != 1 || d[1] != 1)
        throw Error(where(node) + "dilated average pooling is not supported");
    const bool ceil = node.intAttr("ceil_mode", 0) != 0;
    return { poolDim(node, x[2], k[0], s[0], p[0], p[2], ceil), poolDim(node, x[3], k[1], s[1], p[1], p[3], ceil),
        node.intAttr("count_include_pad", 0) != 0 };
}

PadGeometry padGeometry(const Node& node, const Shape& in)
{
    const auto rank = in.size();
    const auto pads = node.intsAttr("pads");
    if (pads.size() != 2 * rank)
        throw Error(where(node) + "pads needs " + std::to_string(2 * rank) + " values (begins, then ends) for a "
            + formatShape(in) + " input, got " + std::to_string(pads.size()));
    std::string modeName = "constant";
    if (const auto it = node.attrs.find("mode"); it != node.attrs.end()) {
        const auto* name = std::get_if<std::string>(&it->second);
        if (name == nullptr)
            throw Error(where(node) + "attribute 'mode' is not a string");
        modeName = *name;
    }
    PadGeometry g { in, std::vector<std::int64_t>(pads.begin(), pads.begin() + static_cast<std::ptrdiff_t>(rank)),
        math::PadMode::Constant };
    if (modeName == "reflect")
        g.mode = math::PadMode::Reflect;
    else if (modeName == "edge")
        g.mode = math::PadMode::Edge;
    else if (modeName == "wrap")
        g.mode = math::PadMode::Wrap;
    else if (modeName != "constant")
        throw Error(where(node) + "mode '" + modeName + "' is not one of constant, reflect, edge, wrap");
    for (std::size_t a = 0; a < rank; ++a) {
        g.out[a] = in[a] + pads[a] + pads[a + rank];
        if (g.out[a] < 0)
            throw Error(where(node) + "pads crop axis " + std::to_string(a) + " of length " + std::to_string(in[a])
                + " below zero");
        if (g.mode != math::PadMode::Constant && in[a] == 0 && g.out[a] > 0)
            throw Error(where(node) + "mode '" + modeName + "' cannot pad the empty axis " + std::to_string(a));
    }
    return g;
}

} // namespace ps::engine
