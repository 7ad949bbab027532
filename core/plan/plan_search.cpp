// Searches built on findPlan: the maximum micro-batch and the auto-search over schedules.
#include "plan/planner.h"
#include "sim/simulator.h"
#include "util/error.h"
#include "util/parallel.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <mutex>
#include <optional>

namespace ps {

namespace {

    // Up to `k` distinct sizes strictly between lo and hi that split it into nearly equal parts; for
    // k = 1 the midpoint lo + (hi - lo) / 2, as a plain bisection takes.
    std::vector<int> splitPoints(int lo, int hi, int k)
    {
        std::vector<int> points;
        for (int j = 1; j <= k; ++j) {
            const auto p = static_cast<int>(lo + static_cast<long long>(hi - lo) * j / (k + 1));
            if (p > lo && p < hi && (points.empty() || p > points.back()))
                points.push_back(p);
        }
        return points;
    }

} // namespace

MaxBatchResult findMaxMicroBatch(const Graph& graph, const Profile& profile, const ScheduleSpec& schedule,
    const Cluster& cluster, const PlannerOptions& options, int upperLimit, int threads)
{
    const auto attempt = [&](int b) {
        const StageModel model(graph, profile, schedule, cluster, b, options.limits);
        auto feasibility = options; // the largest size that fits: which fitting cuts are fastest does not matter
        feasibility.rankBySimulation = false;
        return findPlan(model, feasibility);
    };
    // Sizes per round: up to `threads`, and beyond the first only on cores no other task is using
    // (searches running side by side keep them busy: a size tried in vain would only slow them).
    const int most = std::max(1, threads <= 0 ? defaultSearchThreads() : threads);
    const auto width = [&] { return most == 1 ? 1 : std::min(most, 1 + idleSearchThreads()); };
    MaxBatchResult best;
    auto plan = attempt(1);
    if (!plan.feasible)
        return best;
    best = { 1, plan };
    int lo = 1; // feasible
    int hi = 0; // infeasible, 0 = not found yet
    // Tries `sizes` (increasing) side by side; the first infeasible one becomes hi, the largest
    // feasible one below it lo (with feasibility monotone in the size, what one size at a time finds).
    const auto tryAll = [&](const std::vector<int>& sizes) {
        std::vector<Plan> plans(sizes.size());
        parallelFor(sizes.size(), static_cast<int>(sizes.size()), [&](std::size_t i) { plans[i] = attempt(sizes[i]); });
        for (std::size_t i = 0; i < sizes.size(); ++i) {
            if (!plans[i].feasible) {
                hi = sizes[i];
                return;
            }
            lo = sizes[i];
            best = { sizes[i], std::move(plans[i]) };
        }
    };
    // Doubling: the next powers of two at once, up to the limit.
    for (long long b = 2; b <= upperLimit && hi == 0;) {
        std::vector<int> sizes;
        for (const int k = width(); b <= upperLimit && static_cast<int>(sizes.size()) < k; b *= 2)
            sizes.push_back(static_cast<int>(b));
        tryAll(sizes);
    }
    if (hi == 0)
        return best; // fits up to the limit
    while (hi - lo > 1)
        tryAll(splitPoints(lo, hi, width()));
    return best;
}

} // namespace ps

namespace ps {

namespace {

    // The (schedule, micro-batch size) pairs a request covers, with each schedule's micro-batch
    // count set from the global batch when it has one; pairs whose schedule cannot be built are
    // left out (e.g. interleaved with a count that is not a multiple of its devices).
    std::vector<std::pair<ScheduleSpec, double>> searchPoints(const SearchRequest& request)
    {
        auto sizes = request.microBatchSizes;
        if (sizes.empty())
            sizes.push_back(request.microBatch);
        std::vector<std::pair<ScheduleSpec, double>> points;
        for (const auto& base : request.schedules) {
            for (double size : sizes) {
                auto spec = base;
                if (request.globalBatch > 0) {
                    const double count = request.globalBatch / size;
                    if (size <= 0 || count < 1 || std::abs(count - std::round(count)) > 1e-9)
                        continue;
                    spec.microBatches = static_cast<int>(std::lround(count));
                }
                try {
                    (void)generateSchedule(spec);
                } catch (const Error&) {
                    continue;
                }
                points.emplace_back(spec, size);
            }
        }
        return points;
    }

    // Progress over all (point, algorithm) units: finished ones plus each running unit's own
    // fraction, never reported lower than before (the points run on several threads).
    class SearchProgress
    {
    public:
        SearchProgress(const std::function<void(double)>& progress, std::size_t points, std::size_t algorithms)
            : m_progress(progress)
            , m_running(points, 0)
            , m_total(static_cast<double>(std::max<std::size_t>(1, points * algorithms)))
        {
        }

        void advance(std::size_t point, double fraction, bool unitDone)
        {
            if (!m_progress)
                return;
            const std::lock_guard lock(m_mutex);
            if (unitDone) {
                m_finished += 1;
                m_running[point] = 0;
            } else {
                m_running[point] = fraction;
            }
            double now = m_finished;
            for (double f : m_running)
                now += f;
            m_reported = std::max(m_reported, now / m_total);
            m_progress(m_reported);
        }

