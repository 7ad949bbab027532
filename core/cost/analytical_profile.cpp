// Analytical profile: a roofline per node. time = launch + max(compute, memory), where compute is
// the op's FLOPs over the peak of its math mode times an efficiency, and memory is the bytes it
// reads and writes over the memory bandwidth times an efficiency.
#include "cost/profile.h"
#include "graph/op_cost.h"

#include <algorithm>

namespace ps {
namespace {

    // Quantities of one node at micro-batch b, scaled from the graph's own micro-batch B0:
    // activation-sized terms scale with b/B0, parameter reads do not.
    struct Scaled
    {
        double forwardFlops;
        double backwardFlops;
        double weightGradFlops;
        double activationBytes; // read + written, excluding parameters
        double parameterBytes;
    };

    Scaled scaleTo(const OpCost& c, double ratio, double actScale)
    {
        const double actRead = static_cast<double>(c.bytesRead - c.parameterBytes) * actScale;
        return { c.forwardFlops * ratio, c.backwardFlops * ratio, c.weightGradFlops * ratio,
            (actRead + static_cast<double>(c.bytesWritten) * actScale) * ratio,
            static_cast<double>(c.parameterBytes) * actScale };
    }

    double rooflineNs(double flops, double bytes, double peak, double bandwidth, double launchNs)
    {
        const double compute = peak > 0 ? flops / peak : 0;
        const double memory = bandwidth > 0 ? bytes / bandwidth : 0;
        return launchNs + 1e9 * std::max(compute, memory);
    }

    struct NodeTimes
    {
        double forward;
        double backward;
        double weightGrad;
    };

    NodeTimes nodeTimes(const Node& node, const Scaled& s, const DeviceSpec& d, const CostModelOptions& o)
    {
        const bool matmul = node.op == OpType::MatMul;
        const double peak = matmul ? d.peakFlops(matmulMathMode(o.setup)) * o.matmulEfficiency
                                   : d.peakFlops(MathMode::Fp32) * o.vectorEfficiency;
        const double bw = d.memoryBandwidth * o.bandwidthEfficiency;
        const double fwdBytes = s.activationBytes + s.parameterBytes;
        NodeTimes t {};
        t.forward = rooflineNs(s.forwardFlops, fwdBytes, peak, bw, o.kernelLaunchNs);
        if (s.backwardFlops <= 0)
            return t;
        // Backward reads the output gradient and saved inputs and writes input (and weight)
        // gradients: about twice the forward traffic.
        t.backward = rooflineNs(s.backwardFlops, 2 * fwdBytes, peak, bw, 2 * o.kernelLaunchNs);
        t.weightGrad = t.backward * (s.weightGradFlops / s.backwardFlops);
        return t;
    }

} // namespace

LinearModel LinearModel::through(double b1, double v1, double b2, double v2)
{
    const double slope = (v2 - v1) / (b2 - b1);
    return { v1 - slope * b1, slope };
}

Profile estimateProfile(const Graph& graph, const DeviceSpec& device, const CostModelOptions& options)
{
    constexpr double kB1 = 1;
    constexpr double kB2 = 16;
    const auto costs = computeOpCosts(graph);
    const double base = static_cast<double>(std::max<std::int64_t>(1, graph.info().microBatch));
    const double actScale = activationScale(options.setup);
    Profile profile { device.id, "analytical", options.setup, {} };
    profile.nodes.reserve(graph.nodeCount());
    for (const auto& node : graph.nodes()) {
        const auto& c = costs[node.id.index()];
        const auto t1 = nodeTimes(node, scaleTo(c, kB1 / base, actScale), device, options);
        const auto t2 = nodeTimes(node, scaleTo(c, kB2 / base, actScale), device, options);
        NodeProfile p;
        p.forwardNs = LinearModel::through(kB1, t1.forward, kB2, t2.forward);
        p.backwardNs = LinearModel::through(kB1, t1.backward, kB2, t2.backward);
        p.weightGradNs = LinearModel::through(kB1, t1.weightGrad, kB2, t2.weightGrad);
        p.outputBytes = { 0, static_cast<double>(c.outputBytes) * actScale / base };
        p.savedBytes = { 0, static_cast<double>(c.savedBytes) * actScale / base };
        p.workspaceBytes = { 0, static_cast<double>(c.workspaceBytes) * actScale / base };
        p.parameterCount = c.parameterCount;
        profile.nodes.push_back(p);
    }
    return profile;
}

} // namespace ps
