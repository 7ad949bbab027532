// The CUDA backend against the CPU backend (issue P14's GPU checks). Labelled `gpu`: they skip
// where no GPU can be used and run in tests/gpu/run_all.sh on a GPU machine. What they check: a
// GPT's forward loss and every parameter gradient (all the ops of the transformer zoo models),
// 20 training steps' losses on one GPU against the CPU's (fp32, 1e-4 relative), and 1F1B over two
// virtual stage devices of one GPU against that GPU alone.
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "executor.h"
#include "gemm_pitch.h"
#include "kernel_test_support.h" // makeNode, RandomArrays
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

Graph smallGpt(int layers, double dropout)
{
    auto c = zooPreset("gpt2-tiny");
    c.layers = layers;
    c.hidden = 128;
    c.heads = 4;
    c.seq = 64;
    c.microBatch = 4;
    c.dropout = dropout;
    return buildZooModel(c);
}

RunConfig config(const Graph& graph, const std::string& schedule, int stages)
{
    RunConfig c;
    c.schedule = parseScheduleSpec(schedule, stages, 4);
    c.partition = evenCuts(graph, stages);
    c.optimizer.kind = "adamw";
    c.optimizer.lr = 1e-3;
    c.seed = 5;
    return c;
}

std::vector<double> trainLosses(const Graph& graph, const RunConfig& c, const std::string& devices, int steps)
{
    TrainingRun run(graph, TokenData::random(256, 1 << 16, 11), makeDevices(devices, 0), c);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s)
        losses.push_back(run.step().loss);
    return losses;
}

} // namespace

// Every op of every zoo model (GPT-2, BERT, T5, the MLP, ResNet, AmoebaNet) has a CUDA kernel, so a zoo model is
// never refused by the CUDA backend. Needs no GPU, only a build with CUDA.
TEST(CudaKernels, CoverEveryZooModelsOps)
{
    const auto ops = engine::cuda::cudaKernelOps();
    if (ops.empty())
        GTEST_SKIP() << "built without CUDA";
    for (const auto& name : zooModelNames()) {
        auto c = zooPreset(name);
        // The op set does not depend on depth (a ResNet's is one of five: the smallest; AmoebaNet's
        // normal cells come in threes).
        c.layers = c.family == ModelFamily::ResNet ? 18
            : c.family == ModelFamily::AmoebaNet   ? 3
                                                   : std::min<std::int64_t>(c.layers, 2);
        const auto graph = buildZooModel(c);
        for (const auto& node : graph.nodes())
            EXPECT_NE(std::find(ops.begin(), ops.end(), node.op), ops.end())
                << name << ": node '" << node.name << "' (" << toString(node.op) << ") has no CUDA kernel";
    }
    for (const auto op : ops) // each has a forward and a backward (KernelTable::add requires both)
        EXPECT_TRUE(cpuBackend().supports(op)) << toString(op) << " has no CPU kernel to check it against";
}

// Every op the CPU backend trains has a CUDA kernel as well, so no imported model the CPU runs is
// refused on a GPU for want of one. Needs no GPU, only a build with CUDA.
TEST(CudaKernels, EveryCpuOpHasACudaKernel)
{
    const auto ops = engine::cuda::cudaKernelOps();
    if (ops.empty())
        GTEST_SKIP() << "built without CUDA";
    int cpuOps = 0;
    for (const auto& info : allOpTypes()) {
        if (!cpuBackend().supports(info.type))
            continue;
        ++cpuOps;
        EXPECT_NE(std::find(ops.begin(), ops.end(), info.type), ops.end()) << info.name << " has no CUDA kernel";
    }
    EXPECT_GT(cpuOps, 60);
}

TEST(GpuSelfTest, GptForwardAndGradientsMatchTheCpuBackend)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    for (const double dropout : { 0.0, 0.1 }) {
        const auto graph = smallGpt(2, dropout);
        GraphExecutor cpu(graph, ExecutorOptions { 3, 0, true });
        GraphExecutor gpu(graph, ExecutorOptions { 3, 0, true }, engine::cuda::cudaBackend(0));
        for (const auto& name : cpu.inputNames()) {
            const auto& t = *std::find_if(
                graph.tensors().begin(), graph.tensors().end(), [&](const Tensor& x) { return x.name == name; });
            std::vector<std::int64_t> ids(static_cast<std::size_t>(numElements(t.shape)));
            for (std::size_t i = 0; i < ids.size(); ++i)
                ids[i] = static_cast<std::int64_t>((i * 131 + 7) % 256);
            const auto bytes = std::as_bytes(std::span(ids));
            cpu.setInput(name, cpu.backend().fromHost(cpu.allocator(), t.shape, DType::I64, bytes));
            gpu.setInput(name, gpu.backend().fromHost(gpu.allocator(), t.shape, DType::I64, bytes));
        }
        const float want = cpu.forward();
        const float got = gpu.forward();
        EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "dropout " << dropout;
        cpu.backward();
        gpu.backward();
        double worst = 0;
        std::string worstName;
        for (auto id : cpu.parameterIds()) {
            const auto a = asFloats(gpu.backend().toHost(gpu.gradient(id)));
            const auto b = asFloats(cpu.backend().toHost(cpu.gradient(id)));
            const auto rel = relativeL2(a, b);
            if (rel > worst) {
                worst = rel;
                worstName = graph.tensor(id).name;
            }
        }
        std::cout << "[ NOTE ] dropout " << dropout << ": loss cpu " << want << " cuda " << got
                  << "; largest relative gradient difference " << worst << " (" << worstName << ")\n";
        EXPECT_LT(worst, 1e-4) << worstName;
    }
}

