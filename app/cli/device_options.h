// Internal to the CLI: device, precision and optimizer options shared by the planning commands.
#pragma once

#include "backend.h"
#include "cluster/cluster.h"
#include "cluster/device_catalog.h"
#include "cost/profile.h"
#include "scale/tensor_parallel.h"
#include "store/project_store.h"

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace ps::app {

struct DeviceOptions
{
    std::string device = "a100-40gb";
    std::string catalog; // optional JSON catalog overriding the built-in one
    std::string precision; // fp32 | tf32 | bf16 | fp16; empty: fp32 unless a legacy flag says otherwise
    bool mixedPrecision = false; // --mixed-precision: fp16
    bool tf32 = false; // --tf32: tf32
    std::string optimizer = "adam";
    std::string profile = "analytical"; // --profile: analytical, measured, imported, or a stored source
    int threads = 0; // the cpu device's threads; 0: its share of the cores when `devices` share them
    int tensorParallel = 1; // --tp: each stage a tensor-parallel group of this many devices
};

void addDeviceOptions(CLI::App* cmd, DeviceOptions& options);
// The catalog entry, or for `cpu` this CPU measured as one of `devices` devices sharing its cores
// (engine::threadsPerDevice; options.threads where given), as the runtime would run them.
DeviceSpec resolveDevice(const DeviceOptions& options, int devices = 1);
CostModelOptions costOptions(const DeviceOptions& options);
// --profile on the commands that plan or simulate with a per-node profile.
void addProfileOption(CLI::App* cmd, DeviceOptions& options);
// --tp on the commands that apply it (plan, search, maxbatch, simulate): applyTensorParallel.
void addTensorParallelOption(CLI::App* cmd, DeviceOptions& options);
// The profile a planning command uses on `device`: the analytical estimate, or one stored in the
// project (`pipestudio profile`, `import-trace`): "measured" is measured-cpu on the cpu device and
// measured-cuda on a GPU, "imported" an imported trace's. Throws ps::Error naming the project, the
// source and the device, and how to make one, when the project has none that fits the graph.
// "precision fp32" for the analytical estimate, "profile measured-cpu (stored, measured)" otherwise:
// what a planning command's output says it used.
std::string profileLabel(const Profile& profile);
// --tp T > 1: the graph and profile become one GPU's of each stage's T-GPU group (Megatron's rule on
// the op graph, core/scale/tensor_parallel.h, all-reduces over `link`, the cluster's intra-node link); the plan of
// the split, or nothing for T = 1. Throws ps::Error naming the node where T does not divide.
std::optional<TensorParallelPlan> applyTensorParallel(Graph& graph, Profile& profile, const LinkSpec& link, int t);
// On the cpu device, `devices` pipeline devices share the cores: the measured profile of their
// thread count, or fitted to it (core/cost/profile_threads.h).
Profile planningProfile(const ProjectStore& store, const Graph& graph, const DeviceSpec& device,
    const DeviceOptions& options, int devices = 1);
// The kernel class of each node's first kernel on `device` (per-class calibration).
std::vector<KernelClass> nodeClasses(const Graph& graph, const DeviceSpec& device, const DeviceOptions& options);
// --precision, or what the legacy --mixed-precision / --tf32 flags mean; throws ps::Error when
// several are given.
Precision precisionOf(const DeviceOptions& options);
std::string readFile(const std::string& path);
// Prints a note to stderr where the environment's OPENBLAS_CORETYPE pins GEMM kernels narrower than
// this CPU runs (after a train or profile run on CPU devices, without --json; `devices` says the same).
void noteBlasPin();
// The stored profile `--profile measured` names on `deviceId`: "measured-cpu" on the CPU, else the
// GPU's profile measured at the run's --precision (measuredCudaSource).
std::string measuredSource(const std::string& deviceId, const DeviceOptions& o);
// Forward + backward time of every node at micro-batch `mb`.
std::vector<double> nodeTimes(const Profile& profile, double mb);
// The largest size parseBytes accepts: 1 EiB.
inline constexpr double kMaxBytes = 1024.0 * 1024 * 1024 * 1024 * 1024 * 1024;
// "30GiB", "512MiB", "4e9" -> bytes, positive and at most kMaxBytes; throws ps::Error naming `flag`
// on anything else.
double parseBytes(const std::string& text, const std::string& flag);
// "2GB/s", "500MB/s", "1e9" -> bytes/s; throws ps::Error naming `flag` on anything else.
double parseBandwidth(const std::string& text, const std::string& flag);
// A periodic on/off preemption (Ada-Grouper gives no traces; this is our stated model): links run
// at FRACTION of their bandwidth for SHARE of every PERIOD_S seconds. `flag` names the option in
// errors.
BandwidthTrace preemptionTrace(const std::string& text, const std::string& flag = "--preempt");

} // namespace ps::app
