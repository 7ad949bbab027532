// Every CUDA kernel, op by op, against the CPU kernel on the same inputs (issue P14's GPU checks):
// forward outputs, what forward changes in place (BatchNorm's running statistics) and every input
// gradient, each on random inputs of awkward sizes (strides, pads, groups, broadcasts). Labelled
// `gpu`: skips where no GPU can be used, runs in tests/gpu/run_all.sh. A case names the op, so a
// failure on a GPU machine points at one kernel. CudaKernels.EveryCudaKernelHasAGpuCase needs no GPU:
// a kernel added without a case here fails it.
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "cuda_kernel_cases.h" // OpCase and the order, index and Einsum cases
#include "graph/graph_builder.h"
#include "kernel_test_support.h" // makeNode
#include "pipeline_support.h"
#include "runtime/training_run.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <set>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::makeNode;
using ps::engine::testing::noGpu;
using ps::engine::testing::relativeError;
using ps::engine::testing::upload;

namespace {

using ps::engine::testing::OpCase;

// Seeded random host inputs and the cases over them.
class CaseMaker : public ps::engine::testing::RandomArrays
{
public:
    NdArray values(Shape shape, const std::vector<std::int64_t>& v)
    {
        auto a = NdArray::empty(m_alloc, std::move(shape), DType::I64);
        std::copy(v.begin(), v.end(), a.i64());
        return a;
    }

    static Node node(OpType op, Attributes attrs)
    {
        return makeNode(op, std::move(attrs));
    }

