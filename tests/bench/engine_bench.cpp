// GEMM on a CPU device's share of cores: OpenBLAS's own threads against the device's GemmTeam
// (one single-threaded OpenBLAS call per core), alone and with two devices' workers calling at
// once, as a 2-device pipeline does. Shapes are a 4-layer, 256-wide GPT's at sequence 256 and
// micro-batch 4 (1024 token rows): QKV projection, MLP up and down, one attention head's scores.
// Then a Linear with a bias on the CPU backend (one device on every core): MatMul then BiasAdd
// against the fused GEMM + bias of engine/fusion.h (the bias added in place).
// Last, one thread's GEMM side by side: OpenBLAS (whatever kernels it runs in this process) against
// the engine's packed AVX-512 kernels (cpu/packed_gemm.h), forward and both backward layouts.
// And gradient accumulation: the backend's former scalar loop against its vector loop.
//   build/ci/tests/bench/engine_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only
#include "cpu/cpu_backend.h"
#include "cpu/gemm_team.h"
#include "cpu/packed_gemm.h"
#include "cpu/thread_affinity.h"

#include <benchmark/benchmark.h>

#include <cblas.h>
#include <thread>
#include <vector>

using namespace ps::engine;

namespace {

struct Shape
{
    std::int64_t m, n, k;
};
constexpr Shape kShapes[] = { { 1024, 768, 256 }, { 1024, 1024, 256 }, { 1024, 256, 1024 }, { 256, 256, 64 } };

struct Buffers
{
    std::vector<float> a, b, c;
    explicit Buffers(const Shape& s)
        : a(static_cast<std::size_t>(s.m * s.k), 0.5F)
        , b(static_cast<std::size_t>(s.k * s.n), 0.25F)
        , c(static_cast<std::size_t>(s.m * s.n))
    {
    }
    // engine::sgemm: the engine's kernels, on the calling thread's team where it has one.
    void run(const Shape& s)
    {
        sgemm(false, false, s.m, s.n, s.k, 1.0F, a.data(), s.k, b.data(), s.n, 0.0F, c.data(), s.n);
    }
    // OpenBLAS itself, on its own threads, whatever kernels the engine would choose.
    void runOpenBlas(const Shape& s)
    {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
            static_cast<int>(s.k), 1.0F, a.data(), static_cast<int>(s.k), b.data(), static_cast<int>(s.n), 0.0F,
            c.data(), static_cast<int>(s.n));
    }
};

double flops(const Shape& s)
{
    return 2.0 * static_cast<double>(s.m * s.n * s.k);
}

