// Predicted numbers for a training run on this machine's devices: the simulator over the run's
// cuts, schedule and memory actions, fed with the project's measured profile of the devices' kind
// (measured-cpu, or measured-cuda for a GPU's catalog entry), else the analytical estimate for
// this CPU or that GPU at the run's precision. A split GPU (cuda:0x2) is predicted as that many
// GPUs: the prediction does not model them sharing one. `pipestudio compare`, the GUI's launch dialog, its monitor and
// its predicted-vs-measured timeline all show this one prediction. Depends on: core (graph, plan, sim, store), engine
// (runtimeSchedule, the CPU probe).
#pragma once

#include "cluster/device_catalog.h"
#include "cost/profile_threads.h"
#include "graph/graph.h"
#include "runtime/emulated_link.h"
#include "sim/simulator.h"

#include <optional>
#include <string>
#include <vector>

namespace ps {
class ProjectStore;
}

namespace ps::engine {

// What a run executes: read from a stored plan, the plan being edited, or a run's recorded options.
struct RunShape
{
    Partition partition;
    ScheduleSpec schedule;
    std::vector<StageMemoryPlan> memory; // per stage; empty: keep everything
    std::vector<DeviceId> stageDevices; // empty: stage % devices
    std::int64_t microBatch = 0; // samples per micro-batch; 0: the graph's
    std::int64_t deviceMemoryBytes = 0; // capacity of each device; 0: no cap
    LinkEmulation link; // the emulated link between devices; off: this machine's memory copies
    std::string deviceKind = "cpu"; // "cpu", or the catalog entry of the run's GPUs ("h100-80gb")
    std::string precision = "fp32"; // the run's GEMM precision (train --precision)
    std::vector<std::string> deviceNames {}; // the run's devices ("cuda:0.1"); empty: named by kind
    // The profile to predict it with: "analytical", "measured" (measured-cpu or measured-cuda),
    // "imported" or a stored source; empty: measured where stored. A trace imported as a run
    // records "imported".
    std::string profileSource {};
};

// A run config's "link" object ({} when off) and back; throws ps::Error naming a bad field.
[[nodiscard]] std::string linkToJson(const LinkEmulation& link);
[[nodiscard]] LinkEmulation linkFromJson(const std::string& json);

// A stored plan's JSON (planToJson) as a shape; throws ps::Error when it does not fit the graph.
[[nodiscard]] RunShape shapeFromPlanJson(const std::string& json, std::size_t nodeCount);
// A run's recorded options (`pipestudio train`'s config) with its plan's memory actions.
[[nodiscard]] RunShape shapeFromRun(const ProjectStore& store, std::int64_t runId, std::size_t nodeCount);

struct DeviceOverflow
{
    int device = 0;
    double peakBytes = 0;
    double capacityBytes = 0;
};

struct RunPrediction
{
    SimulationResult simulation;
    std::string profileSource; // "measured-cpu", "measured-cuda" or "analytical"
    std::string profileNote; // which measured profile and why (its thread count on CPU devices)
    std::vector<DeviceOverflow> overflows; // devices predicted to run out of memory
    std::vector<std::string> deviceNames {}; // one per simulated device: the run's, else "cpu:N" / "gpu:N"
};

// This machine's CPU as a device of `threads` threads (0: every core this process may use), measured once per process
// and thread count (about 0.3 s).
[[nodiscard]] const DeviceSpec& thisCpu(int threads = 0);

// The device a run of `shape` computes on: this CPU at each CPU device's share of the cores, or the
// GPU's catalog entry; with the run's memory cap where it has one.
[[nodiscard]] DeviceSpec runDevice(const RunShape& shape);

// `measured`: the project's measured profile of shape.deviceKind, or null for the analytical estimate.
[[nodiscard]] RunPrediction predictRun(const Graph& graph, const Profile* measured, const RunShape& shape);

// The analytical profile of an engine run whose GEMMs compute at options.setup.precision: node
// times at that precision, bytes and setup at fp32's, because the engine keeps fp32 values,
// gradients and master weights in every GEMM mode (its bf16 operands are per-call copies), where
// the cost model's bf16 means mixed precision with bf16 activations.
[[nodiscard]] Profile engineAnalyticalProfile(const Graph& graph, const DeviceSpec& device, CostModelOptions options);
// "measured-cpu (fitted to 1 thread per device from ...)": the source with its note, if any.
[[nodiscard]] std::string profileDescription(const RunPrediction& prediction);
// Device d's name in `prediction` ("cpu:1", "cuda:0.1", or "device d" past the named ones).
[[nodiscard]] std::string deviceLabel(const RunPrediction& prediction, std::size_t d);
// Empty when the prediction fits; else which device runs out and by how much, e.g.
// "cpu:1 is predicted to need 6.20 MiB, 1.20 MiB more than its 5.00 MiB".
[[nodiscard]] std::string overflowMessage(const RunPrediction& prediction);

// One action of the measured iteration against the same action of the prediction.
struct ActionDifference
{
    std::string action; // "1F3"
    int device = 0;
    double measuredMs = 0;
    double predictedMs = 0;
};
// Actions present in both, largest absolute difference first (at most `limit`).
[[nodiscard]] std::vector<ActionDifference> largestActionDifferences(
    const std::vector<SimEvent>& measured, const std::vector<SimEvent>& predicted, std::size_t limit = 8);

// The stored profile a run of `shape` is predicted with: its profileSource's (imported, a stored
// source name) or by default measured-cuda of its GPU's catalog entry or measured-cpu, matched to
// the BLAS threads each of its CPU devices gets on this machine (threadsPerDevice;
// core/cost/profile_threads.h); nullopt when the project has none or "analytical" is asked for.
[[nodiscard]] std::optional<MatchedProfile> measuredProfileFor(const ProjectStore& store, const RunShape& shape);
// predictRun with measuredProfileFor's profile (the analytical estimate without one) and its note.
[[nodiscard]] RunPrediction predictWithStoredProfile(
    const ProjectStore& store, const Graph& graph, const RunShape& shape);

// The prediction for a stored run, on the project's graph and measured profile (if any).
[[nodiscard]] RunPrediction predictStoredRun(const ProjectStore& store, std::int64_t runId);

} // namespace ps::engine
