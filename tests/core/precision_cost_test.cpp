// The precision setting and the per-class GPU cost model: every op class priced in the precision it
// should be, convolution algorithm classes, and torchvision's AlexNet on an A100 against a
// published trace (tests/data/published/alexnet_a100_forward.json: the measurement is the input,
// the tolerance the check).
#include "cluster/device_catalog.h"
#include "cost/profile.h"
#include "graph/graph_builder.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

using namespace ps;

namespace {

Attributes window(std::int64_t k, std::int64_t stride, std::int64_t pad)
{
    return { { "kernel", Shape { k, k } }, { "strides", Shape { stride, stride } },
        { "pads", Shape { pad, pad, pad, pad } } };
}

// torchvision.models.alexnet as torch.onnx.export writes it in eval mode (dropout removed): convs
// with biases, in-place ReLUs, max pools, the adaptive 6x6 average pool (a 1x1 window on 6x6),
// flatten and three linear layers with biases.
Graph alexnet(std::int64_t batch)
{
    GraphBuilder b(ModelInfo { "alexnet", "test", "{}", batch });
    auto x = b.input("input", { batch, 3, 224, 224 }, DType::F32);
    struct ConvSpec
    {
        std::int64_t out, in, k, stride, pad;
        bool pool;
    };
    const ConvSpec convs[] = { { 64, 3, 11, 4, 2, true }, { 192, 64, 5, 1, 2, true }, { 384, 192, 3, 1, 1, false },
        { 256, 384, 3, 1, 1, false }, { 256, 256, 3, 1, 1, true } };
    int i = 0;
    for (const auto& c : convs) {
        const auto name = "conv" + std::to_string(++i);
        x = b.op(OpType::Conv, name,
            { x, b.parameter(name + ".w", { c.out, c.in, c.k, c.k }), b.parameter(name + ".b", { c.out }) },
            { { "strides", Shape { c.stride, c.stride } }, { "pads", Shape { c.pad, c.pad, c.pad, c.pad } } });
        x = b.op(OpType::Relu, name + ".relu", { x });
        if (c.pool)
            x = b.op(OpType::MaxPool, name + ".pool", { x }, window(3, 2, 0));
    }
    x = b.op(OpType::AvgPool, "avgpool", { x }, window(1, 1, 0));
    x = b.op(OpType::Reshape, "flatten", { x }, { { "shape", Shape { batch, 256 * 6 * 6 } } });
    const std::int64_t widths[] = { 256 * 6 * 6, 4096, 4096, 1000 };
    for (int l = 0; l < 3; ++l) {
        const auto name = "fc" + std::to_string(l + 1);
        x = b.op(OpType::MatMul, name,
            { x, b.parameter(name + ".w", { widths[l], widths[l + 1] }), b.parameter(name + ".b", { widths[l + 1] }) });
        if (l < 2)
            x = b.op(OpType::Relu, name + ".relu", { x });
    }
    return b.finish({ x });
}

CostModelOptions with(Precision p)
{
    CostModelOptions o;
    o.setup.precision = p;
    return o;
}

// Forward ns of the kernels of class `kind` over the graph, and of the named nodes.
double classForward(const std::vector<std::vector<KernelTime>>& kernels, KernelClass kind)
{
    double t = 0;
    for (const auto& node : kernels) {
        for (const auto& k : node)
            t += k.kind == kind ? k.forwardNs : 0;
    }
    return t;
}

double nodeForward(
    const Graph& g, const std::vector<std::vector<KernelTime>>& kernels, const std::string& name, KernelClass kind)
{
    for (const auto& n : g.nodes()) {
        if (n.name == name) {
            double t = 0;
            for (const auto& k : kernels[n.id.index()])
                t += k.kind == kind ? k.forwardNs : 0;
            return t;
        }
    }
    ADD_FAILURE() << "no node " << name;
    return 0;
}

// One node of every op class the precision setting must reach, at micro-batch 8.
Graph everyClass()
{
    GraphBuilder b(ModelInfo { "classes", "test", "{}", 8 });
    const auto ids = b.input("ids", { 8, 512 }, DType::I64);
    const auto table = b.parameter("wte", { 32000, 1024 });
    auto h = b.op(OpType::Embedding, "embed", { ids, table });
    h = b.op(OpType::LayerNorm, "ln", { h, b.parameter("ln.g", { 1024 }), b.parameter("ln.b", { 1024 }) });
    const auto q = b.op(OpType::MatMul, "proj", { h, b.parameter("proj.w", { 1024, 1024 }) });
    const auto k = b.op(OpType::Transpose, "kt", { q }, { { "perm", Shape { 0, 2, 1 } } });
    const auto scores = b.op(OpType::MatMul, "scores", { q, k });
    const auto probs = b.op(OpType::Softmax, "softmax", { scores });
    auto act = b.op(OpType::Gelu, "gelu", { probs });
    const auto img = b.input("img", { 8, 64, 56, 56 }, DType::F32);
    const auto conv = b.op(
        OpType::Conv, "conv", { img, b.parameter("conv.w", { 64, 64, 3, 3 }) }, { { "pads", Shape { 1, 1, 1, 1 } } });
    return b.finish({ act, conv });
}

std::map<std::string, double> forwardByNode(const Graph& g, const DeviceSpec& d, Precision p)
{
    const auto kernels = estimateKernels(g, d, with(p), 8);
    std::map<std::string, double> t;
    for (const auto& n : g.nodes()) {
        for (const auto& k : kernels[n.id.index()])
            t[n.name] += k.forwardNs;
    }
    return t;
}

} // namespace

