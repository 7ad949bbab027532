// Every CPU kernel's backward against central finite differences of its forward, on small random
// inputs: L = sum(out * R) for a fixed random R, so dL/dout = R.
#include "backend.h"
#include "kernel_test_support.h"

#include <gtest/gtest.h>

#include <random>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::makeNode;

namespace {

class KernelGrad : public ps::engine::testing::KernelTest
{
protected:
    static Node node(OpType op, Attributes attrs = {})
    {
        return makeNode(op, std::move(attrs));
    }
};

} // namespace

TEST_F(KernelGrad, MatMulVariants)
{
    check({ node(OpType::MatMul), { random({ 2, 3, 4 }), random({ 4, 5 }) }, { true, true } });
    check({ node(OpType::MatMul, { { "trans_b", std::int64_t { 1 } } }),
        { random({ 2, 2, 3, 4 }), random({ 2, 2, 5, 4 }) }, { true, true } });
    check({ node(OpType::MatMul, { { "trans_b", std::int64_t { 1 } } }),
        { random({ 3, 4 }), random({ 5, 4 }), random({ 5 }) }, { true, true, true } });
    check({ node(OpType::MatMul), { random({ 2, 3, 4 }), random({ 1, 4, 2 }) }, { true, true } }); // broadcast batch
}

TEST_F(KernelGrad, BroadcastingBinaryOps)
{
    check({ node(OpType::BiasAdd), { random({ 2, 3, 4 }), random({ 4 }) }, { true, true } });
    check({ node(OpType::Add), { random({ 2, 3, 4 }), random({ 3, 4 }) }, { true, true } });
    check({ node(OpType::Sub), { random({ 2, 3, 4 }), random({ 2, 3, 1 }) }, { true, true } });
    check({ node(OpType::Mul), { random({ 2, 1, 4 }), random({ 3, 1 }) }, { true, true } });
    check({ node(OpType::Div), { random({ 2, 3 }), random({ 2, 3 }, 0.5F, 2.0F) }, { true, true } });
}

TEST_F(KernelGrad, Activations)
{
    check({ node(OpType::Scale, { { "scale", 0.125 } }), { random({ 3, 4 }) }, { true } });
    check({ node(OpType::Pow, { { "exponent", 2.0 } }), { random({ 3, 4 }) }, { true } });
    check({ node(OpType::Pow, { { "exponent", 3.0 } }), { random({ 3, 4 }) }, { true } });
    check({ node(OpType::Sqrt), { random({ 3, 4 }, 0.5F, 2.0F) }, { true } });
    check({ node(OpType::Reciprocal), { random({ 3, 4 }, 0.5F, 2.0F) }, { true } });
    check({ node(OpType::Erf), { random({ 3, 4 }) }, { true } });
    check({ node(OpType::Sin), { random({ 3, 4 }, -3.0F, 3.0F) }, { true } });
    check({ node(OpType::Cos), { random({ 3, 4 }, -3.0F, 3.0F) }, { true } });
    check({ node(OpType::Relu), { random({ 3, 4 }, 0.1F, 1.0F) }, { true } });
    check({ node(OpType::Tanh), { random({ 3, 4 }) }, { true } });
    check({ node(OpType::Gelu, { { "approximate", std::string("tanh") } }), { random({ 3, 4 }, -3.0F, 3.0F) },
        { true } });
    check({ node(OpType::Gelu), { random({ 3, 4 }, -3.0F, 3.0F) }, { true } });
    check({ node(OpType::ReduceMean, { { "axes", Shape { -1 } } }), { random({ 2, 3, 4 }) }, { true } });
    check({ node(OpType::ReduceMean, { { "axes", Shape { 0, 2 } }, { "keepdims", std::int64_t { 0 } } }),
        { random({ 2, 3, 4 }) }, { true } });
}

