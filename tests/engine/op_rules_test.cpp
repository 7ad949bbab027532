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

// ---- The shared plans the CUDA kernels take (op_rules.h, einsum_plan.h, order_math.h) ----

#include "einsum_plan.h"
#include "gemm_pitch.h"
#include "order_math.h"

namespace {

Node opNode(OpType op, Attributes attrs)
{
    Node n;
    n.name = "n";
    n.op = op;
    n.attrs = std::move(attrs);
    return n;
}

} // namespace

TEST(OpRules, ReduceShapesCheckAxesAndHonourNoopWithEmptyAxes)
{
    const auto r = reduceShapes(opNode(OpType::ReduceSum, { { "axes", Shape { -1, 0 } } }), { 2, 3, 4 });
    EXPECT_EQ(r.kept, (Shape { 1, 3, 1 }));
    EXPECT_EQ(r.out, (Shape { 1, 3, 1 }));
    const auto all = reduceShapes(opNode(OpType::ReduceMax, { { "keepdims", std::int64_t { 0 } } }), { 2, 3 });
    EXPECT_EQ(all.kept, (Shape { 1, 1 }));
    EXPECT_TRUE(all.out.empty());
    const auto noop =
        reduceShapes(opNode(OpType::ReduceSum, { { "noop_with_empty_axes", std::int64_t { 1 } } }), { 2, 3 });
    EXPECT_EQ(noop.kept, (Shape { 2, 3 }));
    EXPECT_THROW((void)reduceShapes(opNode(OpType::ReduceSum, { { "axes", Shape { 1, -1 } } }), { 2, 3 }), Error);
    const auto split = axisSplitOf(opNode(OpType::CumSum, { { "axis", std::int64_t { -2 } } }), { 2, 3, 4, 5 }, 0);
    EXPECT_EQ(split.outer, 6);
    EXPECT_EQ(split.length, 4);
    EXPECT_EQ(split.inner, 5);
    EXPECT_EQ(split.axis, 2U);
}

TEST(OpRules, ScatterNdSlotsAreRowMajorOverTheIndexedAxes)
{
    const auto node = opNode(OpType::ScatterND, {});
    const auto plan = scatterNdOf(node, { 3, 4, 2 }, { 5, 2 }, { 5, 2 });
    EXPECT_EQ(plan.inner, 2);
    EXPECT_EQ(plan.rows, 5);
    const std::int64_t tuple[2] = { 2, -1 };
    int bad = -1;
    EXPECT_EQ(math::ndGatherSlice(plan.gather, 4, tuple, &bad), 2 * 4 + 3);
    const std::int64_t out[2] = { 3, 0 };
    EXPECT_EQ(math::ndGatherSlice(plan.gather, 1, out, &bad), -1);
    EXPECT_EQ(bad, 0);
    EXPECT_THROW((void)scatterNdOf(node, { 3, 4 }, { 5, 1 }, { 5, 3 }), Error); // updates must be (5, 4)
    EXPECT_THROW(
        (void)scatterNdOf(opNode(OpType::ScatterND, { { "reduction", std::string("add") } }), { 3 }, { 1, 1 }, { 1 }),
        Error);
}

