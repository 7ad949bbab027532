// The CUDA backend's fused calls against the CPU's (issue P14's GPU checks, label `gpu`, skipped
// without a GPU): AdamW over many parameters in one launch, and a Linear's MatMul + bias (+ Gelu)
// through cuBLASLt's epilogues.
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "cuda_kernel_cases.h" // relativeError, upload
#include "kernel_test_support.h" // makeNode, RandomArrays
#include "pipeline_support.h" // noGpu

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace ps;
using namespace ps::engine;
using ps::engine::testing::makeNode;
using ps::engine::testing::noGpu;
using ps::engine::testing::relativeError;
using ps::engine::testing::upload;

// AdamW over 150 parameters of assorted sizes in one launch (its table copied to the GPU) gives the
// CPU's per-parameter steps, three steps in a row.
TEST(GpuSelfTest, FusedAdamWMatchesTheCpuSteps)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto& gpu = engine::cuda::cudaBackend(0);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    ps::engine::testing::RandomArrays make;
    struct Param
    {
        NdArray w, g, m, v;
    };
    std::vector<Param> cpu;
    std::vector<Param> dev;
    for (int k = 0; k < 150; ++k) {
        const Shape shape { 1 + (k * 37) % 300 };
        cpu.push_back(
            { make.random(shape), make.random(shape), make.random(shape, 0.0F, 0.1F), make.random(shape, 0.0F, 0.1F) });
        const auto& c = cpu.back();
        dev.push_back({ upload(gpu, gpuAlloc, c.w), upload(gpu, gpuAlloc, c.g), upload(gpu, gpuAlloc, c.m),
            upload(gpu, gpuAlloc, c.v) });
    }
    for (int step = 1; step <= 3; ++step) {
        const AdamWUpdate u { 1e-2F, 0.9F, 0.999F, 1e-8F, 0.01F, 0.5F, step };
        std::vector<Backend::AdamWSlot> slots;
        for (std::size_t k = 0; k < cpu.size(); ++k) {
            cpuBackend().adamw(cpu[k].w, cpu[k].g, cpu[k].m, cpu[k].v, u);
            slots.push_back({ &dev[k].w, &dev[k].g, &dev[k].m, &dev[k].v });
        }
        gpu.adamwAll(slots, u);
    }
    double worst = 0;
    for (std::size_t k = 0; k < cpu.size(); ++k) {
        worst = std::max(worst, relativeError(dev[k].w, cpu[k].w, gpu));
        worst = std::max(worst, relativeError(dev[k].v, cpu[k].v, gpu));
    }
    EXPECT_LT(worst, 1e-5);
    std::cout << "[ NOTE ] fused AdamW, 150 parameters, 3 steps: largest relative difference " << worst << "\n";
}

// MatMul + bias in one call (Backend::gemmBias, engine/fusion.h): cuBLASLt's bias epilogue, and
// with PS_CUBLASLT=0 the cuBLAS GEMM and the add, against the CPU's MatMul then add, in fp32, TF32
// and bf16 (operands cast), w (K, N) and (N, K) (trans_b), x of rank 2 and 3.
TEST(GpuSelfTest, GemmBiasEpilogueMatchesTheCpuKernels)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto& gpu = engine::cuda::cudaBackend(0);
    ASSERT_NE(gpu.kernels().gemmBias(), nullptr);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    ps::engine::testing::RandomArrays make;
    std::mt19937_64 rng(1);
    KernelContext cpuCtx { make.m_alloc, rng, true };
    struct Case
    {
        Shape x, w;
        bool transB;
    };
    for (const auto& c : { Case { { 2, 37, 64 }, { 64, 96 }, false }, Case { { 5, 33 }, { 40, 33 }, true },
             Case { { 4, 128, 768 }, { 768, 3072 }, false } }) {
        const auto node = makeNode(OpType::MatMul, { { "trans_b", std::int64_t { c.transB ? 1 : 0 } } });
        const auto x = make.random(c.x);
        const auto w = make.random(c.w);
        const auto bias = make.random({ c.transB ? c.w.front() : c.w.back() });
        const auto cpu = cpuBackend().forwardGemmBias(node, x, w, bias, cpuCtx);
        for (const auto& [precision, tolerance] : { std::pair { GemmPrecision::Fp32, 1e-5 },
                 std::pair { GemmPrecision::Tf32, 1e-2 }, std::pair { GemmPrecision::Bf16, 3e-2 } }) {
            for (const char* lt : { "1", "0" }) {
                ::setenv("PS_CUBLASLT", lt, 1);
                KernelContext gpuCtx { gpuAlloc, rng, true, precision };
                const auto before = engine::cuda::gemmBiasEpilogueCalls();
                const auto y = gpu.forwardGemmBias(
                    node, upload(gpu, gpuAlloc, x), upload(gpu, gpuAlloc, w), upload(gpu, gpuAlloc, bias), gpuCtx);
                ::unsetenv("PS_CUBLASLT");
                // cuBLASLt ran the epilogue where it is on (w is one matrix here), never where it is off.
                EXPECT_EQ(engine::cuda::gemmBiasEpilogueCalls() - before, std::string(lt) == "1" ? 1U : 0U)
                    << "PS_CUBLASLT=" << lt;
                ASSERT_EQ(y.shape(), cpu.shape());
                const auto error = relativeError(y, cpu, gpu);
                EXPECT_LT(error, tolerance) << formatShape(c.x) << " x " << formatShape(c.w) << " precision "
                                            << static_cast<int>(precision) << " PS_CUBLASLT=" << lt;
                std::cout << "[ NOTE ] gemm + bias " << formatShape(c.x) << " x " << formatShape(c.w) << " precision "
                          << static_cast<int>(precision) << " PS_CUBLASLT=" << lt << ": " << error << "\n";
            }
        }
    }
}

