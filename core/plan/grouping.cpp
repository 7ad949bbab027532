#include "plan/grouping.h"

#include "sim/simulator.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ps {
namespace {

    // Micro-batch sizes that divide the global batch, largest first.
    std::vector<double> divisorsDescending(double globalBatch)
    {
        const auto g = std::llround(globalBatch);
        std::vector<double> sizes;
        for (long long b = g; b >= 1; --b) {
            if (g % b == 0)
                sizes.push_back(static_cast<double>(b));
        }
        return sizes;
    }

    // The cluster with every traced link held at `fraction` of its bandwidth.
    Cluster heldAt(const Cluster& cluster, double fraction)
    {
        Cluster held = cluster;
        const BandwidthTrace constant { { { 0.0, fraction } }, 0 };
        held.intraTrace = constant;
        if (cluster.interTrace)
            held.interTrace = constant;
        return held;
    }

    // Whole-sample micro-batch for group k: the largest divisor of the global batch at most
    // groupBatch / k.
    double wholeMicroBatch(double globalBatch, double groupBatch, int k)
    {
        for (double b : divisorsDescending(globalBatch)) {
            if (b <= groupBatch / k + 1e-9)
                return b;
        }
        return 1;
    }

    SimulationResult simulateCandidate(const Graph& graph, const Profile& profile, const Cluster& cluster,
        const GroupingCandidate& candidate, double offsetSeconds)
    {
        const auto& plan = candidate.plan;
        const auto costs = computeStageCosts(graph, profile, plan.partition, plan.microBatch);
        SimulationOptions options;
        options.traceOffsetSeconds = offsetSeconds;
        return simulate({ generateSchedule(plan.schedule), costs, cluster, profile.setup, plan.microBatch,
            plan.memoryPlans(), options });
    }

} // namespace

std::vector<GroupingCandidate> groupingCandidates(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const GroupingRequest& request, double traceOffsetSeconds)
{
    if (!(request.globalBatch >= 1) || std::abs(request.globalBatch - std::round(request.globalBatch)) > 1e-9)
        throw Error("grouping: the global batch must be a positive whole number of samples, got "
            + std::to_string(request.globalBatch));
    if (request.maxK < 1)
        throw Error("grouping: the largest k must be at least 1");
    std::vector<GroupingCandidate> candidates;
    for (int k = 1; k <= request.maxK; ++k) {
        const auto sizes = request.groupBatch > 0 ? std::vector<double> { request.wholeMicroBatches
                ? wholeMicroBatch(request.globalBatch, request.groupBatch, k)
                : request.groupBatch / k }
                                                  : divisorsDescending(request.globalBatch);
        for (double b : sizes) { // the memory-limit curve's point for k, or the fixed group batch's
            const int M = static_cast<int>(std::llround(request.globalBatch / b));
            if (k > M || std::abs(M * b - request.globalBatch) > 1e-6 * request.globalBatch)
                continue;
            const ScheduleSpec spec { ScheduleKind::KFKB, request.stages, M, k, 1 };
            const StageModel model(graph, profile, spec, cluster, b, request.limits);
            PlannerOptions options;
            options.algorithm = request.algorithm;
            options.limits = request.limits;
            auto plan = request.partition
                ? evaluatePlan(model, *request.partition, std::string(toString(options.algorithm)))
                : findPlan(model, options);
            if (!plan.feasible)
                continue;
            GroupingCandidate c { k, std::move(plan) };
            const auto ns = groupingIterationNs(graph, profile, cluster, c, traceOffsetSeconds);
            c.plan.simulation = PlanSimulation { ns, request.globalBatch / (ns * 1e-9), 0, 0, false };
            candidates.push_back(std::move(c));
            break;
        }
    }
    std::stable_sort(candidates.begin(), candidates.end(), [](const GroupingCandidate& a, const GroupingCandidate& b) {
        return a.plan.simulation->iterationNs < b.plan.simulation->iterationNs;
    });
    return candidates;
}

double groupingIterationNs(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const GroupingCandidate& candidate, double offsetSeconds)
{
    return simulateCandidate(graph, profile, cluster, candidate, offsetSeconds).iterationNs;
}

double measuredBandwidthShare(const SimulationResult& iteration, const Cluster& cluster)
{
    double nominalNs = 0;
    double tookNs = 0;
    for (const auto& e : iteration.events) {
        if ((e.action != ActionType::SendForward && e.action != ActionType::SendBackward) || e.bytes <= 0
            || e.peer == e.device)
            continue;
        const auto& link = cluster.nodeOf(e.device) == cluster.nodeOf(e.peer) ? cluster.intraNode : cluster.interNode;
        nominalNs += 1e9 * e.bytes / link.bandwidth;
        tookNs += std::max(0.0, e.endNs - e.startNs - 1e9 * link.latencySeconds);
    }
    return nominalNs > 0 && tookNs > 0 ? std::min(1.0, nominalNs / tookNs) : 1.0;
}

int GroupingRun::switches() const
{
    int n = 0;
    for (std::size_t i = 1; i < steps.size(); ++i)
        n += steps[i].k != steps[i - 1].k ? 1 : 0;
    return n;
}

GroupingRun adaptiveGrouping(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const std::vector<GroupingCandidate>& candidates, int iterations, int interval, double smoothing)
{
    if (candidates.empty())
        throw Error("grouping: no k fits the memory limit at any micro-batch size");
    if (interval < 1)
        throw Error("grouping: the re-estimation interval must be at least one iteration");
    if (!(smoothing > 0 && smoothing <= 1))
        throw Error("grouping: the moving average's weight must be in (0, 1], got " + std::to_string(smoothing));
    GroupingRun run;
    double now = 0;
    std::size_t chosen = 0;
    double estimate = 1; // nothing measured yet: the nominal bandwidth
    double decidedOn = 1;
    for (int i = 0; i < iterations; ++i) {
        if (i % interval == 0) { // re-estimate at an iteration boundary
            decidedOn = estimate;
            const auto held = heldAt(cluster, estimate);
            double best = std::numeric_limits<double>::infinity();
            for (std::size_t c = 0; c < candidates.size(); ++c) {
                const double ns = groupingIterationNs(graph, profile, held, candidates[c], 0);
                if (ns < best) {
                    best = ns;
                    chosen = c;
                }
            }
        }
        const auto& c = candidates[chosen];
        const auto iteration = simulateCandidate(graph, profile, cluster, c, now);
        const double measured = measuredBandwidthShare(iteration, cluster);
        estimate = i == 0 ? measured : smoothing * measured + (1 - smoothing) * estimate;
        const double seconds = iteration.iterationNs * 1e-9;
        run.steps.push_back({ i, now, c.k, c.plan.microBatch, seconds, decidedOn, measured });
        now += seconds;
    }
    run.totalSeconds = now;
    return run;
}

GroupingRun fixedGrouping(const Graph& graph, const Profile& profile, const Cluster& cluster,
    const GroupingCandidate& candidate, int iterations)
{
    GroupingRun run;
    double now = 0;
    for (int i = 0; i < iterations; ++i) {
        const double seconds = groupingIterationNs(graph, profile, cluster, candidate, now) * 1e-9;
        run.steps.push_back({ i, now, candidate.k, candidate.plan.microBatch, seconds, 1, 1 });
        now += seconds;
    }
    run.totalSeconds = now;
    return run;
}

} // namespace ps
