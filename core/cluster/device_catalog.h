// The device catalog: memory, peak FLOP/s per math mode, memory bandwidth and links of the GPUs
// PipeStudio can plan for, loaded from resources/catalog/devices.json (compiled in) or from a
// user's JSON file. The `cpu` entry is a placeholder filled by measurement (engine/cpu_probe.h).
// Depends on: the standard library and nlohmann-json (no Qt, no CUDA).
#pragma once

#include "graph/types.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

// Which peak a kernel runs at: fp32 CUDA cores, TF32 tensor cores, or half-precision tensor cores.
enum class MathMode { Fp32, Tf32, Fp16, Bf16 };

struct LinkSpec
{
    std::string kind; // "pcie4x16", "nvlink3", "ethernet-100g"
    double bandwidth = 0; // bytes/s, one direction
    double latencySeconds = 0;

    bool operator==(const LinkSpec&) const = default;
};

struct DeviceSpec
{
    std::string id; // "a100-40gb"
    std::string name;
    std::int64_t memoryBytes = 0;
    double flopsFp32 = 0; // FLOP/s, dense
    double flopsTf32 = 0;
    double flopsFp16 = 0;
    double flopsBf16 = 0;
    double memoryBandwidth = 0; // bytes/s
    // The GEMM model's inputs (core/cost/gemm_model.h): streaming multiprocessors, and the fraction
    // of a pipe's peak that GEMMs whose tiles fill them reach (FP32 cores; tensor cores for TF32,
    // fp16 and bf16). 0 where unknown: GEMMs are then priced at CostModelOptions::matmulEfficiency.
    int multiprocessors = 0;
    double gemmEfficiencyFp32 = 0;
    double gemmEfficiencyTensor = 0;
    // The cache one device's kernels may keep their bytes in (its cores' private caches and their
    // share of the shared last level), and the rate a streaming kernel reaches within it. A kernel
    // whose bytes fit streams at cacheBandwidth, one whose bytes do not at memoryBandwidth. 0:
    // unknown, every kernel at memoryBandwidth. Measured for `cpu` (engine/cpu_probe.h).
    std::int64_t cacheBytes = 0;
    double cacheBandwidth = 0; // bytes/s
    // A kernel's fixed cost on this device (dispatch and allocation of its output), nanoseconds;
    // 0: the cost model's kernelLaunchNs (what every catalog device and the measured `cpu` use today).
    double kernelOverheadNs = 0;
    LinkSpec hostLink; // to host memory (swap traffic)
    LinkSpec peerLink; // fastest device-to-device link inside a node
    bool measured = false; // true for `cpu` until measured
    // CPU: the cores one node's devices run on. Devices outnumbering them time-share them (the
    // runtime pins device d to core d mod cores; sim/shared_compute.h). 0: each device computes alone.
    int cores = 0;

    [[nodiscard]] double peakFlops(MathMode mode) const;
    bool operator==(const DeviceSpec&) const = default;
};

[[nodiscard]] std::string_view toString(MathMode mode);
[[nodiscard]] MathMode parseMathMode(std::string_view text);

class DeviceCatalog
{
public:
    // The catalog shipped in resources/catalog/devices.json.
    static const DeviceCatalog& builtin();
    // Parses a catalog JSON document; `source` names it in errors.
    static DeviceCatalog fromJson(std::string_view json, const std::string& source);

    // Throws ps::Error listing the known ids when `id` is unknown.
    [[nodiscard]] const DeviceSpec& find(std::string_view id) const;
    // The entry a local GPU is (what its driver calls it, "NVIDIA H100 80GB HBM3", and its memory):
    // the entry whose model ("H100", "GeForce RTX 4090", "L4") the name contains, the longest such
    // model first, with memory within 15% of the entry's. nullptr when none fits.
    [[nodiscard]] const DeviceSpec* matchGpu(std::string_view gpuName, std::int64_t memoryBytes) const;
    [[nodiscard]] const std::vector<DeviceSpec>& devices() const
    {
        return m_devices;
    }
    // Adds a device or replaces the one with the same id (e.g. the measured cpu).
    void put(DeviceSpec spec);

private:
    std::vector<DeviceSpec> m_devices;
};

[[nodiscard]] std::string deviceSpecToJson(const DeviceSpec& spec);
[[nodiscard]] DeviceSpec deviceSpecFromJson(std::string_view json, const std::string& source);

} // namespace ps