TEST(GpuSelfTest, TwentyGptStepsMatchTheCpuBackend)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto graph = smallGpt(4, 0.0);
    const auto c = config(graph, "1f1b", 1);
    const auto cpu = trainLosses(graph, c, "cpu", 20);
    const auto gpu = trainLosses(graph, c, "cuda:0", 20);
    for (std::size_t i = 0; i < cpu.size(); ++i)
        EXPECT_NEAR(gpu[i], cpu[i], 1e-4 * std::abs(cpu[i])) << "step " << i + 1;
    std::cout << "[ NOTE ] step 20 loss: cpu " << cpu.back() << ", cuda:0 " << gpu.back() << "\n";
}

// TF32 GEMMs (10-bit mantissa inputs) and bf16 GEMMs (8-bit mantissa inputs), both accumulating
// in fp32, train like fp32 to about 1e-2 and 3e-2 of the loss over 10 steps.
TEST(GpuSelfTest, ReducedPrecisionGemmsTrainCloseToFp32)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto graph = smallGpt(4, 0.0);
    auto c = config(graph, "1f1b", 1);
    const auto fp32 = trainLosses(graph, c, "cuda:0", 10);
    for (const auto& [precision, tolerance] :
        { std::pair { GemmPrecision::Tf32, 1e-2 }, std::pair { GemmPrecision::Bf16, 3e-2 } }) {
        c.gemm = precision;
        const auto got = trainLosses(graph, c, "cuda:0", 10);
        const auto* name = precision == GemmPrecision::Tf32 ? "tf32" : "bf16";
        for (std::size_t i = 0; i < fp32.size(); ++i)
            EXPECT_NEAR(got[i], fp32[i], tolerance * std::abs(fp32[i])) << name << " step " << i + 1;
        std::cout << "[ NOTE ] step 10 loss: fp32 " << fp32.back() << ", " << name << " " << got.back() << "\n";
    }
}

// Two runs of one configuration on a GPU give the same losses bit for bit: no kernel of a GPT's
// step (dropout on, two virtual stage devices) sums in an order that changes from run to run. The
// embedding gradient did (an atomicAdd per token), and AdamW grew those last-bit differences to
// 3e-4 of the loss in 8 steps (seen on an H100).
TEST(GpuSelfTest, TrainingOnAGpuIsRepeatable)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto graph = smallGpt(4, 0.1);
    const auto c = config(graph, "1f1b", 2);
    const auto first = trainLosses(graph, c, "cuda:0x2", 6);
    const auto second = trainLosses(graph, c, "cuda:0x2", 6);
    for (std::size_t i = 0; i < first.size(); ++i)
        EXPECT_EQ(first[i], second[i]) << "step " << i + 1;
}

TEST(GpuSelfTest, OneFOneBOnTwoVirtualDevicesMatchesOneGpu)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto graph = smallGpt(4, 0.1);
    const auto one = trainLosses(graph, config(graph, "1f1b", 1), "cuda:0", 10);
    auto two = config(graph, "1f1b", 2);
    const auto split = trainLosses(graph, two, "cuda:0x2", 10);
    for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_NEAR(split[i], one[i], 1e-4 * std::abs(one[i])) << "step " << i + 1;
    two.memory = swapAndRecompute(graph, two.partition);
    const auto planned = trainLosses(graph, two, "cuda:0x2", 10);
    for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_NEAR(planned[i], one[i], 1e-4 * std::abs(one[i])) << "with swap and recompute, step " << i + 1;
}

