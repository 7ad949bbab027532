// CUPTI activity records in a form that needs no CUDA header, and their attribution to graph nodes.
//
// The CUDA profiler (issue P14) records the Activity API's concurrent-kernel, memcpy, memset and
// external-correlation records while the engine pushes one external correlation id per graph node
// and pass (cuptiActivityPushExternalCorrelationId around each node's launches). This file is the
// part of that profiler that is plain C++: the records after conversion (cupti_records.h converts
// CUPTI's own structs), the attribution of device time to (node, pass), and the per-node statistics
// a `measured-cuda` profile is built from. Everything here runs and is tested without a GPU.
//
// Rules:
// - A kernel or memset belongs to the (node, pass) whose external id CUPTI correlated with its
//   launch (correlationId -> externalId); a record with no correlation, or one whose external id
//   the engine never pushed, is unattributed (counted, with its time).
// - A node's time in one repetition is the union of its kernels' intervals: kernels of one node
//   overlapping on several streams count once, gaps between them do not count.
// - Memcpys are attributed the same way but kept apart (copy time): swaps and transfers run on copy
//   streams beside compute.
// - Records CUPTI reported as dropped make the result incomplete: a warning names the count.
// - GPU timestamps are aligned to the host clock by a least-squares line through (gpu, host)
//   timestamp pairs (cuptiGetTimestamp beside the host clock), for the whole-step timeline.
// Depends on: core (ids, Graph for the profile); no CUDA.
#pragma once

#include "cost/profile.h"
#include "cpu_profiler.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ps::profiler::cupti {

enum class ActivityKind : std::uint8_t { Kernel, Memcpy, Memset };

struct DeviceActivity
{
    ActivityKind kind = ActivityKind::Kernel;
    std::string name; // kernel name; "memcpy HtoD" ...
    std::uint64_t startNs = 0; // GPU timestamps
    std::uint64_t endNs = 0;
    std::uint32_t correlationId = 0;
    std::uint32_t streamId = 0;
    std::uint32_t deviceId = 0;
    std::uint64_t bytes = 0; // memcpy/memset
};

struct ExternalCorrelation
{
    std::uint32_t correlationId = 0;
    std::uint64_t externalId = 0;
};

// What CUPTI delivered for one profiling session.
struct ActivityBatch
{
    std::vector<DeviceActivity> activities;
    std::vector<ExternalCorrelation> correlations;
    std::uint64_t droppedRecords = 0; // cuptiActivityGetNumDroppedRecords over all buffers
};

enum class Pass : std::uint8_t { Forward, Backward };

// One external id the engine pushed: node `node`, pass `pass`, repetition `repeat`.
struct NodeLaunch
{
    std::uint64_t externalId = 0;
    std::size_t node = 0;
    Pass pass = Pass::Forward;
    int repeat = 0;
};

struct NodeDeviceTime
{
    std::vector<double> forwardNs; // one sample per repetition that launched something
    std::vector<double> backwardNs;
    std::vector<double> copyNs; // memcpys launched by the node (both passes), per repetition
    int kernels = 0; // kernels attributed over all repetitions
};

struct Attribution
{
    std::vector<NodeDeviceTime> nodes; // by node index
    std::size_t unattributedRecords = 0;
    double unattributedNs = 0;
    std::uint64_t droppedRecords = 0;
    std::vector<std::string> warnings;
};

// Attributes `batch` to `nodeCount` nodes through the launches the engine pushed. Throws ps::Error
// when a launch names a node out of range or two launches share an external id.
[[nodiscard]] Attribution attribute(
    std::size_t nodeCount, const ActivityBatch& batch, const std::vector<NodeLaunch>& launches);

// The union of [start, end) intervals, in ns.
[[nodiscard]] double unionLength(std::vector<std::pair<std::uint64_t, std::uint64_t>> intervals);

// host = hostAtOrigin + scale * (gpu - gpuOrigin), fitted by least squares through (gpu, host)
// pairs; one pair gives scale 1. GPU timestamps are kept as integers relative to an origin (epoch
// nanoseconds do not fit a double exactly). Throws ps::Error with no pairs.
struct ClockMap
{
    std::uint64_t gpuOrigin = 0;
    double hostAtOrigin = 0;
    double scale = 1;
    [[nodiscard]] double toHost(std::uint64_t gpuNs) const
    {
        const auto d =
            gpuNs >= gpuOrigin ? static_cast<double>(gpuNs - gpuOrigin) : -static_cast<double>(gpuOrigin - gpuNs);
        return hostAtOrigin + scale * d;
    }
};
[[nodiscard]] ClockMap alignClocks(const std::vector<std::pair<std::uint64_t, double>>& gpuHostPairs);

// A profile run (the CPU profiler's form: median and spread per node and pass) from an
// attribution at `microBatch`; nodes that launched nothing in a pass get no samples (forward: 0).
// Memory columns come from `memory` (the caching allocator's per-node bytes), indexed by node.
[[nodiscard]] CpuProfileRun toProfileRun(
    const Attribution& attribution, std::int64_t microBatch, const std::vector<NodeMeasurement>& memory = {});

// The profile for device kind `deviceKind` through two runs (or one, proportional), measured with
// GEMMs at `gemm`: source measuredCudaSource(gemm) ("measured-cuda" for fp32). setup.precision stays
// fp32: the engine keeps fp32 values in every GEMM mode, and the planner reads a bf16 setup as bf16
// activations.
[[nodiscard]] Profile toCudaProfile(const Graph& graph, const CpuProfileRun& a, const CpuProfileRun& b,
    const std::string& deviceKind, Precision gemm = Precision::Fp32);

} // namespace ps::profiler::cupti
