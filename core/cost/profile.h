// Per-node time and memory on one device kind, as a linear function of the micro-batch size, so
// the planner can ask for any size. Sources: analytical (roofline over the op formulas),
// measured-cpu, measured-cupti, imported.
// Depends on: graph/, cluster/device_catalog.h, cost/training_setup.h.
#pragma once

#include "cluster/device_catalog.h"
#include "cost/training_setup.h"
#include "graph/graph.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

// value(b) = fixed + perSample * b
struct LinearModel
{
    double fixed = 0;
    double perSample = 0;

    [[nodiscard]] double at(double microBatch) const
    {
        return fixed + perSample * microBatch;
    }
    // The line through (b1, v1) and (b2, v2); b1 != b2.
    static LinearModel through(double b1, double v1, double b2, double v2);
    bool operator==(const LinearModel&) const = default;
};

struct NodeProfile
{
    LinearModel forwardNs;
    LinearModel backwardNs; // input + weight gradients
    LinearModel weightGradNs; // the weight-gradient part of backwardNs (zero-bubble W)
    LinearModel outputBytes;
    LinearModel savedBytes;
    LinearModel workspaceBytes;
    std::int64_t parameterCount = 0;
};

struct Profile
{
    std::string deviceKind; // catalog id, e.g. "a100-40gb"
    std::string source; // "analytical", "measured-cpu", ...
    TrainingSetup setup;
    // CPU profiles: the BLAS threads each node ran with (a pipeline's CPU devices get the cores
    // divided among them); 0 where not recorded or not a CPU.
    int threads = 0;
    std::vector<NodeProfile> nodes; // indexed by node id
    std::string note; // how it was made where a label should say so ("12 nodes filled from ..."); not stored
};

// What kind of kernel a node runs, for per-class efficiencies and breakdowns. A node may run
// several: a convolution with a bias runs the convolution and an elementwise bias-add (PyTorch
// eager adds a cuDNN convolution's bias in a kernel of its own).
enum class KernelClass : std::uint8_t {
    Gemm, // matmuls with a weight operand (linear layers, projections)
    Convolution,
    Attention, // matmuls between two activations (scores, context), softmax, masks
    Elementwise, // activations, residual adds, bias-adds, dropout, casts, comparisons
    Normalization, // layer/RMS/batch norm
    Pooling, // max/average pooling windows, global average pooling
    Embedding,
    Reduction, // reductions, cumulative sums, top-k
    DataMovement, // layout copies, slices, concatenations, gathers, padding, resizing
    Loss,
    Other, // opaque imported ops
};
inline constexpr int kKernelClassCount = 11;
[[nodiscard]] std::string_view toString(KernelClass k);

// How a convolution is computed: the cuDNN algorithm class the cost model prices it as.
enum class ConvAlgorithm : std::uint8_t {
    ImplicitGemm, // on the precision's GEMM pipe (tensor cores where the precision allows)
    Transform, // Winograd (3x3) or FFT (5x5 and larger), stride 1: fewer multiplies on FP32 cores
    FewChannels, // first layers (<= 4 input channels per group): FP32 cores, or padded tensor-core tiles
    Grouped, // depthwise and narrow grouped convolutions: CUDA cores, usually memory-bound
};
[[nodiscard]] std::string_view toString(ConvAlgorithm a);

// Per-class achievable fractions of the roofline: of a math pipe's peak, or of the memory
// bandwidth. Defaults come from what vendor libraries reach on large kernels (see
// docs/architecture.md, "Cost model"); a measured profile calibrates nothing here yet.
struct CostModelOptions
{
    TrainingSetup setup;
    double matmulEfficiency = 0.6; // GEMMs and implicit-GEMM convolutions, of their pipe's peak
    double fewChannelConvEfficiency = 0.6; // first-layer convolutions, of the FP32 peak
    double winogradReduction = 2.25; // multiplies saved by Winograd F(2x2, 3x3) (Lavin and Gray, 2016)
    double fftKernelArea = 4; // FFT saves about kernel area / this many multiplies (k >= 5)
    double vectorEfficiency = 0.5; // elementwise math, of the fp32 peak
    double bandwidthEfficiency = 0.7; // streaming kernels (elementwise, norms), of the memory bandwidth
    // Windowed kernels (pooling, resizing, padding, gathers) read strided NCHW windows: fewer bytes
    // per DRAM transaction.
    double windowedBandwidthEfficiency = 0.4;
    bool fusedEpilogues = false; // a compiler (torch.compile, XLA) fuses bias-adds into the producer
    double kernelLaunchNs = 4000; // per kernel, forward; backward launches two
    // A kernel's own fixed time on the device (start-up and drain), which a profile of device time
    // (CUPTI, an imported GPU trace) holds in place of the host's launch cost above: the 453 kernels
    // of the H100 GPT trace (tests/data/torch_traces/h100/gpt.trace.json.gz) take at least 0.93 us,
    // a tenth of them under 1.28 us.
    double kernelDeviceNs = 1300;
};

// The kernels one node runs at a micro-batch size, by class: forward and backward nanoseconds.
struct KernelTime
{
    KernelClass kind = KernelClass::Other;
    double forwardNs = 0;
    double backwardNs = 0;
    double weightGradNs = 0; // part of backwardNs
};

// Roofline estimate of every node of `graph` on `device`, fitted through micro-batch 1 and the
// graph's own micro-batch (16 when smaller).
[[nodiscard]] Profile estimateProfile(const Graph& graph, const DeviceSpec& device, const CostModelOptions& options);
// The kernels of every node (indexed by node id) at `microBatch`, as estimateProfile prices them.
[[nodiscard]] std::vector<std::vector<KernelTime>> estimateKernels(
    const Graph& graph, const DeviceSpec& device, const CostModelOptions& options, double microBatch);
// The algorithm class a convolution node is priced as under `setup` on `device`.
[[nodiscard]] ConvAlgorithm convAlgorithm(
    const Graph& graph, const Node& node, const DeviceSpec& device, const CostModelOptions& options);

} // namespace ps
