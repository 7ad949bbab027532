// Searches built on findPlan: the maximum micro-batch and the auto-search over schedules.
#include "plan/planner.h"

#include <algorithm>

namespace ps {

MaxBatchResult findMaxMicroBatch(const Graph& graph, const Profile& profile, const ScheduleSpec& schedule,
    const Cluster& cluster, const PlannerOptions& options, int upperLimit)
{
    const auto attempt = [&](int b) {
        const StageModel model(graph, profile, schedule, cluster, b, options.limits);
        return findPlan(model, options);
    };
    MaxBatchResult best;
    auto plan = attempt(1);
    if (!plan.feasible)
        return best;
    best = { 1, plan };
    int lo = 1; // feasible
    int hi = 0; // infeasible, 0 = not found yet
    for (int b = 2; b <= upperLimit; b *= 2) {
        plan = attempt(b);
        if (!plan.feasible) {
            hi = b;
            break;
        }
        lo = b;
        best = { b, plan };
    }
    if (hi == 0)
        return best; // fits up to the limit
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        plan = attempt(mid);
        if (plan.feasible) {
            lo = mid;
            best = { mid, plan };
        } else {
            hi = mid;
        }
    }
    return best;
}

} // namespace ps

namespace ps {

std::vector<Plan> searchPlans(const Graph& graph, const Profile& profile, const SearchRequest& request,
    const std::function<void(double)>& progress, const std::atomic<bool>* cancel)
{
    std::vector<Plan> plans;
    const double total = static_cast<double>(request.schedules.size() * request.algorithms.size());
    std::size_t done = 0;
    for (const auto& spec : request.schedules) {
        const auto cluster = makeCluster(request.device, spec.devices());
        const StageModel model(graph, profile, spec, cluster, request.microBatch, request.limits);
        for (auto algorithm : request.algorithms) {
            if (cancel && cancel->load())
                break;
            if (algorithm == PlanAlgorithm::Exhaustive && (graph.nodeCount() > 80 || spec.stages > 5))
                continue;
            PlannerOptions o;
            o.algorithm = algorithm;
            o.limits = request.limits;
            o.cancel = cancel;
            o.progress = [&](double f) {
                if (progress)
                    progress((static_cast<double>(done) + f) / total);
            };
            auto plan = findPlan(model, o);
            if (plan.reason != "cancelled")
                plans.push_back(std::move(plan));
            ++done;
        }
    }
    std::stable_sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) {
        if (a.feasible != b.feasible)
            return a.feasible;
        return a.slowestStageNs < b.slowestStageNs;
    });
    return plans;
}

} // namespace ps