TEST_F(KernelGrad, NormalizationSoftmaxMaskDropoutLoss)
{
    check({ node(OpType::LayerNorm, { { "epsilon", 1e-5 } }), { random({ 2, 3, 8 }), random({ 8 }), random({ 8 }) },
        { true, true, true } });
    check({ node(OpType::RMSNorm, { { "epsilon", 1e-6 } }), { random({ 2, 3, 8 }), random({ 8 }) }, { true, true } });
    const auto groups = [](std::int64_t g) { return Attributes { { "groups", g }, { "epsilon", 1e-5 } }; };
    check({ node(OpType::GroupNorm, groups(2)), { random({ 2, 4, 3, 3 }), random({ 4 }), random({ 4 }) },
        { true, true, true } });
    check({ node(OpType::GroupNorm, groups(3)), { random({ 2, 3, 5 }) }, { true } }); // InstanceNorm, no affine
    check({ node(OpType::GroupNorm, groups(2)), { random({ 3, 6 }), random({ 6, 1 }) }, { true, true } });
    check({ node(OpType::Softmax), { random({ 2, 3, 5 }) }, { true } });
    check({ node(OpType::Mask, { { "causal", std::int64_t { 1 } } }), { random({ 2, 2, 4, 4 }) }, { true } });
    check({ node(OpType::Dropout, { { "p", 0.3 } }), { random({ 4, 6 }) }, { true } });
    check({ node(OpType::CrossEntropy), { random({ 2, 3, 7 }, -2.0F, 2.0F), ints({ 2, 3 }, 7) }, { true, false } });
    check({ node(OpType::Embedding), { ints({ 2, 5 }, 6), random({ 6, 4 }) }, { false, true } });
}

// Fused attention (engine/attention_kernel.h): q, k and v against finite differences, causal with
// fewer queries than keys, with a padding mask, and with dropout on the probabilities (each
// forward draws the same mask from the seeded generator).
TEST_F(KernelGrad, Attention)
{
    check({ node(OpType::Attention, { { "scale", 0.4 }, { "causal", std::int64_t { 1 } } }),
        { random({ 2, 2, 3, 4 }), random({ 2, 2, 5, 4 }), random({ 2, 2, 5, 3 }) }, { true, true, true } });
    auto pad = ints({ 2, 5 }, 2);
    pad.i64()[0] = 1; // every query sees a key
    pad.i64()[5] = 1;
    check({ node(OpType::Attention, { { "scale", 0.5 } }),
        { random({ 2, 2, 3, 4 }), random({ 2, 2, 5, 4 }), random({ 2, 2, 5, 4 }), pad }, { true, true, true, false } });
    check({ node(OpType::Attention, { { "scale", 0.5 }, { "dropout", 0.3 } }),
        { random({ 2, 2, 4, 4 }), random({ 2, 2, 4, 4 }), random({ 2, 2, 4, 4 }) }, { true, true, true } });
}

TEST_F(KernelGrad, LayoutOps)
{
    check({ node(OpType::Reshape, { { "shape", Shape { 4, -1 } } }), { random({ 2, 3, 4 }) }, { true } });
    check({ node(OpType::Transpose, { { "perm", Shape { 0, 2, 1, 3 } } }), { random({ 2, 3, 4, 2 }) }, { true } });
    check({ node(OpType::Transpose, { { "perm", Shape { 2, 0, 1 } } }), { random({ 2, 3, 4 }) }, { true } });
    check({ node(OpType::Split, { { "axis", std::int64_t { -1 } }, { "sizes", Shape { 2, 3, 1 } } }),
        { random({ 2, 3, 6 }) }, { true } });
    check({ node(OpType::Slice,
                { { "axis", std::int64_t { 1 } }, { "start", std::int64_t { 1 } }, { "end", std::int64_t { 3 } } }),
        { random({ 2, 4, 3 }) }, { true } });
    check({ node(OpType::Concat, { { "axis", std::int64_t { 1 } } }), { random({ 2, 1, 3 }), random({ 2, 4, 3 }) },
        { true, true } });
    check({ node(OpType::Select, { { "axis", std::int64_t { 1 } }, { "index", std::int64_t { 2 } } }),
        { random({ 2, 4, 3 }) }, { true } });
    check({ node(OpType::Expand, { { "shape", Shape { 3, 2, 4 } } }), { random({ 1, 2, 4 }) }, { true } });
}