// MatMul + bias + Gelu (Backend::forwardGemmBiasGelu): cuBLASLt's GELU_AUX_BIAS epilogue where the
// Gelu is the tanh form and the width a multiple of 8, the GEMM + bias then the Gelu kernel
// otherwise (an exact Gelu, a width of 36, PS_CUBLASLT=0); the sum and the GELU of it against the
// CPU's, at each GEMM precision.
TEST(GpuSelfTest, GemmBiasGeluEpilogueMatchesTheCpuKernels)
{
    std::string why;
    if (noGpu(why))
        GTEST_SKIP() << "no CUDA device: " << why;
    const auto& gpu = engine::cuda::cudaBackend(0);
    ASSERT_NE(gpu.kernels().gemmBiasGelu(), nullptr);
    Allocator gpuAlloc("cuda:0", 0, gpu.memory());
    ps::engine::testing::RandomArrays make;
    std::mt19937_64 rng(1);
    KernelContext cpuCtx { make.m_alloc, rng, true };
    struct Case
    {
        Shape x, w;
        const char* approximate;
        bool epilogue; // with PS_CUBLASLT on
    };
    for (const auto& c :
        { Case { { 4, 128, 768 }, { 768, 3072 }, "tanh", true }, Case { { 2, 37, 64 }, { 64, 96 }, "tanh", true },
            Case { { 2, 37, 64 }, { 64, 36 }, "tanh", false }, Case { { 2, 37, 64 }, { 64, 96 }, "none", false } }) {
        const auto node = makeNode(OpType::MatMul, {});
        const auto gelu = makeNode(OpType::Gelu, { { "approximate", std::string(c.approximate) } });
        const auto x = make.random(c.x);
        const auto w = make.random(c.w, -0.1F, 0.1F);
        const auto bias = make.random({ c.w.back() });
        const auto cpu = cpuBackend().forwardGemmBiasGelu(node, gelu, x, w, bias, cpuCtx);
        for (const auto& [precision, tolerance] : { std::pair { GemmPrecision::Fp32, 1e-4 },
                 std::pair { GemmPrecision::Tf32, 1e-2 }, std::pair { GemmPrecision::Bf16, 3e-2 } }) {
            for (const char* lt : { "1", "0" }) {
                ::setenv("PS_CUBLASLT", lt, 1);
                KernelContext gpuCtx { gpuAlloc, rng, true, precision };
                const auto before = engine::cuda::gemmBiasGeluEpilogueCalls();
                const auto y = gpu.forwardGemmBiasGelu(node, gelu, upload(gpu, gpuAlloc, x), upload(gpu, gpuAlloc, w),
                    upload(gpu, gpuAlloc, bias), gpuCtx);
                ::unsetenv("PS_CUBLASLT");
                const auto label = formatShape(c.x) + " x " + formatShape(c.w) + " " + c.approximate + " precision "
                    + std::to_string(static_cast<int>(precision)) + " PS_CUBLASLT=" + lt;
                EXPECT_EQ(
                    engine::cuda::gemmBiasGeluEpilogueCalls() - before, c.epilogue && std::string(lt) == "1" ? 1U : 0U)
                    << label;
                ASSERT_EQ(y.sum.shape(), cpu.sum.shape());
                ASSERT_EQ(y.activated.shape(), cpu.activated.shape());
                const auto sumError = relativeError(y.sum, cpu.sum, gpu);
                const auto geluError = relativeError(y.activated, cpu.activated, gpu);
                EXPECT_LT(sumError, tolerance) << label;
                EXPECT_LT(geluError, tolerance) << label;
                std::cout << "[ NOTE ] gemm + bias + gelu " << label << ": sum " << sumError << ", gelu " << geluError
                          << "\n";
            }
        }
    }
}
