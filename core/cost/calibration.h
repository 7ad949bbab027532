// The analytical model calibrated per op class against a measured or imported profile (issue P15,
// deliverable 3): for each kernel class, the factor measured / analytical over the nodes the
// profile covers; the analytical profile scaled by those factors ("calibrated"); and a measured
// or imported profile whose uncovered nodes (a trace that missed them) are filled from it.
// Depends on: cost/profile.h, graph/.
#pragma once

#include "cost/profile.h"

#include <array>
#include <vector>

namespace ps {

struct ClassFit
{
    KernelClass kind = KernelClass::Other;
    int nodes = 0; // covered nodes of this class
    double measuredNs = 0; // forward + backward (forward-only profiles: forward) at the micro-batch, summed
    double analyticalNs = 0;
    double factor = 1; // measured / analytical
    double medianErrorBefore = 0; // per node |analytical / measured - 1|
    double medianErrorAfter = 0; // per node |factor x analytical / measured - 1|
};

// One covered node as the fit saw it: measured and modelled forward + backward (forward alone for a
// forward-only profile) at the calibration micro-batch (the model's time includes that of the fused
// chain it ends, if any).
struct NodeFit
{
    std::size_t node = 0; // node id
    double measuredNs = 0;
    double analyticalNs = 0;
};

struct Calibration
{
    std::vector<ClassFit> classes; // the classes with covered nodes, most measured time first
    std::array<double, kKernelClassCount> factors {}; // 1 where a class had no covered node
    std::vector<KernelClass> nodeClass; // by node id: the class of the node's first kernel
    int coveredNodes = 0;
    std::vector<NodeFit> nodes; // the covered nodes, in node order
    // The measured profile times no backward (an inference trace): the fit compares forward time
    // alone, and its factors scale the backward as they scale the forward.
    bool forwardOnly = false;
};

// A node counts as covered when its measured forward + backward at `microBatch` is positive.
[[nodiscard]] bool coversNode(const NodeProfile& node, double microBatch);
// Fits the factors over the nodes `measured` covers (forward + backward, or forward alone where
// `measured` has no backward time); `nodeClass` by node id (estimateKernels'
// first kernel). Throws ps::Error when the profiles do not have the graph's node count.
[[nodiscard]] Calibration calibrate(const Graph& graph, const Profile& measured, const Profile& analytical,
    std::vector<KernelClass> nodeClass, double microBatch);
// `analytical` with each node's times times its class's factor, source "calibrated".
[[nodiscard]] Profile calibratedProfile(const Profile& analytical, const Calibration& calibration);
// For a calibration on device time (a GPU's kernel time, from CUPTI or an imported trace, which
// holds no host launch cost): `kernelsOnly` is the analytical profile without launch costs (the one
// the factors were fitted on) and `withLaunch` the same with them; the factors scale the kernels'
// time and each node's launch cost is added back unscaled.
[[nodiscard]] Profile calibratedProfile(
    const Profile& kernelsOnly, const Calibration& calibration, const Profile& withLaunch);
// `measured` with the nodes it does not cover taken from `calibrated`; `filled` counts them. A node
// whose scope has a covered node is left as it is: a trace range named after the scope split its
// time over the scope's nodes by FLOPs, so its zero-FLOP views and copies were matched, at 0.
[[nodiscard]] Profile fillUncovered(
    const Graph& graph, const Profile& measured, const Profile& calibrated, double microBatch, int* filled = nullptr);

} // namespace ps
