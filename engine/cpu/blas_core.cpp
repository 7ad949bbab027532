#include "cpu/blas_core.h"

#include <algorithm>
#include <cblas.h>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sys/auxv.h>
#include <unistd.h>
#include <vector>

namespace ps::engine {
namespace {

    constexpr const char* kDetectedVariable = "PS_BLAS_CORE_DETECTED";

    std::string lower(std::string_view s)
    {
        std::string out(s);
        std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
        return out;
    }

    bool flagSet(const char* name)
    {
        const char* v = std::getenv(name);
        return v != nullptr && *v != '\0' && std::string_view(v) != "0";
    }

    // argv as the kernel holds it (NUL-separated), for the exec before main has run.
    std::vector<std::string> commandLine()
    {
        std::ifstream in("/proc/self/cmdline", std::ios::binary);
        const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::vector<std::string> args;
        std::size_t from = 0;
        while (from < all.size()) {
            const auto end = all.find('\0', from);
            args.push_back(all.substr(from, end == std::string::npos ? std::string::npos : end - from));
            if (end == std::string::npos)
                break;
            from = end + 1;
        }
        return args;
    }

} // namespace

CpuVectorFeatures thisCpuVectorFeatures()
{
    CpuVectorFeatures f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2");
    f.fma = __builtin_cpu_supports("fma");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")
        && __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
        && __builtin_cpu_supports("avx512cd");
#endif
    return f;
}

int blasCoreLevel(std::string_view coreName)
{
    const auto name = lower(coreName);
    for (const char* n : { "skylakex", "cooperlake", "sapphirerapids" }) {
        if (name == n)
            return 3;
    }
    for (const char* n : { "haswell", "zen", "excavator" }) {
        if (name == n)
            return 2;
    }
    for (const char* n : { "sandybridge", "bulldozer", "piledriver", "steamroller" }) {
        if (name == n)
            return 1;
    }
    return 0;
}

std::string betterBlasCore(std::string_view chosen, const CpuVectorFeatures& features)
{
    const int have = blasCoreLevel(chosen);
    if (features.avx512 && have < 3)
        return "SkylakeX";
    if (features.avx2 && features.fma && have < 2)
        return "Haswell";
    return {};
}

BlasCoreReport blasCoreReport()
{
    BlasCoreReport r;
    r.config = openblas_get_config();
    r.core = openblas_get_corename();
    if (const char* detected = std::getenv(kDetectedVariable);
        detected != nullptr && std::getenv("OPENBLAS_CORETYPE") && r.core != detected)
        r.detected = detected;
    const char* pinned = std::getenv("OPENBLAS_CORETYPE");
    if (pinned != nullptr && *pinned != '\0' && std::getenv(kDetectedVariable) == nullptr
        && r.config.find("DYNAMIC_ARCH") != std::string::npos)
        r.widerCore = betterBlasCore(r.core, thisCpuVectorFeatures());
    return r;
}

std::string blasPinAdvice(const BlasCoreReport& report)
{
    if (report.widerCore.empty())
        return {};
    return "OPENBLAS_CORETYPE=" + report.core + " (set in the environment) runs narrower GEMM kernels than this CPU's "
        + report.widerCore + ": unset it for faster CPU GEMMs";
}

void upgradeBlasCoreOrContinue()
{
    if (std::getenv("OPENBLAS_CORETYPE") != nullptr || flagSet("PS_KEEP_BLAS_CORE"))
        return;
    // Not for a privileged (setuid) process, nor under valgrind (the exec would leave it), nor where
    // OpenBLAS was built for one core type and could not switch.
    const char* preload = std::getenv("LD_PRELOAD");
    if (::getauxval(AT_SECURE) != 0 || (preload != nullptr && std::strstr(preload, "vgpreload") != nullptr)
        || std::strstr(openblas_get_config(), "DYNAMIC_ARCH") == nullptr)
        return;
    const std::string chosen = openblas_get_corename();
    const auto better = betterBlasCore(chosen, thisCpuVectorFeatures());
    if (better.empty())
        return;
    auto args = commandLine();
    if (args.empty())
        return;
    std::vector<char*> argv;
    for (auto& a : args)
        argv.push_back(a.data());
    argv.push_back(nullptr);
    ::setenv("OPENBLAS_CORETYPE", better.c_str(), 1);
    ::setenv(kDetectedVariable, chosen.c_str(), 1);
    // The binary's own path, so that the process keeps its name (exec of /proc/self/exe names it "exe").
    std::error_code error;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error)
        ::execv(self.c_str(), argv.data());
    ::execv("/proc/self/exe", argv.data());
    // The exec failed (no /proc, the binary replaced): run on OpenBLAS's own choice, and leave the
    // variables unset so that nothing reports a core this process does not run.
    ::unsetenv("OPENBLAS_CORETYPE");
    ::unsetenv(kDetectedVariable);
}

} // namespace ps::engine