    private:
        const std::function<void(double)>& m_progress;
        std::mutex m_mutex;
        std::vector<double> m_running;
        double m_total;
        double m_finished = 0;
        double m_reported = 0;
    };

    void simulateInto(Plan& plan, const Graph& graph, const Profile& profile, const Cluster& cluster)
    {
        if (plan.feasible)
            plan.simulation = simulatePlan(plan, graph, profile, cluster);
    }

} // namespace

PlanSimulation simulatePlan(const Plan& plan, const Graph& graph, const Profile& profile, const Cluster& cluster)
{
    const auto costs = computeStageCosts(graph, profile, plan.partition, plan.microBatch);
    const auto r =
        simulate({ planSchedule(plan), costs, cluster, profile.setup, plan.microBatch, plan.memoryPlans(), {} });
    PlanSimulation sim { r.iterationNs, r.samplesPerSecond, r.bubbleFraction, 0, r.anyOutOfMemory };
    for (const auto& d : r.devices)
        sim.peakBytes = std::max(sim.peakBytes, d.peakBytes);
    return sim;
}

bool rankedBefore(const Plan& a, const Plan& b)
{
    if (a.feasible != b.feasible)
        return a.feasible;
    const double ta = a.simulation ? a.simulation->samplesPerSecond : 0;
    const double tb = b.simulation ? b.simulation->samplesPerSecond : 0;
    if (ta != tb)
        return ta > tb;
    return a.slowestStageNs < b.slowestStageNs;
}

std::vector<Plan> searchPlans(const Graph& graph, const Profile& profile, const SearchRequest& request,
    const std::function<void(double)>& progress, const std::atomic<bool>* cancel)
{
    const auto points = searchPoints(request);
    for (const auto& [spec, size] : points) {
        if (request.cluster && request.cluster->deviceCount() < spec.devices())
            throw Error("the cluster '" + request.cluster->name + "' has "
                + std::to_string(request.cluster->deviceCount()) + " devices; " + scheduleName(spec) + " over "
                + std::to_string(spec.stages) + " stages needs " + std::to_string(spec.devices()));
    }
    const auto algorithms = request.algorithms.size();
    SearchProgress tracker(progress, points.size(), algorithms);
    const auto advance = [&](std::size_t point, double fraction, bool unitDone) {
        tracker.advance(point, fraction, unitDone);
    };
    // Each (schedule, size) point is its own task with its own StageModel; its plans go to its
    // slot, so the ranking below sees the same list whatever the thread count.
    std::vector<std::vector<Plan>> slots(points.size());
    std::mutex foundMutex; // onPlan: one call at a time
    // A row without a plan: `algorithm` did not plan (spec, size) for `reason`.
    const auto refused = [&](std::vector<Plan>& out, std::string algorithm, const ScheduleSpec& spec, double size,
                             std::string reason) {
        Plan plan;
        plan.algorithm = std::move(algorithm);
        plan.schedule = spec;
        plan.microBatch = size;
        plan.reason = std::move(reason);
        if (request.onPlan) {
            const std::lock_guard lock(foundMutex);
            request.onPlan(plan);
        }
        out.push_back(std::move(plan));
    };
    parallelFor(points.size(), request.threads, [&](std::size_t i) {
        const auto& [spec, size] = points[i];
        auto& out = slots[i];
        const auto cluster = request.cluster ? *request.cluster : makeCluster(request.device, spec.devices());
        std::optional<StageModel> built;
        try {
            built.emplace(graph, profile, spec, cluster, size, request.limits);
        } catch (const Error& e) { // e.g. a schedule the planner cannot cut for: one row says why
            refused(out, "-", spec, size, e.what());
            for (std::size_t a = 0; a < algorithms; ++a)
                advance(i, 0, true);
            return;
        }
        const auto& model = *built;
        for (auto algorithm : request.algorithms) {
            if (cancel && cancel->load())
                break;
            // Asked for by name ("all" leaves it out: everyPlanAlgorithmFor): one row says why.
            if (auto why = outOfReach(algorithm, graph.nodeCount(), spec.stages); !why.empty()) {
                refused(out, std::string(toString(algorithm)), spec, size, std::move(why));
                advance(i, 0, true);
                continue;
            }
            PlannerOptions o;
            o.algorithm = algorithm;
            o.limits = request.limits;
            o.cancel = cancel;
            o.progress = [&](double f) { advance(i, f, false); };
            auto plan = findPlan(model, o);
            if (plan.reason != "cancelled") {
                simulateInto(plan, graph, profile, cluster);
                if (request.onPlan) {
                    const std::lock_guard lock(foundMutex);
                    request.onPlan(plan);
                }
                out.push_back(std::move(plan));
            }
            advance(i, 0, true);
        }
    });
    std::vector<Plan> plans;
    for (auto& slot : slots)
        std::move(slot.begin(), slot.end(), std::back_inserter(plans));
    std::stable_sort(plans.begin(), plans.end(), rankedBefore);
    return plans;
}

} // namespace ps