TEST(Precision, ParsesAndDescribesEverySetting)
{
    for (auto p : kPrecisions) {
        EXPECT_EQ(parsePrecision(toString(p)), p);
        EXPECT_FALSE(describePrecision(p).empty());
    }
    EXPECT_THROW((void)parsePrecision("fp8"), Error);
    EXPECT_EQ(matmulMathMode({ Precision::Fp32, Optimizer::Adam }), MathMode::Fp32);
    EXPECT_EQ(convMathMode({ Precision::Fp32, Optimizer::Adam }), MathMode::Tf32); // cuDNN's default
    EXPECT_EQ(matmulMathMode({ Precision::Tf32, Optimizer::Adam }), MathMode::Tf32);
    EXPECT_EQ(convMathMode({ Precision::Bf16, Optimizer::Adam }), MathMode::Bf16);
}

TEST(Precision, EveryOpClassIsPricedInIt)
{
    const auto g = everyClass();
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    const auto fp32 = forwardByNode(g, a100, Precision::Fp32);
    const auto tf32 = forwardByNode(g, a100, Precision::Tf32);
    const auto bf16 = forwardByNode(g, a100, Precision::Bf16);
    const auto fp16 = forwardByNode(g, a100, Precision::Fp16);
    // Matmuls: FP32 by default, TF32 when asked, half precision fastest.
    for (const char* n : { "proj", "scores" }) {
        EXPECT_GT(fp32.at(n), 2 * tf32.at(n)) << n;
        EXPECT_GT(tf32.at(n), bf16.at(n)) << n;
        EXPECT_DOUBLE_EQ(bf16.at(n), fp16.at(n)) << n; // one peak for both on an A100
    }
    // Convolutions run on TF32 already under PyTorch's default; half precision is faster.
    EXPECT_DOUBLE_EQ(fp32.at("conv"), tf32.at("conv"));
    // (the convolution kernel itself: autocast also casts this fp32 image input to half first)
    const auto convKernel = [&](Precision p) {
        return nodeForward(g, estimateKernels(g, a100, with(p), 8), "conv", KernelClass::Convolution);
    };
    EXPECT_GT(convKernel(Precision::Tf32), convKernel(Precision::Bf16));
    EXPECT_GT(bf16.at("conv"), convKernel(Precision::Bf16));
    // Memory-bound ops under autocast (cost/autocast.h): fewer bytes where their tensors are half
    // (kt transposes a GEMM's half output), the same where they stay fp32 (the embedding of an
    // fp32 table, LayerNorm, GELU of fp32 probabilities), more where an input is cast first
    // (softmax computes in fp32 from half scores).
    for (const char* n : { "embed", "ln", "softmax", "gelu", "kt" })
        EXPECT_DOUBLE_EQ(fp32.at(n), tf32.at(n)) << n;
    EXPECT_LT(bf16.at("kt"), 0.8 * fp32.at("kt"));
    for (const char* n : { "embed", "ln", "gelu" })
        EXPECT_DOUBLE_EQ(bf16.at(n), fp32.at(n)) << n;
    EXPECT_GT(bf16.at("softmax"), fp32.at("softmax"));
    // The optimizer step: FP32 master weights and states under mixed precision, half weights and
    // gradients read by forward and backward.
    EXPECT_EQ(bytesPerParameter({ Precision::Fp32, Optimizer::Adam }).weights, 4);
    EXPECT_EQ(bytesPerParameter({ Precision::Bf16, Optimizer::Adam }).weights, 2);
    EXPECT_EQ(bytesPerParameter({ Precision::Bf16, Optimizer::Adam }).masterWeights, 4);
    EXPECT_EQ(bytesPerParameter({ Precision::Tf32, Optimizer::Adam }).masterWeights, 0);
    // A device without TF32 (V100) runs tf32 at the FP32 rate.
    const auto& v100 = DeviceCatalog::builtin().find("v100-32gb");
    EXPECT_DOUBLE_EQ(
        forwardByNode(g, v100, Precision::Fp32).at("proj"), forwardByNode(g, v100, Precision::Tf32).at("proj"));
    // The profile the planners read carries the setting and its times.
    const auto p32 = estimateProfile(g, a100, with(Precision::Fp32));
    const auto p16 = estimateProfile(g, a100, with(Precision::Bf16));
    EXPECT_EQ(p16.setup.precision, Precision::Bf16);
    double t32 = 0;
    double t16 = 0;
    for (std::size_t i = 0; i < p32.nodes.size(); ++i) {
        t32 += p32.nodes[i].forwardNs.at(8) + p32.nodes[i].backwardNs.at(8);
        t16 += p16.nodes[i].forwardNs.at(8) + p16.nodes[i].backwardNs.at(8);
    }
    EXPECT_LT(t16, 0.5 * t32);
}

