// Which GEMM kernels ("core") OpenBLAS runs, and a better choice where it guessed low.
// OpenBLAS (DYNAMIC_ARCH builds, as Debian's) picks its kernels from the CPU's model number when it
// loads. A release older than the CPU does not know the model and falls back to kernels below what
// the CPU runs: Debian 12's OpenBLAS 0.3.21 on a Xeon of family 6, model 207 takes Prescott's SSE3
// kernels, sgemm at 21 GFLOP/s per core where its SkylakeX (AVX-512) kernels, in the same library,
// reach 130. OpenBLAS reads OPENBLAS_CORETYPE only while it loads, before any of our code runs, so
// a process whose OpenBLAS chose below the CPU sets that variable and executes its own binary once
// more (`upgradeBlasCoreOrContinue`, run by the engine's static initialisation). A user's own
// OPENBLAS_CORETYPE is kept as given; PS_KEEP_BLAS_CORE=1 keeps OpenBLAS's choice. Child
// processes inherit the variable (they run on the same CPU).
// Depends on: OpenBLAS (cblas.h's openblas_get_corename) and the C library.
#pragma once

#include <string>
#include <string_view>

namespace ps::engine {

// The vector instruction sets that decide which OpenBLAS kernels a CPU runs.
struct CpuVectorFeatures
{
    bool avx2 = false;
    bool fma = false;
    bool avx512 = false; // F, BW, VL, DQ and CD: what OpenBLAS's SkylakeX kernels use
};

// This CPU's, as the compiler's cpuid support reads them (the OS must have enabled the registers).
[[nodiscard]] CpuVectorFeatures thisCpuVectorFeatures();

// How wide the vector code of an OpenBLAS x86-64 core name is: 3 AVX-512 (SkylakeX, Cooperlake,
// SapphireRapids), 2 AVX2 (Haswell, Zen, Excavator), 1 AVX (Sandybridge and AMD's AVX cores),
// 0 anything older or unknown (Prescott, Core2, Nehalem, ...). Names compare case-insensitively.
[[nodiscard]] int blasCoreLevel(std::string_view coreName);

// The OPENBLAS_CORETYPE to ask for on a CPU with `features`, when `chosen` (what OpenBLAS picked)
// runs narrower vectors than the CPU has: "SkylakeX" or "Haswell"; empty when `chosen` is as wide.
[[nodiscard]] std::string betterBlasCore(std::string_view chosen, const CpuVectorFeatures& features);

// What `pipestudio devices` reports: the library's build string, the core it runs and, where
// PipeStudio asked for that core, what OpenBLAS had chosen by itself.
struct BlasCoreReport
{
    std::string config; // openblas_get_config()
    std::string core; // openblas_get_corename()
    std::string detected; // OpenBLAS's own choice when PipeStudio replaced it; empty otherwise
    // Where the environment's OPENBLAS_CORETYPE (not PipeStudio's) pins kernels narrower than this
    // CPU runs: the core it could run instead ("SkylakeX", "Haswell"); empty otherwise.
    std::string widerCore;
};
[[nodiscard]] BlasCoreReport blasCoreReport();

// The report's advice where the environment pins narrower kernels than the CPU runs, e.g.
// "OPENBLAS_CORETYPE=Haswell (set in the environment) runs narrower GEMM kernels than this CPU's
// SkylakeX: unset it for faster CPU GEMMs"; empty where nothing is pinned below the CPU.
[[nodiscard]] std::string blasPinAdvice(const BlasCoreReport& report);

// Re-executes this process (same arguments; the binary /proc/self/exe points to) with
// OPENBLAS_CORETYPE set when `betterBlasCore` names a wider core; returns when nothing is to be done
// (also for setuid processes, under valgrind, and for an OpenBLAS built for one core type) or the
// exec fails (the process then runs on OpenBLAS's choice). Called once before main.
void upgradeBlasCoreOrContinue();

} // namespace ps::engine
