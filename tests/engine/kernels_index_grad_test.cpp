// The index and resampling kernels' backwards (cpu/kernels_index.cpp) against central finite
// differences of their forwards, and every backward reading only the inputs op_cost lists as saved.
#include "index_kernel_support.h"

#include <gtest/gtest.h>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::expectValues;
using ps::engine::testing::makeNode;
using ps::engine::testing::pool;
using ps::engine::testing::resize;

namespace {

using IndexKernelGrad = ps::engine::testing::IndexKernel;

} // namespace

// ---- Backward against finite differences ----

TEST_F(IndexKernelGrad, Pooling)
{
    for (std::int64_t includePad : { 0, 1 }) {
        for (std::int64_t ceil : { 0, 1 }) {
            const auto label = "ceil " + std::to_string(ceil) + " count_include_pad " + std::to_string(includePad);
            checkGrad(makeNode(OpType::AvgPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, ceil, includePad)),
                { random({ 2, 2, 6, 5 }) }, { true }, "AvgPool " + label);
            checkGrad(makeNode(OpType::AvgPool, pool({ 2, 3 }, { 2, 2 }, { 0, 1, 1, 0 }, ceil, includePad)),
                { random({ 1, 2, 5, 6 }) }, { true }, "AvgPool asymmetric " + label);
        }
    }
    checkGrad(makeNode(OpType::MaxPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, 1)), { distinct({ 2, 2, 6, 5 }) },
        { true }, "MaxPool ceil");
}

TEST_F(IndexKernelGrad, Pad)
{
    for (const char* mode : { "constant", "reflect", "edge", "wrap" })
        checkGrad(makeNode(OpType::Pad,
                      { { "pads", Shape { 0, 2, -1, 1, 1, 3 } }, { "mode", std::string(mode) }, { "value", 0.25 } }),
            { random({ 2, 3, 4 }) }, { true }, mode);
}

TEST_F(IndexKernelGrad, Resize)
{
    checkGrad(makeNode(OpType::Resize, resize({ 5, 7 }, "linear", "half_pixel")), { random({ 1, 2, 3, 4 }) }, { true },
        "bilinear up");
    checkGrad(makeNode(OpType::Resize, resize({ 2, 3 }, "linear", "align_corners")), { random({ 2, 1, 5, 4 }) },
        { true }, "bilinear align_corners down");
    checkGrad(makeNode(OpType::Resize, resize({ 6, 3 }, "nearest", "asymmetric", "floor")), { random({ 1, 2, 3, 4 }) },
        { true }, "nearest");
}

TEST_F(IndexKernelGrad, GatherScatterTopK)
{
    checkGrad(makeNode(OpType::Gather, { { "axis", std::int64_t { 1 } } }),
        { random({ 2, 4, 3 }), ints({ 5 }, { 0, -1, 3, 0, 1 }) }, { true, false }, "Gather repeated indices");
    checkGrad(makeNode(OpType::ScatterND), { random({ 3, 4 }), ints({ 3, 1 }, { 2, 0, 2 }), random({ 3, 4 }) },
        { true, false, true }, "ScatterND rows, duplicate");
    checkGrad(makeNode(OpType::ScatterND), { random({ 3, 4 }), ints({ 2, 2 }, { 1, 3, -1, 0 }), random({ 2 }) },
        { true, false, true }, "ScatterND elements");
    checkGrad(makeNode(OpType::TopK, { { "k", std::int64_t { 2 } }, { "axis", std::int64_t { 1 } } }),
        { distinct({ 2, 5, 3 }) }, { true }, "TopK largest");
    checkGrad(makeNode(OpType::TopK, { { "k", std::int64_t { 3 } }, { "largest", std::int64_t { 0 } } }),
        { distinct({ 3, 6 }) }, { true }, "TopK smallest");
}