    std::vector<OpCase> cases()
    {
        const Attributes none;
        std::vector<OpCase> c;
        const auto add = [&](OpType op, Attributes attrs, std::vector<NdArray> in, std::vector<bool> diff,
                             double tol = 1e-5) {
            c.push_back({ node(op, std::move(attrs)), std::move(in), diff, tol });
        };
        add(OpType::MatMul, none, { random({ 2, 33, 17 }), random({ 17, 9 }) }, { true, true }, 1e-4);
        add(OpType::MatMul, { { "trans_b", std::int64_t { 1 } } }, { random({ 2, 3, 5, 8 }), random({ 2, 3, 7, 8 }) },
            { true, true }, 1e-4);
        add(OpType::MatMul, none, { random({ 3, 4, 6 }), random({ 1, 6, 5 }) }, { true, true }, 1e-4);
        add(OpType::Add, none, { random({ 2, 3, 4 }), random({ 3, 1 }) }, { true, true });
        add(OpType::BiasAdd, none, { random({ 5, 6 }), random({ 6 }) }, { true, true });
        add(OpType::BiasAdd, none, { random({ 3, 40, 30 }), random({ 30 }) }, { true, true }); // chunked sums
        add(OpType::Add, none, { random({ 2, 3, 4, 5 }), random({ 3, 1, 5 }) }, { true, true });
        add(OpType::Sub, none, { random({ 2, 3, 4 }), random({ 2, 1, 4 }) }, { true, true });
        add(OpType::Mul, none, { random({ 2, 1, 4 }), random({ 3, 1 }) }, { true, true });
        add(OpType::Div, none, { random({ 4, 3 }), random({ 3 }, 0.5F, 2.0F) }, { true, true });
        // The fast walks: same shapes, and a row vector first or second over more than a tile of columns.
        add(OpType::Add, none, { random({ 3, 5, 7 }), random({ 3, 5, 7 }) }, { true, true });
        add(OpType::Sub, none, { random({ 300 }), random({ 4, 3, 300 }) }, { true, true });
        add(OpType::Div, none, { random({ 70, 3, 300 }), random({ 300 }, 0.5F, 2.0F) }, { true, true });
        add(OpType::Mul, none, { random({ 1, 300 }), random({ 5, 300 }) }, { true, true });
        add(OpType::Scale, { { "scale", 0.125 } }, { random({ 3, 7 }) }, { true });
        add(OpType::Relu, none, { random({ 3, 7 }) }, { true });
        add(OpType::Tanh, none, { random({ 3, 7 }) }, { true });
        add(OpType::Gelu, { { "approximate", std::string("tanh") } }, { random({ 3, 7 }, -4.0F, 4.0F) }, { true });
        add(OpType::Gelu, none, { random({ 3, 7 }, -4.0F, 4.0F) }, { true });
        add(OpType::Sigmoid, none, { random({ 4, 9 }, -30.0F, 30.0F) }, { true });
        add(OpType::HardSigmoid, { { "alpha", 0.3 }, { "beta", 0.4 } }, { random({ 4, 9 }, -4.0F, 4.0F) }, { true });
        add(OpType::HardSwish, none, { random({ 4, 9 }, -5.0F, 5.0F) }, { true });
        add(OpType::LeakyRelu, { { "alpha", 0.2 } }, { random({ 4, 9 }) }, { true });
        add(OpType::Clip, { { "min", -0.5 }, { "max", 0.25 } }, { random({ 4, 9 }) }, { true });
        add(OpType::Exp, none, { random({ 4, 9 }, -3.0F, 3.0F) }, { true });
        add(OpType::Log, none, { random({ 4, 9 }, 0.1F, 4.0F) }, { true });
        add(OpType::Neg, none, { random({ 4, 9 }) }, { true });
        add(OpType::Abs, none, { random({ 4, 9 }) }, { true });
        add(OpType::Sqrt, none, { random({ 4, 9 }, 0.1F, 4.0F) }, { true });
        add(OpType::Reciprocal, none, { random({ 4, 9 }, 0.5F, 4.0F) }, { true });
        add(OpType::Sin, none, { random({ 4, 9 }, -3.0F, 3.0F) }, { true });
        add(OpType::Cos, none, { random({ 4, 9 }, -3.0F, 3.0F) }, { true });
        add(OpType::Erf, none, { random({ 4, 9 }, -3.0F, 3.0F) }, { true });
        add(OpType::Pow, { { "exponent", 3.0 } }, { random({ 4, 9 }) }, { true });
        add(OpType::Expand, { { "shape", Shape { 3, 1, 4 } } }, { random({ 2, 1 }) }, { true });
        add(OpType::ReduceMean, { { "axes", Shape { 2, 3 } } }, { random({ 2, 3, 5, 4 }) }, { true });
        add(OpType::ReduceMean, { { "axes", Shape { -1 } }, { "keepdims", std::int64_t { 0 } } }, { random({ 3, 7 }) },
            { true });
        add(OpType::Gather, { { "axis", std::int64_t { 1 } } },
            { random({ 2, 5, 3 }), values({ 2, 2 }, { 4, -1, 0, 4 }) },
            { true, false }); // a repeated index and one from the end
        add(OpType::Gather, none, { ints({ 6, 2 }, 50), values({ 3 }, { 5, 0, -2 }) }, { false, false });
        add(OpType::GatherElements, { { "axis", std::int64_t { 1 } } },
            { random({ 2, 5, 3 }),
                values({ 2, 4, 3 },
                    { -5, 2, -1, -4, 3, 0, -3, 4, 1, -2, -5, 2, -1, -4, 3, 0, -3, 4, 1, -2, -5, 2, -1, -4 }) },
            { true, false }); // repeated and negative indices, fewer rows than the data
        add(OpType::GatherElements, { { "axis", std::int64_t { -1 } } },
            { ints({ 2, 6 }, 50), values({ 2, 2 }, { 5, 0, -6, 2 }) }, { false, false });
        add(OpType::GatherND, none, { random({ 4, 3, 2 }), values({ 5, 1 }, { 1, 3, 1, 0, -1 }) }, { true, false });
        add(OpType::GatherND, { { "batch_dims", std::int64_t { 1 } } },
            { random({ 2, 3, 4 }), values({ 2, 2, 2 }, { 0, 1, 2, 3, 1, 1, 1, 1 }) }, { true, false });
        add(OpType::Where, none, { ints({ 3, 1 }, 2), random({ 3, 4 }), random({ 4 }) }, { false, true, true });
        add(OpType::Where, none, { random({ 2, 3 }), ints({ 2, 3 }, 9), ints({ 1 }, 9) }, { false, false, false });
        add(OpType::Cast, { { "to", std::string("f32") } }, { random({ 3, 4 }) }, { true });
        add(OpType::Cast, { { "to", std::string("i64") } }, { random({ 3, 4 }, -50.0F, 50.0F) }, { false });
        add(OpType::Cast, { { "to", std::string("bool") } }, { ints({ 3, 4 }, 3) }, { false });
        add(OpType::Cast, { { "to", std::string("f32") } }, { ints({ 3, 4 }, 100) }, { false });
        add(OpType::Resize, { { "sizes", Shape { 7, 9 } }, { "mode", std::string("linear") } },
            { random({ 2, 3, 4, 5 }) }, { true });
        add(OpType::Resize,
            { { "sizes", Shape { 8, 3 } }, { "coordinate_transformation_mode", std::string("asymmetric") },
                { "nearest_mode", std::string("floor") } },
            { random({ 1, 2, 4, 6 }) }, { true });
        // The table's gradient sums each id's rows in the CPU's token order: equal bit for bit.
        constexpr double kExact = std::numeric_limits<double>::min();
        add(OpType::Embedding, none, { ints({ 3, 5 }, 11), random({ 11, 8 }) }, { false, true }, kExact);
        add(OpType::Embedding, none, { ints({ 64, 40 }, 5), random({ 5, 24 }) }, { false, true },
            kExact); // long runs of one id
        add(OpType::LayerNorm, { { "epsilon", 1e-5 } }, { random({ 3, 5, 40 }), random({ 40 }), random({ 40 }) },
            { true, true, true }, 1e-4);
        add(OpType::LayerNorm, { { "epsilon", 1e-5 } }, { random({ 4, 25, 40 }), random({ 40 }), random({ 40 }) },
            { true, true, true }, 1e-4);
        add(OpType::RMSNorm, { { "epsilon", 1e-6 } }, { random({ 3, 5, 40 }), random({ 40 }) }, { true, true }, 1e-4);
        add(OpType::GroupNorm, { { "groups", std::int64_t { 4 } }, { "epsilon", 1e-5 } },
            { random({ 3, 8, 5, 7 }), random({ 8 }), random({ 8 }) }, { true, true, true }, 1e-4);
        add(OpType::GroupNorm, { { "groups", std::int64_t { 6 } } }, { random({ 2, 6, 50 }) }, { true }, 1e-4);
        add(OpType::Softmax, none, { random({ 2, 3, 37 }, -5.0F, 5.0F) }, { true }, 1e-4);
        add(OpType::Mask, { { "causal", std::int64_t { 1 } } }, { random({ 2, 2, 6, 6 }) }, { true });
        add(OpType::Mask, { { "causal", std::int64_t { 1 } } }, // padding, fewer queries than keys
            { random({ 2, 3, 4, 6 }), values({ 2, 6 }, { 1, 1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1 }) }, { true, false });
        add(OpType::Dropout, { { "p", 0.3 } }, { random({ 6, 50 }) }, { true });
        add(OpType::CrossEntropy, none, { random({ 2, 3, 45 }, -3.0F, 3.0F), ints({ 2, 3 }, 45) }, { true, false },
            1e-4);
        add(OpType::Reshape, { { "shape", Shape { 4, -1 } } }, { random({ 2, 3, 4 }) }, { true });
        add(OpType::Transpose, { { "perm", Shape { 0, 2, 1, 3 } } }, { random({ 2, 3, 4, 5 }) }, { true });
        add(OpType::Split, { { "axis", std::int64_t { -1 } }, { "sizes", Shape { 2, 3, 1 } } }, { random({ 2, 3, 6 }) },
            { true });
        add(OpType::Slice,
            { { "axis", std::int64_t { 1 } }, { "start", std::int64_t { 1 } }, { "end", std::int64_t { 3 } } },
            { random({ 2, 4, 3 }) }, { true });
        add(OpType::Select, { { "axis", std::int64_t { 1 } }, { "index", std::int64_t { 2 } } },
            { random({ 2, 4, 3 }) }, { true });
        add(OpType::Trilu, { { "upper", std::int64_t { 0 } }, { "k", std::int64_t { 1 } } }, { random({ 2, 5, 4 }) },
            { true });
        add(OpType::Trilu, none, { ints({ 3, 6 }, 9) }, { false });
        add(OpType::Concat, { { "axis", std::int64_t { 1 } } }, { random({ 2, 1, 3 }), random({ 2, 4, 3 }) },
            { true, true });
        add(OpType::Pad, { { "pads", Shape { 0, 1, 2, 0, 0, 2 } }, { "value", 0.5 } }, { random({ 2, 3, 4 }) },
            { true });
        add(OpType::Pad, { { "pads", Shape { 0, 0, 2, 1, 0, 0, 1, 3 } }, { "mode", std::string("reflect") } },
            { random({ 1, 2, 4, 5 }) }, { true });
        add(OpType::Pad, { { "pads", Shape { 0, 0, 1, 2, 0, 0, 2, 1 } }, { "mode", std::string("edge") } },
            { random({ 1, 2, 3, 3 }) }, { true });
        // AmoebaNet's factorized reduction: the first row and column cropped, a zero row and column added.
        add(OpType::Pad, { { "pads", Shape { 0, 0, -1, -1, 0, 0, 1, 1 } } }, { random({ 2, 3, 5, 6 }) }, { true });
        add(OpType::Conv, { { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } },
            { random({ 3, 3, 11, 10 }), random({ 8, 3, 3, 3 }), random({ 8 }) }, { true, true, true }, 1e-4);
        add(OpType::Conv, { { "group", std::int64_t { 2 } }, { "dilations", Shape { 2, 1 } } },
            { random({ 2, 4, 9, 9 }), random({ 6, 2, 2, 3 }) }, { true, true }, 1e-4);
        add(OpType::Conv, { { "group", std::int64_t { 8 } } }, { random({ 2, 8, 7, 7 }), random({ 8, 1, 3, 3 }) },
            { true, true }, 1e-4); // depthwise
        add(OpType::ConvTranspose,
            { { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 0, 1, 1 } }, { "output_padding", Shape { 1, 0 } } },
            { random({ 2, 3, 5, 6 }), random({ 3, 4, 3, 3 }), random({ 4 }) }, { true, true, true }, 1e-4);
        add(OpType::ConvTranspose, // output_padding at the stride, allowed below the dilation
            { { "dilations", Shape { 2, 2 } }, { "output_padding", Shape { 1, 1 } } },
            { random({ 1, 2, 4, 5 }), random({ 2, 3, 3, 3 }) }, { true, true }, 1e-4);
        add(OpType::ConvTranspose, { { "group", std::int64_t { 2 } }, { "dilations", Shape { 1, 2 } } },
            { random({ 2, 4, 5, 5 }), random({ 4, 3, 2, 2 }) }, { true, true }, 1e-4);
        add(OpType::Conv, // 3-D: the im2col path (cuDNN takes 2-D windows only)
            { { "strides", Shape { 2, 1, 2 } }, { "pads", Shape { 1, 0, 1, 0, 1, 1 } },
                { "dilations", Shape { 1, 2, 1 } } },
            { random({ 2, 3, 5, 6, 5 }), random({ 4, 3, 2, 2, 3 }), random({ 4 }) }, { true, true, true }, 1e-4);
        add(OpType::ConvTranspose,
            { { "strides", Shape { 2, 2, 1 } }, { "pads", Shape { 1, 0, 0, 0, 1, 1 } },
                { "output_padding", Shape { 1, 0, 0 } }, { "group", std::int64_t { 2 } } },
            { random({ 2, 4, 3, 3, 4 }), random({ 4, 2, 3, 2, 3 }), random({ 4 }) }, { true, true, true }, 1e-4);
        add(OpType::BatchNorm, { { "epsilon", 1e-5 }, { "momentum", 0.9 } },
            { random({ 4, 5, 6, 7 }), random({ 5 }), random({ 5 }), random({ 5 }), random({ 5 }, 0.5F, 1.5F) },
            { true, true, true, false, false }, 1e-4);
        add(OpType::BatchNorm, { { "epsilon", 1e-3 }, { "momentum", 0.8 } }, // BatchNorm1d over (N, C, L)
            { random({ 3, 4, 9 }), random({ 4 }), random({ 4 }), random({ 4 }), random({ 4 }, 0.5F, 1.5F) },
            { true, true, true, false, false }, 1e-4);
        add(OpType::BatchNorm, { { "epsilon", 1e-5 }, { "momentum", 0.9 } }, // (N, C): a classifier head's
            { random({ 8, 6 }), random({ 6 }), random({ 6 }), random({ 6 }), random({ 6 }, 0.5F, 1.5F) },
            { true, true, true, false, false }, 1e-4);
        add(OpType::MaxPool,
            { { "kernel", Shape { 3, 3 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } },
                { "ceil_mode", std::int64_t { 1 } } },
            { random({ 2, 3, 10, 9 }) }, { true });
        add(OpType::AvgPool,
            { { "kernel", Shape { 3, 2 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } },
                { "count_include_pad", std::int64_t { 1 } } },
            { random({ 2, 3, 10, 9 }) }, { true });
        add(OpType::GlobalAvgPool, none, { random({ 2, 6, 7, 5 }) }, { true });
        add(OpType::GlobalAvgPool, none, { random({ 2, 3, 3, 4, 5 }) }, { true }); // over volumes
        add(OpType::MaxPool,
            { { "kernel", Shape { 2, 3, 3 } }, { "strides", Shape { 2, 2, 1 } }, { "pads", Shape { 1, 1, 0, 0, 1, 1 } },
                { "ceil_mode", std::int64_t { 1 } } },
            { random({ 2, 3, 5, 7, 6 }) }, { true });
        add(OpType::AvgPool,
            { { "kernel", Shape { 3, 3, 2 } }, { "strides", Shape { 2, 2, 2 } }, { "pads", Shape { 1, 1, 1, 1, 0, 1 } },
                { "count_include_pad", std::int64_t { 1 } } },
            { random({ 2, 3, 6, 7, 5 }) }, { true });
        // Attention (engine/attention_kernel.h): causal with fewer queries than keys and a value
        // width apart from the head size; a padding mask of i64 entries.
        add(OpType::Attention, { { "scale", 0.35 }, { "causal", std::int64_t { 1 } } },
            { random({ 2, 3, 5, 8 }), random({ 2, 3, 7, 8 }), random({ 2, 3, 7, 4 }) }, { true, true, true }, 1e-4);
        add(OpType::Attention, { { "scale", 0.5 }, { "causal", std::int64_t { 0 } } },
            { random({ 2, 3, 5, 8 }), random({ 2, 3, 5, 8 }), random({ 2, 3, 5, 8 }),
                values({ 2, 5 }, { 1, 1, 1, 0, 1, 1, 1, 1, 1, 0 }) },
            { true, true, true, false }, 1e-4);
        add(OpType::Attention, { { "scale", 0.35 }, { "causal", std::int64_t { 1 } }, { "dropout", 0.2 } },
            { random({ 2, 2, 6, 8 }), random({ 2, 2, 6, 8 }), random({ 2, 2, 6, 8 }) }, { true, true, true }, 1e-4);
        ps::engine::testing::addOrderCases(*this, c);
        return c;
    }
};

