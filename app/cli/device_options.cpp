#include "cli/device_options.h"

#include "cost/calibration.h"
#include "cost/profile_threads.h"
#include "cpu/blas_core.h"
#include "cpu/packed_gemm.h"
#include "cpu_probe.h"
#include "local_devices.h"
#include "runtime/training_run.h"
#include "util/error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace ps::app {

void addDeviceOptions(CLI::App* cmd, DeviceOptions& o)
{
    cmd->add_option("--device,-d", o.device, "Catalog device (a100-40gb, h100-80gb, ..., or cpu: measured now)");
    cmd->add_option("--catalog", o.catalog, "Device catalog JSON to use instead of the built-in one")
        ->check(CLI::ExistingFile);
    cmd->add_option("--precision", o.precision,
           "fp32 (default, as PyTorch runs it: TF32 convolutions, FP32 matmuls) | tf32 (matmuls on TF32 too) | bf16 | "
           "fp16 (mixed precision with FP32 master weights)")
        ->check(CLI::IsMember({ "fp32", "tf32", "bf16", "fp16" }));
    cmd->add_flag("--mixed-precision", o.mixedPrecision, "Same as --precision fp16");
    cmd->add_flag("--tf32", o.tf32, "Same as --precision tf32");
    cmd->add_option("--optimizer", o.optimizer, "adam | sgd-momentum | sgd");
}

