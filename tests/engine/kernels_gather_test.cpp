// GatherElements, ScatterElements and GatherND on the CPU (cpu/kernels_gather.cpp): forward values by hand in
// ONNX's and torch.gather's / x[idx]'s meaning, errors naming the node, and each backward against
// central finite differences (repeated indices accumulate).
#include "backend.h"
#include "kernel_test_support.h"

#include <gtest/gtest.h>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::makeNode;

namespace {

class GatherKernel : public ps::engine::testing::KernelTest
{
protected:
    NdArray run(const Node& n, const std::vector<NdArray>& in)
    {
        NodeValues v;
        return forward(n, in, v).at(0);
    }
    static std::vector<double> asDoubles(const NdArray& a)
    {
        std::vector<double> out;
        for (std::int64_t i = 0; i < a.numel(); ++i)
            out.push_back(a.dtype() == DType::F32 ? double(a.f32()[i]) : double(a.i64()[i]));
        return out;
    }
    void checkGrad(const Node& n, const std::vector<NdArray>& in, const std::string& label)
    {
        SCOPED_TRACE(label);
        checkGradients(n, in, { true, false }, 1e-2, "", true);
    }
};

Node axis(OpType op, std::int64_t a)
{
    return makeNode(op, { { "axis", a } });
}

} // namespace

TEST_F(GatherKernel, GatherElementsReadsAlongTheAxis)
{
    const auto data = floats({ 2, 3 }, { 1, 2, 3, 4, 5, 6 });
    // torch.gather(data, 1, [[2, 0], [-1, 1]]): indices narrower than the data, negative from the end.
    auto out = run(axis(OpType::GatherElements, 1), { data, indices({ 2, 2 }, { 2, 0, -1, 1 }) });
    EXPECT_EQ(out.shape(), (Shape { 2, 2 }));
    EXPECT_EQ(asDoubles(out), (std::vector<double> { 3, 1, 6, 5 }));
    out = run(axis(OpType::GatherElements, 0), { data, indices({ 3, 3 }, { 1, 0, 1, 0, 0, 0, 1, 1, 1 }) });
    EXPECT_EQ(asDoubles(out), (std::vector<double> { 4, 2, 6, 1, 2, 3, 4, 5, 6 }));
    // Integer data (RoBERTa's position ids gathered from an expanded arange).
    auto ids = NdArray::empty(m_alloc, { 1, 4 }, DType::I64);
    for (std::int64_t i = 0; i < 4; ++i)
        ids.i64()[i] = 10 + i;
    out = run(axis(OpType::GatherElements, -1), { ids, indices({ 1, 3 }, { 3, 3, 0 }) });
    EXPECT_EQ(out.dtype(), DType::I64);
    EXPECT_EQ(asDoubles(out), (std::vector<double> { 13, 13, 10 }));
    expectError(
        [&] {
            (void)run(axis(OpType::GatherElements, 1), { data, indices({ 2, 1 }, { 0, 3 }) });
        },
        "index 3 is out of range for axis 1");
    expectError([&] { (void)run(axis(OpType::GatherElements, 0), { data, indices({ 2 }, { 0, 1 }) }); }, "rank");
    expectError(
        [&] {
            (void)run(axis(OpType::GatherElements, 0), { data, indices({ 1, 4 }, { 0, 0, 0, 0 }) });
        },
        "larger than data");
}