// A small CNN with every CNN kernel in one graph: a strided, padded stem with BatchNorm and
// max pooling, a depthwise convolution with HardSwish, a squeeze-and-excitation gate (global
// average, 1x1 convolutions, Sigmoid), average pooling, and a classifier with cross-entropy.
Graph smallCnn()
{
    GraphBuilder b(ModelInfo { "small-cnn", "test", "{}", 4 });
    const auto x = b.input("image", { 4, 3, 20, 20 }, DType::F32);
    const auto labels = b.input("labels", { 4 }, DType::I64);
    const auto conv = [&](const std::string& name, TensorId in, Shape w, Attributes attrs) {
        return b.op(OpType::Conv, name, { in, b.parameter(name + ".w", w), b.parameter(name + ".b", { w[0] }) },
            std::move(attrs));
    };
    auto h = conv("stem", x, { 8, 3, 3, 3 }, { { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } });
    h = b.op(OpType::BatchNorm, "stem.bn",
        { h, b.parameter("stem.bn.g", { 8 }), b.parameter("stem.bn.b", { 8 }),
            b.constant("stem.bn.mean", { 8 }, std::vector<float>(8, 0.0F)),
            b.constant("stem.bn.var", { 8 }, std::vector<float>(8, 1.0F)) });
    h = b.op(OpType::Relu, "stem.relu", { h });
    h = b.op(OpType::MaxPool, "pool", { h },
        { { "kernel", Shape { 3, 3 } }, { "strides", Shape { 2, 2 } }, { "pads", Shape { 1, 1, 1, 1 } } });
    h = conv("dw", h, { 8, 1, 3, 3 }, { { "group", std::int64_t { 8 } }, { "pads", Shape { 1, 1, 1, 1 } } });
    h = b.op(OpType::HardSwish, "dw.act", { h });
    auto gate = b.op(OpType::GlobalAvgPool, "se.squeeze", { h });
    gate = b.op(OpType::Relu, "se.relu", { conv("se.reduce", gate, { 4, 8, 1, 1 }, {}) });
    gate = b.op(OpType::Sigmoid, "se.gate", { conv("se.expand", gate, { 8, 4, 1, 1 }, {}) });
    h = b.op(OpType::Mul, "se.scale", { h, gate });
    h = b.op(OpType::AvgPool, "avg", { h }, { { "kernel", Shape { 2, 2 } }, { "strides", Shape { 2, 2 } } });
    h = b.op(OpType::Reshape, "flatten", { h }, { { "shape", Shape { 4, -1 } } });
    h = b.op(OpType::MatMul, "fc", { h, b.parameter("fc.w", { b.shape(h)[1], 10 }) });
    h = b.op(OpType::BiasAdd, "fc.bias", { h, b.parameter("fc.b", { 10 }) });
    const auto loss = b.op(OpType::CrossEntropy, "loss", { h, labels });
    return b.finish({ loss });
}