TEST_F(IndexKernelGrad, Einsum)
{
    const auto check2 = [&](const char* eq, Shape a, Shape b) {
        checkGrad(makeNode(OpType::Einsum, { { "equation", std::string(eq) } }),
            { random(std::move(a)), random(std::move(b)) }, { true, true }, eq);
    };
    check2("bhid,bhjd->bhij", { 2, 2, 3, 4 }, { 2, 2, 5, 4 });
    check2("bij,jk->bik", { 2, 3, 4 }, { 4, 5 });
    check2("ij,jk->ki", { 3, 4 }, { 4, 2 });
    check2("i,j->ij", { 3 }, { 4 });
    check2("ij,ij->", { 3, 4 }, { 3, 4 });
    check2("ij,j->j", { 3, 4 }, { 4 });
    check2("bij,bjk", { 2, 3, 4 }, { 2, 4, 2 });
    // A broadcast dim of size 1 as graph/op_registry.h's explicitEinsumEquation writes it ("...ij,
    // ...jk->...ik" over (3, 2, 4) and (1, 4, 5)): its own letter, summed over its one value.
    check2("Aij,Cjk->Aik", { 3, 2, 4 }, { 1, 4, 5 });
    const auto check1 = [&](const char* eq, Shape a) {
        checkGrad(
            makeNode(OpType::Einsum, { { "equation", std::string(eq) } }), { random(std::move(a)) }, { true }, eq);
    };
    check1("ij->ji", { 3, 4 });
    check1("ijk->kj", { 2, 3, 4 });
    check1("ij->", { 3, 4 });
}

// The runtime releases the data of inputs a node's backward does not read (the op registry's saved
// inputs); each backward must then give the same gradients from shapes and saved values alone.
TEST_F(IndexKernelGrad, BackwardReadsOnlySavedInputs)
{
    struct Released
    {
        Node node;
        std::vector<NdArray> in;
        std::vector<bool> needGrad, release;
    };
    const std::vector<Released> cases {
        { makeNode(OpType::AvgPool, pool({ 3, 3 }, { 2, 2 }, { 1, 1, 1, 1 }, 1, 1)), { random({ 1, 2, 5, 5 }) },
            { true }, { true } },
        { makeNode(OpType::MaxPool, pool({ 2, 2 }, { 2, 2 }, { 0, 0, 0, 0 }, 1)), { distinct({ 1, 2, 5, 5 }) },
            { true }, { true } },
        { makeNode(OpType::Pad, { { "pads", Shape { 1, 2, 2, 0 } }, { "mode", std::string("reflect") } }),
            { random({ 3, 4 }) }, { true }, { true } },
        { makeNode(OpType::Resize, resize({ 4, 6 }, "linear", "half_pixel")), { random({ 1, 1, 3, 3 }) }, { true },
            { true } },
        { makeNode(OpType::Gather, { { "axis", std::int64_t { 1 } } }), { random({ 2, 4 }), ints({ 3 }, { 3, 0, 3 }) },
            { true, false }, { true, false } },
        { makeNode(OpType::ScatterND), { random({ 3, 2 }), ints({ 2, 1 }, { 2, 0 }), random({ 2, 2 }) },
            { true, false, true }, { true, false, true } },
        { makeNode(OpType::TopK), { distinct({ 2, 5 }), ints({ 1 }, { 3 }) }, { true, false }, { true, true } },
        { makeNode(OpType::Einsum, { { "equation", std::string("ij,jk->ik") } }),
            { random({ 2, 3 }), random({ 3, 4 }) }, { true, false }, { true, false } }, // dA reads B only
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(std::string(toString(c.node.op)));
        NodeValues full;
        const auto out = run(c.node, c.in, &full);
        std::vector<NdArray> gradOut;
        for (const auto& o : out)
            gradOut.push_back(o.dtype() == DType::F32 ? random(o.shape()) : NdArray());
        NodeValues released = full;
        for (std::size_t i = 0; i < c.in.size(); ++i) {
            if (c.release[i])
                released.in[i] = NdArray::shapeOnly(c.in[i].shape(), c.in[i].dtype());
        }
        for (auto& o : released.out)
            o = NdArray::shapeOnly(o.shape(), o.dtype());
        std::mt19937_64 rng(7);
        KernelContext ctx { m_alloc, rng, true };
        const auto expect = cpuBackend().backward(c.node, full, gradOut, c.needGrad, ctx);
        std::vector<NdArray> got;
        ASSERT_NO_THROW(got = cpuBackend().backward(c.node, released, gradOut, c.needGrad, ctx));
        for (std::size_t i = 0; i < c.in.size(); ++i) {
            ASSERT_EQ(got[i].defined(), expect[i].defined()) << "input " << i;
            if (expect[i].defined())
                expectValues(got[i], std::vector<double>(expect[i].f32(), expect[i].f32() + expect[i].numel()), 0,
                    "input " + std::to_string(i));
        }
    }
}
