// engine/op_rules.h's collapseAxes: the axis merging the CUDA kernels apply to strided walks
// (broadcasting binary ops, Expand, gradient reductions) keeps every flat index's offsets.
#include "op_rules.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

using namespace ps;
using namespace ps::engine;

namespace {

// Each operand's offset of every flat index of the walk, row-major.
std::vector<std::vector<std::int64_t>> offsets(const StridedView& v)
{
    std::int64_t n = 1;
    for (const auto s : v.size)
        n *= s;
    std::vector<std::vector<std::int64_t>> out(v.strides.size());
    for (std::int64_t k = 0; k < n; ++k) {
        for (std::size_t o = 0; o < v.strides.size(); ++o) {
            std::int64_t rest = k;
            std::int64_t offset = 0;
            for (int i = static_cast<int>(v.size.size()) - 1; i >= 0; --i) {
                offset += (rest % v.size[static_cast<std::size_t>(i)]) * v.strides[o][static_cast<std::size_t>(i)];
                rest /= v.size[static_cast<std::size_t>(i)];
            }
            out[o].push_back(offset);
        }
    }
    return out;
}

// Row-major strides of `operand` along `out` (0 where broadcast), as the CUDA backend makes them.
std::vector<std::int64_t> stridesOver(const Shape& operand, const Shape& out)
{
    std::vector<std::int64_t> s(out.size(), 0);
    std::int64_t stride = 1;
    for (int i = static_cast<int>(operand.size()) - 1; i >= 0; --i) {
        const auto at = static_cast<std::size_t>(i) + out.size() - operand.size();
        s[at] = operand[static_cast<std::size_t>(i)] == 1 ? 0 : stride;
        stride *= operand[static_cast<std::size_t>(i)];
    }
    return s;
}

} // namespace

TEST(OpRules, CollapsedWalksReachTheSameOffsets)
{
    const Shape activation { 8, 1024, 768 };
    const auto bias =
        collapseAxes({ activation, { stridesOver(activation, activation), stridesOver({ 768 }, activation) } });
    EXPECT_EQ(bias.size, (std::vector<std::int64_t> { 8 * 1024, 768 })); // a bias: two axes
    EXPECT_EQ(bias.strides[1], (std::vector<std::int64_t> { 0, 1 }));
    const auto same =
        collapseAxes({ activation, { stridesOver(activation, activation), stridesOver(activation, activation) } });
    EXPECT_EQ(same.size, (std::vector<std::int64_t> { 8 * 1024 * 768 })); // elementwise: one axis
    EXPECT_EQ(collapseAxes({ { 1, 1 }, { { 0, 0 } } }).size.size(), 0U); // one element, no axis

    std::mt19937 gen(5);
    for (int trial = 0; trial < 300; ++trial) {
        const auto rank = 1 + static_cast<int>(gen() % 5);
        Shape out;
        Shape a;
        Shape b;
        for (int i = 0; i < rank; ++i) {
            out.push_back(1 + static_cast<std::int64_t>(gen() % 4));
            a.push_back(gen() % 3 == 0 ? 1 : out.back());
            b.push_back(gen() % 2 == 0 ? 1 : out.back());
        }
        const auto bRank = static_cast<std::size_t>(gen() % (rank + 1)); // b may have fewer axes
        b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(b.size() - bRank));
        const StridedView view { out, { stridesOver(a, out), stridesOver(b, out) } };
        const auto merged = collapseAxes(view);
        EXPECT_LE(merged.size.size(), out.size());
        EXPECT_EQ(offsets(merged), offsets(view)) << "trial " << trial;
    }
}