std::vector<double> trainCnn(const std::string& devices, int steps)
{
    const auto graph = smallCnn();
    RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 1, 2);
    c.partition = ps::engine::testing::evenCuts(graph, 1);
    c.optimizer.kind = "adamw";
    c.optimizer.lr = 1e-3;
    c.seed = 5;
    TrainingRun run(graph, TokenData::random(2, 1 << 12, 3), makeDevices(devices, 0), c);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s)
        losses.push_back(run.step().loss);
    return losses;
}

} // namespace

// Needs no GPU, only a build with CUDA: every op with a CUDA kernel has a case below.
TEST(CudaKernels, EveryCudaKernelHasAGpuCase)
{
    const auto ops = engine::cuda::cudaKernelOps();
    if (ops.empty())
        GTEST_SKIP() << "built without CUDA";
    std::set<OpType> covered;
    for (const auto& c : CaseMaker().cases())
        covered.insert(c.node.op);
    for (const auto op : ops)
        EXPECT_TRUE(covered.contains(op)) << toString(op) << " has a CUDA kernel and no case in cuda_kernels_test.cpp";
}

// Needs no GPU: each case runs on the CPU backend (forward and backward), so a failure of the GPU
// check is the GPU kernel's, not the case's.
TEST(CudaKernels, EveryGpuCaseRunsOnTheCpu)
{
    CaseMaker make;
    for (auto& c : make.cases()) {
        SCOPED_TRACE(c.node.name);
        NodeValues v;
        v.in = c.inputs;
        std::mt19937_64 rng(7);
        KernelContext ctx { make.m_alloc, rng, true };
        ASSERT_NO_THROW(cpuBackend().forward(c.node, v, ctx));
        std::vector<NdArray> dy;
        for (const auto& o : v.out)
            dy.push_back(o.dtype() == DType::F32 ? make.random(o.shape()) : NdArray());
        std::vector<NdArray> grads;
        ASSERT_NO_THROW(grads = cpuBackend().backward(c.node, v, dy, c.differentiable, ctx));
        for (std::size_t k = 0; k < c.differentiable.size(); ++k)
            EXPECT_EQ(grads[k].defined(), static_cast<bool>(c.differentiable[k])) << "input " << k;
    }
}

