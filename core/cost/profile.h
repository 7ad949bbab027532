// Per-node time and memory on one device kind, as a linear function of the micro-batch size, so
// the planner can ask for any size. Sources: analytical (roofline over the op formulas),
// measured-cpu, measured-cupti, imported.
// Depends on: graph/, cluster/device_catalog.h, cost/training_setup.h.
#pragma once

#include "cluster/device_catalog.h"
#include "cost/training_setup.h"
#include "graph/graph.h"

#include <string>
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
    std::vector<NodeProfile> nodes; // indexed by node id
};

// Per-op-class efficiency of the roofline: the fraction of the peak a real kernel reaches. A
// measured profile can calibrate these (issue: compare predicted vs measured).
struct CostModelOptions
{
    TrainingSetup setup;
    double matmulEfficiency = 0.6; // of the tensor/FMA peak
    double vectorEfficiency = 0.5; // elementwise work, of the fp32 peak
    double bandwidthEfficiency = 0.7; // of the memory bandwidth
    double kernelLaunchNs = 4000; // per kernel, forward; backward launches two
};

// Roofline estimate of every node of `graph` on `device`, fitted through micro-batch 1 and 16.
[[nodiscard]] Profile estimateProfile(const Graph& graph, const DeviceSpec& device, const CostModelOptions& options);

} // namespace ps