TEST_F(GatherKernel, GatherNDPicksSlicesOfLeadingAxes)
{
    const auto data = floats({ 3, 2, 2 }, { 0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23 });
    // Mixtral's expert weights: x[idx] with idx (n, 1) picks whole (2, 2) experts, repeats allowed.
    auto out = run(makeNode(OpType::GatherND), { data, indices({ 4, 1 }, { 2, 0, 2, -2 }) });
    EXPECT_EQ(out.shape(), (Shape { 4, 2, 2 }));
    EXPECT_EQ(asDoubles(out), (std::vector<double> { 20, 21, 22, 23, 0, 1, 2, 3, 20, 21, 22, 23, 10, 11, 12, 13 }));
    out = run(makeNode(OpType::GatherND), { data, indices({ 2, 3 }, { 1, 1, 0, 2, 0, 1 }) });
    EXPECT_EQ(out.shape(), (Shape { 2 }));
    EXPECT_EQ(asDoubles(out), (std::vector<double> { 12, 21 }));
    // batch_dims 1: each batch row indexes its own (2, 2) block.
    out = run(
        makeNode(OpType::GatherND, { { "batch_dims", std::int64_t { 1 } } }), { data, indices({ 3, 1 }, { 1, 0, 1 }) });
    EXPECT_EQ(out.shape(), (Shape { 3, 2 }));
    EXPECT_EQ(asDoubles(out), (std::vector<double> { 2, 3, 10, 11, 22, 23 }));
    expectError(
        [&] {
            (void)run(makeNode(OpType::GatherND), { data, indices({ 1, 1 }, { 3 }) });
        },
        "index 3 is out of range for axis 0");
    expectError(
        [&] {
            (void)run(makeNode(OpType::GatherND), { data, indices({ 1, 4 }, { 0, 0, 0, 0 }) });
        },
        "do not index");
}

TEST_F(GatherKernel, BackwardsScatterAddIntoTheData)
{
    checkGrad(axis(OpType::GatherElements, 1),
        { random({ 2, 4, 3 }), indices({ 2, 5, 3 }, std::vector<std::int64_t>(30, 0)) },
        "GatherElements all on one index");
    std::vector<std::int64_t> mixed;
    for (int i = 0; i < 2 * 3 * 2; ++i)
        mixed.push_back((i * 7) % 5 - 2);
    checkGrad(axis(OpType::GatherElements, 2), { random({ 2, 3, 5 }), indices({ 2, 3, 2 }, mixed) },
        "GatherElements last axis, negative and repeated");
    checkGrad(makeNode(OpType::GatherND), { random({ 4, 3, 2 }), indices({ 5, 1 }, { 1, 3, 1, 0, -1 }) },
        "GatherND rows, repeated");
    checkGrad(makeNode(OpType::GatherND, { { "batch_dims", std::int64_t { 1 } } }),
        { random({ 2, 3, 4 }), indices({ 2, 2, 2 }, { 0, 1, 2, 3, 1, 1, 1, 1 }) }, "GatherND batch_dims 1, elements");
}

// ScatterElements, GatherElements' inverse (torch's scatter / scatter_add, ONNX reduction none /
// add): values by hand, then both gradients against finite differences (distinct indices: a
// repeated write keeps one of its updates, whose gradient finite differences cannot see).
TEST_F(GatherKernel, ScatterElementsWritesOrAddsAtTheIndices)
{
    const auto data = floats({ 2, 3 }, { 1, 2, 3, 4, 5, 6 });
    const auto where = indices({ 2, 2 }, { 2, 0, -1, 1 });
    const auto updates = floats({ 2, 2 }, { 10, 20, 30, 40 });
    auto scatter = axis(OpType::ScatterElements, 1);
    EXPECT_EQ(asDoubles(run(scatter, { data, where, updates })), (std::vector<double> { 20, 2, 10, 4, 40, 30 }));
    scatter.attrs["add"] = std::int64_t { 1 };
    EXPECT_EQ(asDoubles(run(scatter, { data, where, updates })), (std::vector<double> { 21, 2, 13, 4, 45, 36 }));
    expectError(
        [&] {
            (void)run(scatter, { data, indices({ 2, 1 }, { 0, 3 }), floats({ 2, 1 }, { 1, 1 }) });
        },
        "index 3 is out of range for axis 1");
    for (const std::int64_t add : { 0, 1 }) {
        auto n = axis(OpType::ScatterElements, 2);
        n.attrs["add"] = add;
        SCOPED_TRACE(add);
        checkGradients(n,
            { random({ 2, 3, 5 }), indices({ 2, 3, 2 }, { 4, 0, 1, 3, -1, 2, 0, 2, 3, 1, 2, 4 }), random({ 2, 3, 2 }) },
            { true, false, true }, 1e-2, "", true);
    }
}