namespace {

// One case on both backends: forward outputs, in-place updates and input gradients.
void expectGpuMatchesCpu(const OpCase& c, CaseMaker& make, const Backend& gpu, Allocator& gpuAlloc)
{
    SCOPED_TRACE(c.node.name);
    NodeValues cpuValues;
    NodeValues gpuValues;
    for (const auto& in : c.inputs) {
        cpuValues.in.push_back(in.clone());
        gpuValues.in.push_back(upload(gpu, gpuAlloc, in));
    }
    std::mt19937_64 cpuRng(7);
    std::mt19937_64 gpuRng(7);
    KernelContext cpuCtx { make.m_alloc, cpuRng, true };
    KernelContext gpuCtx { gpuAlloc, gpuRng, true };
    cpuBackend().forward(c.node, cpuValues, cpuCtx);
    gpu.forward(c.node, gpuValues, gpuCtx);
    ASSERT_EQ(gpuValues.out.size(), cpuValues.out.size());
    double worst = 0;
    for (std::size_t k = 0; k < cpuValues.out.size(); ++k) {
        ASSERT_EQ(gpuValues.out[k].shape(), cpuValues.out[k].shape()) << "output " << k;
        ASSERT_EQ(gpuValues.out[k].dtype(), cpuValues.out[k].dtype()) << "output " << k;
        worst = std::max(worst, relativeError(gpuValues.out[k], cpuValues.out[k], gpu));
    }
    for (std::size_t k = 0; k < cpuValues.in.size(); ++k) // in place: BatchNorm's running statistics
        worst = std::max(worst, relativeError(gpuValues.in[k], cpuValues.in[k], gpu));
    EXPECT_LT(worst, c.tolerance) << "forward";
    std::vector<NdArray> cpuDy;
    std::vector<NdArray> gpuDy;
    for (const auto& o : cpuValues.out) {
        cpuDy.push_back(o.dtype() == DType::F32 ? make.random(o.shape()) : NdArray());
        gpuDy.push_back(cpuDy.back().defined() ? upload(gpu, gpuAlloc, cpuDy.back()) : NdArray());
    }
    const auto cpuGrads = cpuBackend().backward(c.node, cpuValues, cpuDy, c.differentiable, cpuCtx);
    const auto gpuGrads = gpu.backward(c.node, gpuValues, gpuDy, c.differentiable, gpuCtx);
    double worstGrad = 0;
    for (std::size_t k = 0; k < c.differentiable.size(); ++k) {
        if (!c.differentiable[k])
            continue;
        ASSERT_TRUE(gpuGrads[k].defined()) << "input " << k;
        ASSERT_EQ(gpuGrads[k].shape(), cpuGrads[k].shape()) << "input " << k;
        worstGrad = std::max(worstGrad, relativeError(gpuGrads[k], cpuGrads[k], gpu));
    }
    EXPECT_LT(worstGrad, c.tolerance) << "backward";
    std::cout << "[ NOTE ] " << toString(c.node.op) << ": forward " << worst << ", backward " << worstGrad << "\n";
}

} // namespace