std::string readFile(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw Error("cannot read '" + path + "'");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

DeviceSpec resolveDevice(const DeviceOptions& o, int devices)
{
    const auto catalog =
        o.catalog.empty() ? DeviceCatalog::builtin() : DeviceCatalog::fromJson(readFile(o.catalog), o.catalog);
    const auto& spec = catalog.find(o.device);
    if (!spec.measured)
        return spec;
    return engine::measureCpuDevice(
        o.threads > 0 ? o.threads : engine::threadsPerDevice(static_cast<std::size_t>(std::max(1, devices))));
}

Precision precisionOf(const DeviceOptions& o)
{
    const int given = (o.precision.empty() ? 0 : 1) + (o.mixedPrecision ? 1 : 0) + (o.tf32 ? 1 : 0);
    if (given > 1)
        throw Error("give one of --precision, --mixed-precision (fp16) and --tf32");
    if (o.mixedPrecision)
        return Precision::Fp16;
    if (o.tf32)
        return Precision::Tf32;
    return o.precision.empty() ? Precision::Fp32 : parsePrecision(o.precision);
}

CostModelOptions costOptions(const DeviceOptions& o)
{
    CostModelOptions c;
    c.setup = { precisionOf(o), parseOptimizer(o.optimizer) };
    return c;
}

void addTensorParallelOption(CLI::App* cmd, DeviceOptions& o)
{
    cmd->add_option("--tp", o.tensorParallel,
           "Tensor-parallel size of every stage: each stage runs on a group of this many devices, the model "
           "split by Megatron-LM's rule on the op graph (column- then row-parallel MatMuls, all-reduces over the "
           "intra-node link); plans are then not stored")
        ->check(CLI::Range(1, 1024));
}

void addProfileOption(CLI::App* cmd, DeviceOptions& o)
{
    cmd->add_option("--profile", o.profile,
        "Per-node profile to plan with: analytical (default, the cost model at --precision), measured (this "
        "project's `pipestudio profile` rows for --device: measured-cpu on cpu, on a GPU the rows profiled at "
        "--precision: measured-cuda for fp32, measured-cuda-tf32, measured-cuda-bf16), imported (an `import-trace` "
        "profile for --device), or a stored source name");
}

std::optional<TensorParallelPlan> applyTensorParallel(Graph& graph, Profile& profile, const LinkSpec& link, int t)
{
    if (t <= 1)
        return std::nullopt;
    auto plan = shardTensorParallel(graph, t);
    profile = tensorParallelProfile(graph, profile, plan, link);
    graph = tensorParallelGraph(graph, plan);
    return plan;
}

std::string profileLabel(const Profile& profile)
{
    if (profile.source == "analytical")
        return "precision " + std::string(toString(profile.setup.precision))
            + (profile.note.empty() ? std::string() : "; " + profile.note);
    const auto note = profile.note.empty() ? std::string() : "; " + profile.note;
    if (profile.threads > 0)
        return "profile " + profile.source + " for " + std::to_string(profile.threads)
            + (profile.threads == 1 ? " thread" : " threads") + " per device (stored in the project" + note + ")";
    return "profile " + profile.source + " (stored in the project" + note + ")";
}

std::string measuredSource(const std::string& deviceId, const DeviceOptions& o)
{
    return deviceId == "cpu" ? "measured-cpu" : measuredCudaSource(precisionOf(o));
}

Profile planningProfile(
    const ProjectStore& store, const Graph& graph, const DeviceSpec& device, const DeviceOptions& o, int devices)
{
    if (o.profile.empty() || o.profile == "analytical")
        return estimateProfile(graph, device, costOptions(o));
    const auto source = o.profile == "measured" ? measuredSource(device.id, o) : o.profile;
    const auto project = store.path().string();
    const auto matched = loadMatchedProfile(store, device.id, source,
        device.id == "cpu" ? engine::threadsPerDevice(static_cast<std::size_t>(std::max(devices, 1))) : 0);
    auto profile = matched ? std::optional<Profile>(matched->profile) : std::nullopt;
    if (profile)
        profile->note = matched->note;
    if (!profile) {
        const auto gemm = measuredPrecision(source);
        const auto how = source == "measured-cpu" ? "measure it with `pipestudio profile " + project + "`"
            : source == "measured-cuda-fp16"      ? "the engine does not run fp16: profile at fp32, tf32 or bf16"
            : source.starts_with("measured-cuda")
            ? "measure it on that GPU with `pipestudio profile " + project + " --device cuda:0"
                + (gemm == Precision::Fp32 ? std::string() : " --precision " + std::string(toString(gemm))) + "`"
            : source == "imported"
            ? "import a trace with `pipestudio import-trace " + project + " TRACE --device " + device.id + "`"
            : "store one first";
        throw Error("--profile " + o.profile + ": '" + project + "' has no " + source + " profile for device '"
            + device.id + "' (" + how + ", or plan with --profile analytical)");
    }
    if (profile->nodes.size() != graph.nodeCount())
        throw Error("--profile " + o.profile + ": the " + source + " profile in '" + project + "' has "
            + std::to_string(profile->nodes.size()) + " nodes, the model " + std::to_string(graph.nodeCount())
            + " (profile the model again)");
    const auto optimizer = parseOptimizer(o.optimizer);
    if (optimizer != profile->setup.optimizer) // the step it timed was another optimizer's
        profile->setup.optimizerNsPerParameter = 0;
    profile->setup.optimizer = optimizer;
    // An imported trace may miss nodes: those come from the analytical model scaled by the per-class
    // factors the trace's own nodes give (core/cost/calibration.h).
    if (source == "imported") {
        const auto mb = static_cast<double>(graph.info().microBatch);
        const auto analytical = estimateProfile(graph, device, costOptions(o));
        const auto calibration = calibrate(graph, *profile, analytical, nodeClasses(graph, device, o), mb);
        int filled = 0;
        const auto note = profile->note;
        profile = fillUncovered(graph, *profile, calibratedProfile(analytical, calibration), mb, &filled);
        profile->note = note;
        if (filled > 0)
            profile->note += (note.empty() ? "" : "; ") + std::to_string(filled)
                + " node(s) the trace missed filled from the analytical model calibrated on its "
                + std::to_string(calibration.coveredNodes);
    }
    return *profile;
}

std::vector<KernelClass> nodeClasses(const Graph& graph, const DeviceSpec& device, const DeviceOptions& o)
{
    std::vector<KernelClass> out;
    for (const auto& kernels :
        estimateKernels(graph, device, costOptions(o), static_cast<double>(graph.info().microBatch)))
        out.push_back(kernels.empty() ? KernelClass::Other : kernels.front().kind);
    return out;
}

void noteBlasPin()
{
    if (engine::cpuGemmKernels() == "packed") // OpenBLAS's kernels run no product of 4 rows or more
        return;
    if (const auto advice = engine::blasPinAdvice(engine::blasCoreReport()); !advice.empty()) {
        std::fflush(stdout); // after what the run printed
        fmt::print(stderr, "note: {}\n", advice);
    }
}

std::vector<double> nodeTimes(const Profile& profile, double mb)
{
    std::vector<double> t;
    for (const auto& n : profile.nodes)
        t.push_back(n.forwardNs.at(mb) + n.backwardNs.at(mb));
    return t;
}

double parseBytes(const std::string& text, const std::string& flag)
{
    const auto bad = [&](const std::string& why) {
        return Error(flag + " '" + text + "' " + why + " (examples: 30GiB, 512MiB, 4e9)");
    };
    std::size_t used = 0;
    double value = 0;
    try {
        value = std::stod(text, &used);
    } catch (const std::exception&) {
        throw bad("is not a size");
    }
    const auto unit = text.substr(used);
    const double scale = unit.empty() || unit == "B" ? 1
        : unit == "KiB"                              ? 1024.0
        : unit == "MiB"                              ? 1024.0 * 1024
        : unit == "GiB"                              ? 1024.0 * 1024 * 1024
        : unit == "TiB"                              ? 1024.0 * 1024 * 1024 * 1024
        : unit == "KB"                               ? 1e3
        : unit == "MB"                               ? 1e6
        : unit == "GB"                               ? 1e9
        : unit == "TB"                               ? 1e12
                                                     : -1;
    if (scale < 0 || !std::isfinite(value))
        throw bad("is not a size");
    if (value <= 0)
        throw bad("must be positive");
    // Past an exbibyte no machine has the memory, and int64 byte counts overflow soon after.
    if (value * scale > kMaxBytes)
        throw bad("is larger than 1 EiB");
    return value * scale;
}

double parseBandwidth(const std::string& text, const std::string& flag)
{
    const auto perSecond = text.size() > 2 && text.ends_with("/s");
    try {
        return parseBytes(perSecond ? text.substr(0, text.size() - 2) : text, flag);
    } catch (const Error&) {
        throw Error(
            flag + " '" + text + "' is not a bandwidth between 1 B/s and 1 EiB/s (examples: 2GB/s, 500MB/s, 1e9)");
    }
}

BandwidthTrace preemptionTrace(const std::string& text, const std::string& flag)
{
    double period = 0;
    double fraction = 0;
    double share = 0;
    char extra = 0;
    if (std::sscanf(text.c_str(), "%lf,%lf,%lf%c", &period, &fraction, &share, &extra) != 3 || period <= 0
        || fraction <= 0 || fraction > 1 || share < 0 || share >= 1)
        throw Error(flag + " '" + text
            + "': expected PERIOD_S,FRACTION,SHARE (e.g. 60,0.1,0.5: a tenth of the bandwidth half of every minute)");
    return { { { 0.0, 1.0 }, { period * (1 - share), fraction } }, period };
}

} // namespace ps::app