TEST(Precision, ConvolutionAlgorithmClasses)
{
    GraphBuilder b(ModelInfo { "convs", "test", "{}", 8 });
    const auto img = b.input("img", { 8, 3, 224, 224 }, DType::F32);
    const auto stem = b.op(OpType::Conv, "stem", { img, b.parameter("stem.w", { 64, 3, 7, 7 }) },
        { { "strides", Shape { 2, 2 } }, { "pads", Shape { 3, 3, 3, 3 } } });
    const auto body = b.op(
        OpType::Conv, "body", { stem, b.parameter("body.w", { 64, 64, 3, 3 }) }, { { "pads", Shape { 1, 1, 1, 1 } } });
    const auto dw = b.op(OpType::Conv, "dw", { body, b.parameter("dw.w", { 64, 1, 3, 3 }) },
        { { "pads", Shape { 1, 1, 1, 1 } }, { "group", std::int64_t { 64 } } });
    const auto g = b.finish({ dw });
    const auto& a100 = DeviceCatalog::builtin().find("a100-40gb");
    const auto& v100 = DeviceCatalog::builtin().find("v100-32gb");
    const auto algo = [&g](const DeviceSpec& d, Precision p, const std::string& name) {
        for (const auto& n : g.nodes()) {
            if (n.name == name)
                return convAlgorithm(g, n, d, with(p));
        }
        throw Error("no node " + name);
    };
    EXPECT_EQ(algo(a100, Precision::Fp32, "stem"), ConvAlgorithm::FewChannels);
    EXPECT_EQ(algo(a100, Precision::Fp32, "body"), ConvAlgorithm::ImplicitGemm); // TF32 tensor cores beat Winograd
    EXPECT_EQ(algo(v100, Precision::Fp32, "body"), ConvAlgorithm::Transform); // no TF32: Winograd on FP32 cores
    EXPECT_EQ(algo(v100, Precision::Fp16, "body"), ConvAlgorithm::ImplicitGemm);
    EXPECT_EQ(algo(a100, Precision::Fp32, "dw"), ConvAlgorithm::Grouped);
    // A 3-channel stem fills 3/8 of a half-precision tile: faster than FP32, far from the half peak.
    const auto fp32 = forwardByNode(g, a100, Precision::Fp32);
    const auto bf16 = forwardByNode(g, a100, Precision::Bf16);
    EXPECT_LT(bf16.at("stem"), fp32.at("stem"));
    const double stemFlops = 3.0 * 49; // multiply-adds per output element
    const double bodyFlops = 64.0 * 9;
    EXPECT_GT(bf16.at("stem") / stemFlops, 2 * bf16.at("body") / bodyFlops);
    // The CPU device runs the engine's im2col GEMM with its bias: one kernel per convolution.
    auto cpu = a100;
    cpu.id = "cpu";
    for (const auto& kernels : estimateKernels(g, cpu, with(Precision::Fp32), 8))
        EXPECT_LE(kernels.size(), 1u);
}