// One device on every core: OpenBLAS with that many threads.
void BM_OneDeviceOpenBlasThreads(benchmark::State& state)
{
    const auto& s = kShapes[state.range(0)];
    const auto cores = allowedCores();
    openblas_set_num_threads(static_cast<int>(cores.size()));
    Buffers buf(s);
    for (auto _ : state)
        buf.runOpenBlas(s);
    state.counters["GFLOP/s"] = benchmark::Counter(flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// One device on every core: its team, the engine's GEMM single-threaded in each member.
void BM_OneDeviceTeam(benchmark::State& state)
{
    const auto& s = kShapes[state.range(0)];
    openblas_set_num_threads(1);
    GemmTeam team(allowedCores());
    const GemmTeamScope scope(&team);
    Buffers buf(s);
    for (auto _ : state)
        buf.run(s);
    state.counters["GFLOP/s"] = benchmark::Counter(flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Two devices, each on half the cores, both computing at once (a pipeline's steady state). `team`
// 0: each worker calls OpenBLAS with its share of threads (the process-wide pool); 1: teams, the
// engine's GEMM single-threaded in each member.
void twoDevices(benchmark::State& state, bool teams)
{
    const auto& s = kShapes[state.range(0)];
    const auto cores = allowedCores();
    const auto half = std::max<std::size_t>(1, cores.size() / 2);
    openblas_set_num_threads(teams ? 1 : static_cast<int>(half));
    constexpr int kPerIteration = 4;
    for (auto _ : state) {
        std::vector<std::thread> workers;
        for (std::size_t d = 0; d < 2; ++d) {
            workers.emplace_back([&, d] {
                std::vector<int> mine;
                for (std::size_t c = 0; c < half; ++c)
                    mine.push_back(cores[(d * half + c) % cores.size()]);
                pinCurrentThread(mine);
                std::unique_ptr<GemmTeam> team = teams ? std::make_unique<GemmTeam>(mine) : nullptr;
                const GemmTeamScope scope(team.get());
                Buffers buf(s);
                for (int i = 0; i < kPerIteration; ++i) {
                    if (teams)
                        buf.run(s);
                    else
                        buf.runOpenBlas(s);
                }
            });
        }
        for (auto& w : workers)
            w.join();
    }
    state.counters["GFLOP/s"] =
        benchmark::Counter(2 * kPerIteration * flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TwoDevicesOpenBlasThreads(benchmark::State& state)
{
    twoDevices(state, false);
}

void BM_TwoDevicesTeams(benchmark::State& state)
{
    twoDevices(state, true);
}

// A Linear (x (rows, k) w (k, n) + bias) on the CPU backend: `fused` 0 runs the MatMul and
// BiasAdd kernels, 1 Backend::forwardGemmBias.
void linear(benchmark::State& state, bool fused)
{
    const auto& s = kShapes[state.range(0)];
    const auto cores = allowedCores();
    openblas_set_num_threads(1);
    GemmTeam team(cores);
    const GemmTeamScope scope(&team);
    const auto& cpu = cpuBackend();
    Allocator alloc("cpu", 0, cpu.memory());
    const auto filled = [&](ps::Shape shape, float v) {
        auto a = NdArray::empty(alloc, std::move(shape));
        std::fill(a.f32(), a.f32() + a.numel(), v);
        return a;
    };
    const auto x = filled({ s.m, s.k }, 0.5F);
    const auto w = filled({ s.k, s.n }, 0.25F);
    const auto bias = filled({ s.n }, 0.125F);
    ps::Node matmul;
    matmul.name = "matmul";
    matmul.op = ps::OpType::MatMul;
    ps::Node add;
    add.name = "bias_add";
    add.op = ps::OpType::BiasAdd;
    std::mt19937_64 rng(1);
    KernelContext ctx { alloc, rng, true };
    for (auto _ : state) {
        if (fused) {
            benchmark::DoNotOptimize(cpu.forwardGemmBias(matmul, x, w, bias, ctx));
        } else {
            NodeValues mv { { x, w }, {}, {} };
            cpu.forward(matmul, mv, ctx);
            NodeValues av { { mv.out[0], bias }, {}, {} };
            mv = NodeValues(); // the product goes as the add finishes, as in a step
            cpu.forward(add, av, ctx);
            benchmark::DoNotOptimize(av.out[0]);
        }
    }
    state.counters["GFLOP/s"] = benchmark::Counter(flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_LinearMatMulThenBiasAdd(benchmark::State& state)
{
    linear(state, false);
}

void BM_LinearGemmBiasFused(benchmark::State& state)
{
    linear(state, true);
}

// One product on one thread: OpenBLAS's kernels against the packed ones, for the forward layout
// (A B) and the two backward ones (A B^T for the input gradient, A^T B for the weight gradient).
struct Layout
{
    bool transA, transB;
};
constexpr Layout kLayouts[] = { { false, false }, { false, true }, { true, false } };

void oneThreadGemm(benchmark::State& state, bool packed)
{
    const auto& s = kShapes[state.range(0)];
    const auto& layout = kLayouts[state.range(1)];
    if (packed && !packedGemmAvailable()) {
        state.SkipWithError("this CPU has no AVX-512");
        return;
    }
    openblas_set_num_threads(1);
    Buffers buffers(s);
    const auto lda = layout.transA ? s.m : s.k;
    const auto ldb = layout.transB ? s.k : s.n;
    for (auto _ : state) {
        if (packed)
            packedSgemm(layout.transA, layout.transB, s.m, s.n, s.k, 1.0F, buffers.a.data(), lda, buffers.b.data(), ldb,
                0.0F, buffers.c.data(), s.n);
        else
            cblas_sgemm(CblasRowMajor, layout.transA ? CblasTrans : CblasNoTrans,
                layout.transB ? CblasTrans : CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                static_cast<int>(s.k), 1.0F, buffers.a.data(), static_cast<int>(lda), buffers.b.data(),
                static_cast<int>(ldb), 0.0F, buffers.c.data(), static_cast<int>(s.n));
        benchmark::DoNotOptimize(buffers.c.data());
    }
    state.counters["GFLOP/s"] = benchmark::Counter(flops(s) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_GemmOneThreadOpenBlas(benchmark::State& state)
{
    oneThreadGemm(state, false);
}

void BM_GemmOneThreadPacked(benchmark::State& state)
{
    oneThreadGemm(state, true);
}

// Gradient accumulation on one thread (a micro-batch's parameter gradient added into the one held
// since the optimizer step, Backend::accumulate): the scalar loop the CPU backend ran until
// 2026-11-29, compiled here as cpu_backend.cpp is, against the backend's vector loop. Sizes: a
// 384 x 384 weight, GPT-2 small's 768 x 3072 MLP weight.
constexpr std::int64_t kAccumulateSizes[] = { 384 * 384, 768 * 3072 };

void accumulate(benchmark::State& state, bool backend)
{
    const auto n = kAccumulateSizes[state.range(0)];
    auto& cpu = cpuBackend();
    Allocator allocator("cpu", 0, cpu.memory());
    auto dst = NdArray::zeros(allocator, { n });
    auto src = NdArray::zeros(allocator, { n });
    cpu.fill(src, 1e-3F);
    for (auto _ : state) {
        if (backend) {
            cpu.accumulate(dst, src);
        } else {
            float* d = dst.f32();
            const float* x = src.f32();
            for (std::int64_t i = 0; i < n; ++i)
                d[i] += x[i];
        }
        benchmark::DoNotOptimize(dst.f32());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * n * 3 * static_cast<std::int64_t>(sizeof(float)));
}

void BM_AccumulateScalarLoop(benchmark::State& state)
{
    accumulate(state, false);
}

void BM_AccumulateBackend(benchmark::State& state)
{
    accumulate(state, true);
}

} // namespace

BENCHMARK(BM_LinearMatMulThenBiasAdd)->DenseRange(0, 2)->UseRealTime();
BENCHMARK(BM_LinearGemmBiasFused)->DenseRange(0, 2)->UseRealTime();
BENCHMARK(BM_OneDeviceOpenBlasThreads)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_OneDeviceTeam)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_TwoDevicesOpenBlasThreads)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_TwoDevicesTeams)->DenseRange(0, 3)->UseRealTime();
BENCHMARK(BM_GemmOneThreadOpenBlas)->ArgsProduct({ { 0, 1, 2, 3 }, { 0, 1, 2 } });
BENCHMARK(BM_GemmOneThreadPacked)->ArgsProduct({ { 0, 1, 2, 3 }, { 0, 1, 2 } });
BENCHMARK(BM_AccumulateScalarLoop)->DenseRange(0, 1);
BENCHMARK(BM_AccumulateBackend)->DenseRange(0, 1);
