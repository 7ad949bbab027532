#include "conv_geometry.h"

#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
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

    std::string stringAttr(const Node& node, const char* key, const std::string& fallback)
    {
        const auto it = node.attrs.find(key);
        if (it == node.attrs.end())
            return fallback;
        if (const auto* text = std::get_if<std::string>(&it->second))
            return *text;
        throw Error(where(node) + "attribute '" + key + "' is not a string");
    }

    enum class Coord { Asymmetric, HalfPixel, PytorchHalfPixel, AlignCorners };
    enum class Rounding { Floor, Ceil, RoundPreferFloor, RoundPreferCeil };

    // ONNX's x_original of output position o, as one exact-integer division where possible so that
    // integers and halves come out exact (nearest rounding depends on them).
    double sourceCoord(Coord c, std::int64_t o, std::int64_t in, std::int64_t out)
    {
        switch (c) {
        case Coord::Asymmetric:
            return static_cast<double>(o * in) / static_cast<double>(out);
        case Coord::PytorchHalfPixel:
            if (out == 1)
                return 0.0;
            [[fallthrough]];
        case Coord::HalfPixel:
            return static_cast<double>((2 * o + 1) * in - out) / static_cast<double>(2 * out);
        case Coord::AlignCorners:
            break;
        }
        return out == 1 ? 0.0 : static_cast<double>(o * (in - 1)) / static_cast<double>(out - 1);
    }

    std::int64_t roundNearest(Rounding r, double x)
    {
        const double f = std::floor(x);
        switch (r) {
        case Rounding::Floor:
            return static_cast<std::int64_t>(f);
        case Rounding::Ceil:
            return static_cast<std::int64_t>(std::ceil(x));
        case Rounding::RoundPreferFloor:
            return static_cast<std::int64_t>(x - f <= 0.5 ? f : f + 1);
        case Rounding::RoundPreferCeil:
            break;
        }
        return static_cast<std::int64_t>(x - f < 0.5 ? f : f + 1);
    }

    template <typename E>
    E choose(const Node& node, const char* key, const std::string& fallback,
        std::initializer_list<std::pair<const char*, E>> names)
    {
        const auto name = stringAttr(node, key, fallback);
        std::string known;
        for (const auto& [text, value] : names) {
            if (name == text)
                return value;
            known += known.empty() ? text : std::string(", ") + text;
        }
        throw Error(where(node) + key + " '" + name + "' is not supported (" + known + ")");
    }

    std::vector<math::ResizeTap> resizeTaps(
        bool linear, Coord coord, Rounding rounding, std::int64_t in, std::int64_t out)
    {
        std::vector<math::ResizeTap> taps;
        for (std::int64_t o = 0; o < out; ++o) {
            const double x = sourceCoord(coord, o, in, out);
            if (!linear) {
                const auto i = std::clamp<std::int64_t>(roundNearest(rounding, x), 0, in - 1);
                taps.push_back({ i, i, 1.0F, 0.0F });
                continue;
            }
            // Outside [0, in - 1] the edge value holds (ONNX pads with the edge; torch clamps).
            const double c = std::clamp(x, 0.0, static_cast<double>(in - 1));
            const auto i0 = static_cast<std::int64_t>(c);
            const auto w1 = static_cast<float>(c - static_cast<double>(i0));
            taps.push_back({ i0, std::min(i0 + 1, in - 1), 1.0F - w1, w1 });
        }
        return taps;
    }

} // namespace

namespace {

    // The strides, pads (begins, then ends), dilations and output_padding of a convolution over the
    // spatial axes of `x` (2 or 3, as many as the weight's kernel dims), checked against the weight.
    struct ConvAttrs
    {
        std::size_t spatial;
        std::vector<std::int64_t> k, s, p, d, extra;
    };

    ConvAttrs convAttrs(const Node& node, const Shape& x, const Shape& weight)
    {
        if ((x.size() != 4 && x.size() != 5) || weight.size() != x.size())
            throw Error(where(node)
                + "needs an (N, C, H, W) or (N, C, D, H, W) input and a weight of as many dims, got " + formatShape(x)
                + " and " + formatShape(weight));
        const auto n = x.size() - 2;
        ConvAttrs a { n, std::vector<std::int64_t>(weight.begin() + 2, weight.end()),
            intsOr(node, "strides", std::vector<std::int64_t>(n, 1), n),
            intsOr(node, "pads", std::vector<std::int64_t>(2 * n, 0), 2 * n),
            intsOr(node, "dilations", std::vector<std::int64_t>(n, 1), n),
            intsOr(node, "output_padding", std::vector<std::int64_t>(n, 0), n) };
        return a;
    }

    // The window over an image of spatial sizes `image` whose grid of windows has sizes `grid` (the
    // last two axes are (H, W); a third, first, is the depth).
    math::Window windowOf(
        const ConvAttrs& a, const std::vector<std::int64_t>& image, const std::vector<std::int64_t>& grid)
    {
        const auto n = a.spatial;
        const auto y = n - 2;
        const auto x = n - 1;
        math::Window w { a.k[y], a.k[x], a.s[y], a.s[x], a.p[y], a.p[x], a.d[y], a.d[x], image[y], image[x], grid[y],
            grid[x] };
        if (n == 3) {
            w.kd = a.k[0];
            w.sd = a.s[0];
            w.pf = a.p[0];
            w.dd = a.d[0];
            w.id = image[0];
            w.od = grid[0];
        }
        return w;
    }

} // namespace

