#include "cost/calibration.h"

#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>

namespace ps {
namespace {

    double nodeNs(const NodeProfile& n, double mb)
    {
        return n.forwardNs.at(mb) + n.backwardNs.at(mb);
    }

    double median(std::vector<double> v)
    {
        if (v.empty())
            return 0;
        std::sort(v.begin(), v.end());
        const auto mid = v.size() / 2;
        return v.size() % 2 == 1 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
    }

    LinearModel scaled(const LinearModel& m, double f)
    {
        return { m.fixed * f, m.perSample * f };
    }

} // namespace

bool coversNode(const NodeProfile& node, double microBatch)
{
    return nodeNs(node, microBatch) > 0;
}

Calibration calibrate(const Graph& graph, const Profile& measured, const Profile& analytical,
    std::vector<KernelClass> nodeClass, double microBatch)
{
    const auto n = graph.nodeCount();
    if (measured.nodes.size() != n || analytical.nodes.size() != n || nodeClass.size() != n)
        throw Error("calibration: the profiles do not have the model's " + std::to_string(n) + " nodes");
    Calibration c;
    c.factors.fill(1.0);
    c.nodeClass = std::move(nodeClass);
    // A forward-only profile (an inference trace, a forward benchmark) is compared on forward time.
    c.forwardOnly = std::none_of(measured.nodes.begin(), measured.nodes.end(),
        [&](const NodeProfile& p) { return p.backwardNs.at(microBatch) > 0; });
    const auto nodeNs = [&](const NodeProfile& p) {
        return p.forwardNs.at(microBatch) + (c.forwardOnly ? 0.0 : p.backwardNs.at(microBatch));
    };
    std::array<ClassFit, kKernelClassCount> fits {};
    std::array<std::vector<std::pair<double, double>>, kKernelClassCount> pairs {}; // measured, analytical
    // A measured profile times the engine's fused chains (Scale -> Mask -> Softmax) on their last
    // node, the others at zero: a node measured at zero whose output has one reader lends its
    // model time to that reader, so the chain is compared whole. (An imported trace's zeros are
    // nodes it missed: they lend nothing.)
    std::vector<double> lent(n, 0.0);
    if (measured.source.starts_with("measured")) {
        const auto readers = graph.consumers();
        for (std::size_t i = 0; i < n; ++i) {
            const auto& node = graph.nodes()[i];
            if (nodeNs(measured.nodes[i]) > 0 || node.outputs.size() != 1)
                continue;
            const auto& next = readers[node.outputs[0].index()];
            if (next.size() == 1 && next.front().index() > i)
                lent[next.front().index()] += nodeNs(analytical.nodes[i]) + lent[i];
        }
    }
    for (std::size_t i = 0; i < n; ++i) {
        const double m = nodeNs(measured.nodes[i]);
        const double a = nodeNs(analytical.nodes[i]) + lent[i];
        if (m <= 0 || a <= 0)
            continue;
        const auto k = static_cast<std::size_t>(c.nodeClass[i]);
        fits[k].kind = c.nodeClass[i];
        ++fits[k].nodes;
        fits[k].measuredNs += m;
        fits[k].analyticalNs += a;
        pairs[k].emplace_back(m, a);
        c.nodes.push_back({ i, m, a });
        ++c.coveredNodes;
    }
    for (std::size_t k = 0; k < fits.size(); ++k) {
        auto& f = fits[k];
        if (f.nodes == 0)
            continue;
        f.factor = f.measuredNs / f.analyticalNs;
        c.factors[k] = f.factor;
        std::vector<double> before;
        std::vector<double> after;
        for (const auto& [m, a] : pairs[k]) {
            before.push_back(std::abs(a / m - 1));
            after.push_back(std::abs(f.factor * a / m - 1));
        }
        f.medianErrorBefore = median(before);
        f.medianErrorAfter = median(after);
        c.classes.push_back(f);
    }
    std::sort(c.classes.begin(), c.classes.end(),
        [](const ClassFit& a, const ClassFit& b) { return a.measuredNs > b.measuredNs; });
    return c;
}

Profile calibratedProfile(const Profile& analytical, const Calibration& calibration)
{
    Profile out = analytical;
    out.source = "calibrated";
    for (std::size_t i = 0; i < out.nodes.size() && i < calibration.nodeClass.size(); ++i) {
        const double f = calibration.factors[static_cast<std::size_t>(calibration.nodeClass[i])];
        auto& node = out.nodes[i];
        node.forwardNs = scaled(node.forwardNs, f);
        node.backwardNs = scaled(node.backwardNs, f);
        node.weightGradNs = scaled(node.weightGradNs, f);
    }
    return out;
}

Profile calibratedProfile(const Profile& kernelsOnly, const Calibration& calibration, const Profile& withLaunch)
{
    auto out = calibratedProfile(kernelsOnly, calibration);
    const auto add = [](LinearModel& to, const LinearModel& with, const LinearModel& without) {
        to.fixed += with.fixed - without.fixed;
        to.perSample += with.perSample - without.perSample;
    };
    for (std::size_t i = 0; i < out.nodes.size() && i < withLaunch.nodes.size(); ++i) {
        auto& node = out.nodes[i];
        const auto& with = withLaunch.nodes[i];
        const auto& without = kernelsOnly.nodes[i];
        add(node.forwardNs, with.forwardNs, without.forwardNs);
        add(node.backwardNs, with.backwardNs, without.backwardNs);
        add(node.weightGradNs, with.weightGradNs, without.weightGradNs);
    }
    return out;
}

Profile fillUncovered(
    const Graph& graph, const Profile& measured, const Profile& calibrated, double microBatch, int* filled)
{
    Profile out = measured;
    std::set<std::string> coveredScopes;
    for (std::size_t i = 0; i < out.nodes.size() && i < graph.nodeCount(); ++i) {
        if (coversNode(out.nodes[i], microBatch) && !graph.nodes()[i].scope.empty())
            coveredScopes.insert(graph.nodes()[i].scope);
    }
    int count = 0;
    for (std::size_t i = 0; i < out.nodes.size() && i < calibrated.nodes.size() && i < graph.nodeCount(); ++i) {
        if (coversNode(out.nodes[i], microBatch) || !coversNode(calibrated.nodes[i], microBatch)
            || coveredScopes.contains(graph.nodes()[i].scope))
            continue;
        out.nodes[i].forwardNs = calibrated.nodes[i].forwardNs;
        out.nodes[i].backwardNs = calibrated.nodes[i].backwardNs;
        out.nodes[i].weightGradNs = calibrated.nodes[i].weightGradNs;
        ++count;
    }
    if (filled != nullptr)
        *filled = count;
    return out;
}

} // namespace ps