// Two real GPUs, a worker each, activations and gradients sent GPU to GPU (peer copies where the
// GPUs allow them, staged through the host where not): 1F1B and GPipe, and 1F1B with swap and
// recompute, against one GPU's losses. Skips on a machine with one GPU.
TEST(GpuSelfTest, PipelinesOnTwoGpusMatchOneGpu)
{
    const auto probe = engine::cuda::probeGpus();
    if (probe.devices.size() < 2)
        GTEST_SKIP() << "needs two GPUs, found " << probe.devices.size() << ": " << probe.status;
    const auto graph = smallGpt(4, 0.1);
    const auto one = trainLosses(graph, config(graph, "1f1b", 1), "cuda:0", 10);
    for (const char* schedule : { "1f1b", "gpipe" }) {
        const auto split = trainLosses(graph, config(graph, schedule, 2), "cuda:0,cuda:1", 10);
        for (std::size_t i = 0; i < one.size(); ++i)
            EXPECT_NEAR(split[i], one[i], 1e-4 * std::abs(one[i])) << schedule << ", step " << i + 1;
    }
    auto planned = config(graph, "1f1b", 2);
    planned.memory = swapAndRecompute(graph, planned.partition);
    const auto swapped = trainLosses(graph, planned, "cuda:0,cuda:1", 10);
    for (std::size_t i = 0; i < one.size(); ++i)
        EXPECT_NEAR(swapped[i], one[i], 1e-4 * std::abs(one[i])) << "with swap and recompute, step " << i + 1;
}

namespace {

NdArray toDevice(const Backend& gpu, Allocator& alloc, const NdArray& host)
{
    return gpu.fromHost(
        alloc, host.shape(), DType::F32, std::as_bytes(std::span(host.f32(), static_cast<std::size_t>(host.numel()))));
}

// Largest |gpu - cpu| over the largest |cpu|; infinite where the shapes differ or one side is NaN.
double relativeMax(const Backend& gpu, const NdArray& got, const NdArray& want)
{
    if (got.shape() != want.shape())
        return std::numeric_limits<double>::infinity();
    const auto a = asFloats(gpu.toHost(got));
    double worst = 0;
    double scale = 1e-3;
    for (std::int64_t i = 0; i < want.numel(); ++i) {
        const double d = std::abs(static_cast<double>(a[static_cast<std::size_t>(i)]) - want.f32()[i]);
        if (std::isnan(d))
            return std::numeric_limits<double>::infinity();
        worst = std::max(worst, d);
        scale = std::max(scale, std::abs(static_cast<double>(want.f32()[i])));
    }
    return worst / scale;
}

} // namespace

// A GEMM whose rows of N = 513 columns would start off 16-byte boundaries runs at an aligned pitch
// (gemm_pitch.h: the LM head of a 50257-token vocabulary): forward and both gradients match the CPU
// kernels in every precision, with the pitch in one chunk or seven, and without (PS_GEMM_PITCH=0),
// with trans_b and without.
TEST(GpuSelfTest, GemmsAtAnAlignedPitchMatchTheCpuKernels)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    ASSERT_EQ(gemmRowPitch(2048, 513, true), 520); // the cases below take the pitched path
    const auto& gpu = engine::cuda::cudaBackend(0);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    RandomArrays make;
    for (const bool transB : { true, false }) {
        const auto node = makeNode(OpType::MatMul, { { "trans_b", std::int64_t { transB ? 1 : 0 } } });
        NodeValues cpu;
        cpu.in = { make.random({ 2, 1024, 64 }), make.random(transB ? Shape { 513, 64 } : Shape { 64, 513 }) };
        std::mt19937_64 rng(3);
        KernelContext cpuCtx { make.m_alloc, rng, true };
        cpuBackend().forward(node, cpu, cpuCtx);
        const auto dy = make.random(cpu.out[0].shape());
        const auto want = cpuBackend().backward(node, cpu, { dy }, { true, true }, cpuCtx);
        for (const auto& [precision, tolerance] : { std::pair { GemmPrecision::Fp32, 1e-5 },
                 std::pair { GemmPrecision::Tf32, 1e-2 }, std::pair { GemmPrecision::Bf16, 3e-2 } }) {
            for (const char* pitch : { "1", "0", "chunks" }) {
                ::setenv("PS_GEMM_PITCH", pitch, 1);
                if (std::string(pitch) == "chunks") // seven chunks of rows, the last one short
                    ::setenv("PS_GEMM_PITCH_ROWS", "300", 1);
                NodeValues v;
                v.in = { toDevice(gpu, gpuAlloc, cpu.in[0]), toDevice(gpu, gpuAlloc, cpu.in[1]) };
                KernelContext ctx { gpuAlloc, rng, true, precision };
                gpu.forward(node, v, ctx);
                const auto grads = gpu.backward(node, v, { toDevice(gpu, gpuAlloc, dy) }, { true, true }, ctx);
                ::unsetenv("PS_GEMM_PITCH");
                ::unsetenv("PS_GEMM_PITCH_ROWS");
                const auto what = std::string(transB ? "trans_b" : "plain") + " precision "
                    + std::to_string(static_cast<int>(precision)) + " PS_GEMM_PITCH=" + pitch;
                const double errors[3] = { relativeMax(gpu, v.out[0], cpu.out[0]), relativeMax(gpu, grads[0], want[0]),
                    relativeMax(gpu, grads[1], want[1]) };
                for (const double e : errors)
                    EXPECT_LT(e, tolerance) << what;
                std::cout << "[ NOTE ] " << what << ": y " << errors[0] << ", dA " << errors[1] << ", dB " << errors[2]
                          << "\n";
            }
        }
    }
}