// Conv and training-mode BatchNorm run through cuDNN where cuDNN is found (Conv: symmetric pads,
// fp32): the engine's own paths are checked by ConvAndBatchNormWithoutCudnnMatchTheCpuKernels.
TEST(GpuSelfTest, EveryCudaKernelMatchesTheCpuKernel)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto& gpu = engine::cuda::cudaBackend(0);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    CaseMaker make;
    for (const auto& c : make.cases())
        expectGpuMatchesCpu(c, make, gpu, gpuAlloc);
}

// PS_CUDNN=0: every Conv case on the im2col + cuBLAS path, every BatchNorm case on the engine's
// own reduction kernels.
TEST(GpuSelfTest, ConvAndBatchNormWithoutCudnnMatchTheCpuKernels)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto& gpu = engine::cuda::cudaBackend(0);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    CaseMaker make;
    ::setenv("PS_CUDNN", "0", 1);
    for (const auto& c : make.cases()) {
        if (c.node.op == OpType::Conv || c.node.op == OpType::ConvTranspose || c.node.op == OpType::BatchNorm)
            expectGpuMatchesCpu(c, make, gpu, gpuAlloc);
    }
    ::unsetenv("PS_CUDNN");
}

// The CNN kernels together, trained: 10 AdamW steps of a small CNN (BatchNorm in training mode,
// its running statistics moving) on cuda:0 give the CPU's losses.
TEST(GpuSelfTest, TenCnnStepsMatchTheCpuBackend)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto cpu = trainCnn("cpu", 10);
    const auto gpu = trainCnn("cuda:0", 10);
    for (std::size_t i = 0; i < cpu.size(); ++i)
        EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::abs(cpu[i])) << "step " << i + 1;
    std::cout << "[ NOTE ] CNN step 10 loss: cpu " << cpu.back() << ", cuda:0 " << gpu.back() << "\n";
}