math::Window convWindow(const Node& node, const Shape& x, const Shape& weight)
{
    const auto a = convAttrs(node, x, weight);
    const auto n = a.spatial;
    const std::vector<std::int64_t> image(x.begin() + 2, x.end());
    std::vector<std::int64_t> grid(n);
    for (std::size_t i = 0; i < n; ++i) {
        grid[i] = slideCount(image[i], a.p[i], a.p[n + i], a.d[i], a.k[i], a.s[i], false);
        if (grid[i] < 1)
            throw Error(where(node) + "gives no output for input " + formatShape(x));
    }
    return windowOf(a, image, grid);
}

math::Window transposedConvWindow(const Node& node, const Shape& x, const Shape& weight)
{
    const auto a = convAttrs(node, x, weight);
    const auto n = a.spatial;
    // Each output size: (in - 1) stride - pads + dilation (k - 1) + output_padding + 1.
    const std::vector<std::int64_t> grid(x.begin() + 2, x.end());
    std::vector<std::int64_t> image(n);
    for (std::size_t i = 0; i < n; ++i) {
        image[i] = (grid[i] - 1) * a.s[i] - a.p[i] - a.p[n + i] + a.d[i] * (a.k[i] - 1) + a.extra[i] + 1;
        if (image[i] < 1)
            throw Error(where(node) + "gives no output for input " + formatShape(x));
    }
    // The convolution of the output image whose grid of windows is the input.
    return windowOf(a, image, grid);
}

namespace {

    // A pool's kernel, strides, pads (begins, then ends) and dilations over the 2 or 3 spatial axes of x.
    ConvAttrs poolAttrs(const Node& node, const Shape& x)
    {
        if (x.size() != 4 && x.size() != 5)
            throw Error(where(node) + "needs an (N, C, H, W) or (N, C, D, H, W) input, got " + formatShape(x));
        const auto n = x.size() - 2;
        auto k = intsOr(node, "kernel", {}, n);
        if (k.empty())
            throw Error(where(node) + "needs attribute 'kernel' (" + std::to_string(n) + " values)");
        return { n, std::move(k), intsOr(node, "strides", std::vector<std::int64_t>(n, 1), n),
            intsOr(node, "pads", std::vector<std::int64_t>(2 * n, 0), 2 * n),
            intsOr(node, "dilations", std::vector<std::int64_t>(n, 1), n), {} };
    }

} // namespace

math::Window maxPoolWindow(const Node& node, const Shape& x)
{
    const auto a = poolAttrs(node, x);
    const auto n = a.spatial;
    const bool ceil = node.intAttr("ceil_mode", 0) != 0;
    const std::vector<std::int64_t> image(x.begin() + 2, x.end());
    std::vector<std::int64_t> grid(n);
    for (std::size_t i = 0; i < n; ++i)
        grid[i] = slideCount(image[i], a.p[i], a.p[n + i], a.d[i], a.k[i], a.s[i], ceil);
    return windowOf(a, image, grid);
}

AvgPoolGeometry avgPoolGeometry(const Node& node, const Shape& x)
{
    const auto a = poolAttrs(node, x);
    const auto n = a.spatial;
    for (const auto dilation : a.d) {
        if (dilation != 1)
            throw Error(where(node) + "dilated average pooling is not supported");
    }
    const bool ceil = node.intAttr("ceil_mode", 0) != 0;
    std::vector<math::PoolDim> dims;
    for (std::size_t i = 0; i < n; ++i)
        dims.push_back(poolDim(node, x[2 + i], a.k[i], a.s[i], a.p[i], a.p[n + i], ceil));
    AvgPoolGeometry g { dims[n - 2], dims[n - 1], node.intAttr("count_include_pad", 0) != 0 };
    if (n == 3)
        g.d = dims[0];
    return g;
}

ResizeGeometry resizeGeometry(const Node& node, const Shape& xs)
{
    const auto rank = xs.size();
    auto sizes = node.intsAttr("sizes");
    if (rank < 2 || (sizes.size() != 2 && sizes.size() != rank))
        throw Error(where(node) + "needs attribute 'sizes' (H', W') for an (N, C, H, W) input, got "
            + std::to_string(sizes.size()) + " sizes for " + formatShape(xs));
    if (sizes.size() == rank) {
        if (!std::equal(sizes.begin(), sizes.end() - 2, xs.begin()))
            throw Error(where(node) + "only the last two dims can be resized, not " + formatShape(xs) + " to "
                + formatShape(sizes));
        sizes.erase(sizes.begin(), sizes.end() - 2);
    }
    const auto h = xs[rank - 2];
    const auto w = xs[rank - 1];
    if (sizes[0] < 1 || sizes[1] < 1 || h < 1 || w < 1)
        throw Error(where(node) + "cannot resize " + formatShape(xs) + " to " + formatShape(sizes));
    if (node.intAttr("antialias", 0) != 0)
        throw Error(where(node) + "antialiased resizing is not supported");
    const bool linear = choose<bool>(node, "mode", "nearest", { { "nearest", false }, { "linear", true } });
    const auto coord = choose<Coord>(node, "coordinate_transformation_mode", "half_pixel",
        { { "asymmetric", Coord::Asymmetric }, { "half_pixel", Coord::HalfPixel },
            { "pytorch_half_pixel", Coord::PytorchHalfPixel }, { "align_corners", Coord::AlignCorners } });
    const auto rounding = choose<Rounding>(node, "nearest_mode", "round_prefer_floor",
        { { "round_prefer_floor", Rounding::RoundPreferFloor }, { "round_prefer_ceil", Rounding::RoundPreferCeil },
            { "floor", Rounding::Floor }, { "ceil", Rounding::Ceil } });
    ResizeGeometry plan { xs, resizeTaps(linear, coord, rounding, h, sizes[0]),
        resizeTaps(linear, coord, rounding, w, sizes[1]), h, w, numElements(xs) / (h * w) };
    plan.out[rank - 2] = sizes[0];
    plan.out[rank - 1] = sizes[1];
    return plan;
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