TEST(EinsumPlan, GemmFormsAndTheLoopAgree)
{
    const auto g = einsumGemm("bij", "bjk", "bik");
    ASSERT_TRUE(g.has_value());
    EXPECT_EQ(g->batch, "b");
    EXPECT_EQ(g->m, "i");
    EXPECT_EQ(g->n, "k");
    EXPECT_EQ(g->k, "j");
    EXPECT_FALSE(g->swapped);
    const auto swapped = einsumGemm("ij", "jk", "ki");
    ASSERT_TRUE(swapped.has_value());
    EXPECT_TRUE(swapped->swapped);
    EXPECT_EQ(swapped->m + swapped->n, "ki");
    const auto outer = einsumGemm("ij", "kj", "ikj"); // j in all three: a batch of outer products (K = 1)
    ASSERT_TRUE(outer.has_value());
    EXPECT_EQ(outer->batch + "|" + outer->k, "j|");
    EXPECT_FALSE(einsumGemm("ij", "jk", "").has_value()); // i and k in one term only: the loop
    // The loop: C = A B^T through contractElement, against the sums written out.
    const auto node = opNode(OpType::Einsum, { { "equation", std::string("ik,jk->ij") } });
    const auto plan = einsumPlan(node, { { 2, 3 }, { 4, 3 } });
    const auto loop = einsumLoop(node, { "ik", "jk" }, "ij", plan);
    std::vector<float> a(6), b(12);
    for (std::size_t i = 0; i < a.size(); ++i)
        a[i] = static_cast<float>(i) - 2.5F;
    for (std::size_t i = 0; i < b.size(); ++i)
        b[i] = 0.5F * static_cast<float>(i % 5) - 1.0F;
    for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 4; ++j) {
            double want = 0;
            for (int k = 0; k < 3; ++k)
                want += static_cast<double>(a[static_cast<std::size_t>(i * 3 + k)])
                    * b[static_cast<std::size_t>(j * 3 + k)];
            EXPECT_DOUBLE_EQ(math::contractElement(loop, a.data(), b.data(), i * 4 + j), want);
        }
    }
    EXPECT_THROW((void)einsumPlan(node, { { 2, 3 }, { 4, 5 } }), Error); // k is 3 and 5
    const auto wide = opNode(OpType::Einsum, { { "equation", std::string("abcdefghijklm->abcdefghijklm") } });
    const Shape ones(13, 1);
    EXPECT_THROW((void)einsumLoop(wide, { "abcdefghijklm" }, "abcdefghijklm", einsumPlan(wide, { ones })), Error);
}

TEST(OrderMath, TopKOrderTiesNanAndMixedPredicates)
{
    const float nan = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(math::topKBefore(nan, 5, 3.0F, 0, true)); // NaN ranks first when largest
    EXPECT_FALSE(math::topKBefore(nan, 5, 3.0F, 0, false)); // and last when smallest
    EXPECT_TRUE(math::topKBefore(1.0F, 2, 1.0F, 4, true)); // ties: the lower index first
    EXPECT_FALSE(math::topKBefore(1.0F, 4, 1.0F, 2, true));
    EXPECT_TRUE(math::replacesMaximum(nan, 9.0F));
    EXPECT_FALSE(math::replacesMaximum(9.0F, nan));
    EXPECT_FALSE(math::replacesMaximum(2.0F, 2.0F)); // the first maximum stays
    EXPECT_TRUE(math::takesA(nan, 1.0F, true));
    EXPECT_FALSE(math::takesA(1.0F, nan, false));
    EXPECT_TRUE(math::predicate(math::Predicate::Less, std::int64_t { 2 }, 2.5F)); // mixed: as double
    // i64 against f32 compares as double (2^53 + 1 rounds to 2^53), i64 against i64 exactly.
    EXPECT_TRUE(math::predicate(math::Predicate::Equal, (std::int64_t { 1 } << 53) + 1, 9007199254740992.0F));
    EXPECT_FALSE(math::predicate(math::Predicate::Equal, (std::int64_t { 1 } << 60) + 1, std::int64_t { 1 } << 60));
    EXPECT_TRUE(math::predicate(math::Predicate::Or, 0.0F, std::int64_t { 3 }));
    std::int64_t x[6] = { 1, 2, 3, 4, 5, 6 };
    std::int64_t y[6] = {};
    math::cumsumLine(x, y, 3, 2, true, true); // every other element, exclusive, from the end
    EXPECT_EQ(y[4], 0);
    EXPECT_EQ(y[2], 5);
    EXPECT_EQ(y[0], 8);
}

// gemm_pitch.h: only large matrices whose rows do not end on 16-byte boundaries get a pitch.
TEST(GemmPitch, PadsOnlyLargeMisalignedRows)
{
    EXPECT_EQ(gemmRowPitch(8192, 50257, true), 50264); // GPT-2's logits
    EXPECT_EQ(gemmRowPitch(8192, 50257, false), 50257);
    EXPECT_EQ(gemmRowPitch(8192, 50304, true), 50304); // a padded vocabulary: aligned already
    EXPECT_EQ(gemmRowPitch(64, 513, true), 513); // small: as stored
    EXPECT_EQ(gemmRowPitch(2048, 513, true), 520);
    EXPECT_EQ(gemmRowPitch(2043, 513, true), 513); // just under 2^20 elements
}