TEST(Precision, AlexNetOnA100MatchesThePublishedTrace)
{
    const auto path = std::filesystem::path(PS_TEST_DATA_DIR) / "published" / "alexnet_a100_forward.json";
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const auto m = nlohmann::json::parse(in);
    const auto batch = m["batch"].get<std::int64_t>();
    const auto g = alexnet(batch);
    const auto& device = DeviceCatalog::builtin().find(m["device"].get<std::string>());
    const auto options = with(parsePrecision(m["precision"].get<std::string>()));
    const auto kernels = estimateKernels(g, device, options, static_cast<double>(batch));
    double forward = 0;
    for (const auto& node : kernels) {
        for (const auto& k : node)
            forward += k.forwardNs;
    }
    const double measured = m["forward_ms"].get<double>() * 1e6;
    std::cout << "forward: predicted " << forward / 1e6 << " ms, measured " << measured / 1e6 << " ms\n";
    EXPECT_NEAR(forward / measured, 1.0, 0.25);
    const std::map<std::string, KernelClass> classes { { "convolution", KernelClass::Convolution },
        { "gemm", KernelClass::Gemm }, { "elementwise", KernelClass::Elementwise },
        { "pooling", KernelClass::Pooling } };
    for (const auto& [name, ms] : m["classes_ms"].items()) {
        const double predicted = classForward(kernels, classes.at(name));
        std::cout << name << ": predicted " << predicted / 1e6 << " ms, measured " << ms.get<double>() << " ms\n";
        EXPECT_NEAR(predicted / (ms.get<double>() * 1e6), 1.0, 0.35)
            << name << ": predicted " << predicted / 1e6 << " ms, measured " << ms.get<double>() << " ms";
    }
    // Linear layers: bf16 faster than tf32, tf32 faster than fp32.
    const auto linear = [&](Precision p) {
        return classForward(estimateKernels(g, device, with(p), static_cast<double>(batch)), KernelClass::Gemm);
    };
    EXPECT_LT(linear(Precision::Bf16), linear(Precision::Tf32));
    EXPECT_LT(linear(Precision::Tf32), linear(Precision::Fp32));
    // Per node, reported (the class totals are the check).
    for (const auto& [name, ms] : m["nodes_ms"].items()) {
        const auto kind = name.starts_with("conv") ? KernelClass::Convolution : KernelClass::Gemm;
        std::cout << name << ": predicted " << nodeForward(g, kernels, name, kind) / 1e6 << " ms, measured "
                  << ms.get<double>() << " ms\n";
    }
}