TEST_F(KernelGrad, ConvolutionalOps)
{
    check({ node(OpType::Conv, { { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } }),
        { random({ 2, 3, 6, 5 }), random({ 4, 3, 3, 3 }), random({ 4 }) }, { true, true, true } });
    check({ node(OpType::Conv, { { "group", std::int64_t { 2 } }, { "dilations", Shape { 2, 1 } } }),
        { random({ 1, 4, 6, 6 }), random({ 6, 2, 2, 3 }) }, { true, true } });
    // ConvTranspose: stride, pads and output_padding; groups and dilation.
    check({ node(OpType::ConvTranspose,
                { { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 0, 1, 1 } },
                    { "output_padding", Shape { 1, 0 } } }),
        { random({ 2, 3, 3, 4 }), random({ 3, 2, 3, 3 }), random({ 2 }) }, { true, true, true } });
    check({ node(OpType::ConvTranspose, { { "group", std::int64_t { 2 } }, { "dilations", Shape { 1, 2 } } }),
        { random({ 1, 4, 3, 3 }), random({ 4, 3, 2, 2 }) }, { true, true } });
    auto bn = node(OpType::BatchNorm, { { "epsilon", 1e-5 } });
    check({ bn, { random({ 3, 2, 3, 3 }), random({ 2 }), random({ 2 }), random({ 2 }), random({ 2 }, 0.5F, 1.0F) },
        { true, true, true, false, false } });
    check({ node(OpType::MaxPool,
                { { "kernel", Shape { 3, 3 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } }),
        { random({ 2, 2, 5, 5 }) }, { true } });
    check({ node(OpType::GlobalAvgPool), { random({ 2, 3, 4, 4 }) }, { true } });
    // (After the pools: drawn last, so the max pool's inputs stay those it was checked on.) output_padding
    // at the stride, allowed below the dilation.
    check({ node(OpType::ConvTranspose, { { "dilations", Shape { 2, 2 } }, { "output_padding", Shape { 1, 1 } } }),
        { random({ 1, 2, 3, 4 }), random({ 2, 3, 3, 3 }) }, { true, true } });
}

// Over (N, C, D, H, W): strides, pads (begins, then ends), dilations and groups per axis; the
// pools and batch normalization over volumes (MaxPool3d's argmax: ConvMath's scatter test).
TEST_F(KernelGrad, ThreeDimensionalConvolutions)
{
    check({ node(OpType::Conv,
                { { "strides", Shape { 2, 1, 2 } }, { "pads", Shape { 1, 0, 1, 0, 1, 1 } },
                    { "dilations", Shape { 1, 2, 1 } } }),
        { random({ 2, 2, 4, 5, 4 }), random({ 3, 2, 2, 2, 3 }), random({ 3 }) }, { true, true, true } });
    check({ node(OpType::Conv, { { "group", std::int64_t { 2 } } }),
        { random({ 1, 4, 3, 3, 3 }), random({ 2, 2, 3, 1, 2 }) }, { true, true } });
    check({ node(OpType::ConvTranspose,
                { { "strides", Shape { 2, 2, 1 } }, { "pads", Shape { 1, 0, 0, 0, 1, 1 } },
                    { "output_padding", Shape { 1, 0, 0 } } }),
        { random({ 1, 2, 2, 3, 3 }), random({ 2, 2, 3, 2, 3 }), random({ 2 }) }, { true, true, true } });
    check({ node(OpType::GlobalAvgPool), { random({ 2, 3, 2, 3, 2 }) }, { true } });
    check({ node(OpType::AvgPool,
                { { "kernel", Shape { 2, 2, 3 } }, { "strides", Shape { 1, 2, 2 } },
                    { "pads", Shape { 0, 1, 1, 1, 0, 1 } } }),
        { random({ 1, 2, 3, 4, 5 }) }, { true } });
    auto bn = node(OpType::BatchNorm, { { "epsilon", 1e-5 } });
    check({ bn, { random({ 2, 2, 2, 2, 3 }), random({ 2 }), random({ 2 }), random({ 2 }), random({ 2 }, 0.5F, 1.0F) },
        { true, true, true, false, false } });
}

TEST(EngineAllocator, OutOfMemoryNamesTheNode)
{
    Allocator alloc("cpu", 4096);
    std::mt19937_64 rng(1);
    KernelContext ctx { alloc, rng, true };
    const auto a = NdArray::zeros(alloc, { 16, 16 }); // 1 KiB each
    const auto b = NdArray::zeros(alloc, { 16, 16 });
    EXPECT_EQ(alloc.current(), 2048);
    Node n;
    n.name = "h.0.attn.scores";
    n.op = OpType::MatMul;
    NodeValues first { { a, b }, {}, {} };
    cpuBackend().forward(n, first, ctx); // 3 KiB in use
    NodeValues second { { a, b }, {}, {} };
    cpuBackend().forward(n, second, ctx); // exactly the capacity
    EXPECT_EQ(alloc.peak(), 4096);
    n.name = "lm_head";
    NodeValues third { { a, b }, {}, {} };
    try {
        cpuBackend().forward(n, third, ctx);
        FAIL() << "expected out of memory";
    } catch (const OutOfMemoryError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("out of memory on cpu"), std::string::npos) << what;
        EXPECT_NE(what.find("node 'lm_head'"), std::string::npos) << what;
    }
    first = NodeValues(); // freeing gives the bytes back
    EXPECT_EQ(alloc.current(), 3072);
}