// Needs no GPU: the CNN the GPU check trains is a valid graph that trains on the CPU (so a GPU
// failure is the GPU's), and all its ops have CUDA kernels where CUDA is built.
TEST(CudaKernels, TheCheckedCnnTrainsOnTheCpu)
{
    const auto losses = trainCnn("cpu", 3);
    for (const double l : losses)
        EXPECT_TRUE(std::isfinite(l)) << l;
    const auto ops = engine::cuda::cudaKernelOps();
    for (const auto& node : smallCnn().nodes())
        EXPECT_TRUE(ops.empty() || std::find(ops.begin(), ops.end(), node.op) != ops.end()) << node.name;
}

// The fused Scale -> Mask -> Softmax kernel (engine/fusion.h) against the CPU's, forward and
// backward: causal rows in registers, an odd row length with an i64 padding mask, f32 padding,
// no mask, and rows of 1,500 keys (the three-pass kernel) with fewer queries than keys.
TEST(GpuSelfTest, FusedMaskedSoftmaxMatchesTheCpuKernel)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto& gpu = engine::cuda::cudaBackend(0);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    Allocator hostAlloc("cpu", 0, cpuBackend().memory());
    std::mt19937_64 rng(1);
    KernelContext cpuCtx { hostAlloc, rng, true };
    KernelContext gpuCtx { gpuAlloc, rng, true };
    CaseMaker make;
    struct Case
    {
        Shape shape;
        bool causal;
        int padding; // 0 none, 1 i64, 2 f32
    };
    for (const auto& c : { Case { { 2, 3, 64, 64 }, true, 0 }, Case { { 2, 2, 5, 37 }, false, 1 },
             Case { { 3, 4, 9, 9 }, true, 2 }, Case { { 4, 33 }, false, 0 }, Case { { 1, 2, 3, 1500 }, true, 1 } }) {
        const auto x = make.random(c.shape);
        const auto dy = make.random(c.shape);
        const auto batches = c.shape.size() > 2 ? c.shape[0] : 1;
        const auto tk = c.shape.back();
        NdArray padding;
        if (c.padding != 0) {
            std::vector<std::int64_t> keep(static_cast<std::size_t>(batches * tk));
            for (std::size_t i = 0; i < keep.size(); ++i)
                keep[i] = (i % 5 == 3) ? 0 : 1;
            padding = make.values({ batches, tk }, keep);
            if (c.padding == 2) {
                auto f = NdArray::empty(hostAlloc, { batches, tk });
                for (std::size_t i = 0; i < keep.size(); ++i)
                    f.f32()[i] = static_cast<float>(keep[i]);
                padding = f;
            }
        }
        MaskedSoftmaxArgs cpuArgs { 0.125F, c.causal, padding };
        MaskedSoftmaxArgs gpuArgs { 0.125F, c.causal, padding.defined() ? upload(gpu, gpuAlloc, padding) : NdArray() };
        const auto& cpuK = cpuBackend().kernels().maskedSoftmax();
        const auto& gpuK = gpu.kernels().maskedSoftmax();
        ASSERT_NE(gpuK.forward, nullptr);
        const auto y = cpuK.forward(x, cpuArgs, cpuCtx);
        const auto gy = gpuK.forward(upload(gpu, gpuAlloc, x), gpuArgs, gpuCtx);
        const auto dx = cpuK.backward(y, dy, cpuArgs, cpuCtx);
        const auto gdx = gpuK.backward(gy, upload(gpu, gpuAlloc, dy), gpuArgs, gpuCtx);
        const auto what = formatShape(c.shape) + (c.causal ? " causal" : "") + " padding " + std::to_string(c.padding);
        EXPECT_LT(relativeError(gy, y, gpu), 1e-5) << what;
        EXPECT_LT(relativeError(gdx, dx, gpu), 1e-5) << what;
    }
}
