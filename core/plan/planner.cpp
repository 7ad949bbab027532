#include "plan/planner.h"

#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <tuple>

namespace ps {
namespace {

    constexpr double kInfinity = std::numeric_limits<double>::infinity();

    struct Cancelled
    {
    };

    std::vector<std::size_t> memoryBalancedStarts(
        const StageModel& m, std::size_t b, std::size_t e, int first, int last);

    class Search
    {
    public:
        Search(const StageModel& model, const PlannerOptions& options)
            : m_model(model)
            , m_options(options)
        {
        }
        void checkCancel() const
        {
            if (m_options.cancel && m_options.cancel->load(std::memory_order_relaxed))
                throw Cancelled {};
        }
        void report(double fraction) const
        {
            if (m_options.progress)
                m_options.progress(fraction);
        }
        const StageModel& m_model;
        const PlannerOptions& m_options;
    };

    // ---- DawnPiper (Algorithm 1 with the digest's fixes: any stage count, a single-stage base case)

    struct SubResult
    {
        double time = kInfinity; // slowest stage, memory-optimization overhead included
        std::vector<std::size_t> cuts; // first node of each stage after the first
        bool optimized = false; // some stage needed swap/recompute
    };

    class DawnPiper : public Search
    {
    public:
        using Search::Search;

        SubResult solve()
        {
            return biPar(0, m_model.nodeCount(), 0, m_model.stages() - 1, 0.0, 1.0);
        }

    private:
        // The cut between stages [left..mid] and [mid+1..right] over nodes [b, e).
        std::vector<std::size_t> candidates(std::size_t b, std::size_t e, int left, int mid, int right) const
        {
            const auto lo = b + static_cast<std::size_t>(mid - left + 1);
            const auto hi = e - static_cast<std::size_t>(right - mid);
            if (lo > hi)
                return {};
            const auto cb = std::clamp(computeBalanced(b, e, left, mid, right), lo, hi);
            const auto mb = std::clamp(memoryBalanced(b, e, left, mid, right), lo, hi);
            // IdentifyAndSort (appendix B.2): positions from rho_cb toward rho_mb, dropping cuts that
            // send much more than the narrowest waist in the range.
            // Theorem 4.1's interval, widened by a few nodes: the balanced positions are found on
            // discrete nodes, and the node just before the compute-balanced one is often better.
            const auto widen = m_options.widenCandidates;
            const auto from = std::max(lo, std::min(cb, mb) - std::min(std::min(cb, mb) - lo, widen));
            const auto to = std::min(hi, std::max(cb, mb) + widen);
            double narrowest = kInfinity;
            for (auto c = from; c <= to; ++c)
                narrowest = std::min(narrowest, m_model.cutBytes(c));
            std::vector<std::size_t> cuts;
            for (auto c = from; c <= to; ++c) {
                if (m_model.cutBytes(c) <= 2 * narrowest || c == cb || c == mb)
                    cuts.push_back(c);
            }
            std::sort(cuts.begin(), cuts.end(), [cb](auto a, auto b2) {
                const auto da = a > cb ? a - cb : cb - a;
                const auto db = b2 > cb ? b2 - cb : cb - b2;
                return da < db;
            });
            if (cuts.size() > m_options.maxCandidates)
                cuts.resize(m_options.maxCandidates); // the nearest to rho_cb: the early break stops there anyway
            return cuts;
        }

        // The cut that best balances per-stage compute between the two groups: the first node where
        // the left group reaches its share, or the one before it, whichever has the smaller maximum.
        std::size_t computeBalanced(std::size_t b, std::size_t e, int left, int mid, int right) const
        {
            const double nl = mid - left + 1;
            const double nr = right - mid;
            const double target = m_model.computeNs(b, e) * nl / (nl + nr);
            std::size_t lo = b + 1;
            std::size_t hi = e - 1;
            while (lo < hi) {
                const auto c = (lo + hi) / 2;
                if (m_model.computeNs(b, c) >= target)
                    hi = c;
                else
                    lo = c + 1;
            }
            const auto worst = [&](std::size_t c) {
                return std::max(m_model.computeNs(b, c) / nl, m_model.computeNs(c, e) / nr);
            };
            return lo > b + 1 && worst(lo - 1) < worst(lo) ? lo - 1 : lo;
        }

        // The memory-balanced position (Algorithm 2): where the memory-balanced partition of the
        // sub-problem puts the first stage of the right group.
        std::size_t memoryBalanced(std::size_t b, std::size_t e, int left, int mid, int right) const
        {
            return memoryBalancedStarts(m_model, b, e, left, right)[static_cast<std::size_t>(mid - left + 1)];
        }

        SubResult single(std::size_t b, std::size_t e, int stage) const
        {
            const auto ev = m_model.evaluate(b, e, stage);
            if (!ev.fits)
                return {};
            return { ev.timeNs, {},
                ev.overheadNs > 0 || ev.memoryPlan.swappedBytes > 0 || ev.memoryPlan.recomputedBytes > 0 };
        }

        SubResult biPar(std::size_t b, std::size_t e, int left, int right, double p0, double p1)
        {
            checkCancel();
            if (left == right)
                return single(b, e, left);
            const auto key = std::make_tuple(b, e, left, right);
            if (const auto it = m_memo.find(key); it != m_memo.end())
                return it->second;
            const int mid = (left + right) / 2;
            const auto cuts = candidates(b, e, left, mid, right);
            SubResult best;
            for (std::size_t i = 0; i < cuts.size(); ++i) {
                const auto c = cuts[i];
                const double q0 = p0 + (p1 - p0) * static_cast<double>(i) / static_cast<double>(cuts.size());
                const double q1 = p0 + (p1 - p0) * static_cast<double>(i + 1) / static_cast<double>(cuts.size());
                const auto l = biPar(b, c, left, mid, q0, (q0 + q1) / 2);
                const auto r = biPar(c, e, mid + 1, right, (q0 + q1) / 2, q1);
                const double t = std::max(l.time, r.time);
                if (t < best.time) {
                    best.time = t;
                    best.cuts = l.cuts;
                    best.cuts.push_back(c);
                    best.cuts.insert(best.cuts.end(), r.cuts.begin(), r.cuts.end());
                    best.optimized = l.optimized || r.optimized;
                }
                // Algorithm 1's break: moving further from rho_cb only unbalances compute once no
                // stage needs memory optimization.
                if (std::isfinite(t) && !l.optimized && !r.optimized)
                    break;
                if (left == 0 && right == m_model.stages() - 1)
                    report(q1);
            }
            m_memo.emplace(key, best);
            return best;
        }

        std::map<std::tuple<std::size_t, std::size_t, int, int>, SubResult> m_memo;
    };

    // ---- Boundary refinement after BiPar: slide each cut a few nodes while the plan improves.
    // DawnPiper's premise (§3) is that most nodes are cheap, so moving a boundary by a node changes
    // stage time and memory a little; BiPar's candidate interval is exact only under Theorem 4.1's
    // conditions, and this pass repairs the cases where they do not hold.

    struct Score
    {
        double overBytes; // summed over stages; 0 when everything fits
        double slowestNs;
        bool operator<(const Score& o) const
        {
            return overBytes != o.overBytes ? overBytes < o.overBytes : slowestNs < o.slowestNs;
        }
    };

    Score scoreOf(const StageModel& m, const std::vector<std::size_t>& starts)
    {
        Score s { 0, 0 };
        for (std::size_t x = 0; x < starts.size(); ++x) {
            const auto end = x + 1 < starts.size() ? starts[x + 1] : m.nodeCount();
            const auto ev = m.evaluate(starts[x], end, static_cast<int>(x));
            s.overBytes += ev.fits ? 0 : std::max(ev.overBytes, ev.peakBytes - m.capacityBytes());
            s.slowestNs = std::max(s.slowestNs, ev.timeNs);
        }
        return s;
    }

    // Moves cuts first..last (1-based cut indices into starts) by `delta` nodes; false if a stage
    // would become empty or leave the graph.
    bool shiftCuts(std::vector<std::size_t>& starts, std::size_t first, std::size_t last, long delta, std::size_t n)
    {
        for (auto x = first; x <= last; ++x) {
            const long moved = static_cast<long>(starts[x]) + delta;
            if (moved <= 0 || moved >= static_cast<long>(n))
                return false;
            starts[x] = static_cast<std::size_t>(moved);
        }
        for (std::size_t x = 1; x < starts.size(); ++x) {
            if (starts[x] <= starts[x - 1])
                return false;
        }
        return true;
    }

    // Hill-climbs over moves of one cut or of a run of neighbouring cuts together.
    std::vector<std::size_t> refineBoundaries(const Search& search, std::vector<std::size_t> starts, std::size_t reach)
    {
        const auto& m = search.m_model;
        auto best = scoreOf(m, starts);
        for (bool improved = true; improved;) {
            improved = false;
            search.checkCancel();
            for (std::size_t first = 1; first < starts.size(); ++first) {
                for (auto last = first; last < starts.size(); ++last) {
                    for (long d = 1; d <= static_cast<long>(reach); ++d) {
                        for (const long delta : { -d, d }) {
                            auto trial = starts;
                            if (!shiftCuts(trial, first, last, delta, m.nodeCount()))
                                continue;
                            const auto score = scoreOf(m, trial);
                            if (score < best) {
                                best = score;
                                starts = std::move(trial);
                                improved = true;
                            }
                        }
                    }
                }
            }
        }
        return starts;
    }

    // ---- Greedy bisection on the slowest-stage time, with the memory optimizer in the loop: each
    // stage takes the longest run of nodes that fits and stays under the target. Stage time and
    // memory grow with the run, so the smallest target that places every node is the optimum for
    // contiguous cuts under this model. DawnPiper falls back to it when no cut in Theorem 4.1's
    // intervals fits (the theorem assumes memory optimization is equally available everywhere, but
    // a last stage with one micro-batch in flight cannot trade much).

    std::vector<std::size_t> greedyFill(const StageModel& m, double target)
    {
        const auto n = m.nodeCount();
        const int S = m.stages();
        const auto ok = [&](std::size_t b, std::size_t e, int x) {
            const auto ev = m.evaluate(b, e, x);
            return ev.fits && ev.timeNs <= target;
        };
        std::vector<std::size_t> starts { 0 };
        std::size_t b = 0;
        for (int x = 0; x < S - 1; ++x) {
            const auto room = n - static_cast<std::size_t>(S - 1 - x);
            if (b + 1 > room || !ok(b, b + 1, x))
                return {};
            std::size_t lo = b + 1; // fits
            std::size_t hi = room + 1; // first that does not (or past the room)
            while (hi - lo > 1) {
                const auto mid = lo + (hi - lo) / 2;
                (ok(b, mid, x) ? lo : hi) = mid;
            }
            starts.push_back(lo);
            b = lo;
        }
        return ok(b, n, S - 1) ? starts : std::vector<std::size_t> {};
    }

    std::vector<std::size_t> greedyBisection(const Search& s)
    {
        const auto& m = s.m_model;
        double lo = 0;
        double hi = 0;
        for (int x = 0; x < m.stages(); ++x) {
            const auto ev = m.evaluate(0, m.nodeCount(), x);
            hi = std::max(hi, ev.timeNs * 2);
        }
        auto best = greedyFill(m, hi);
        if (best.empty())
            return {};
        for (int i = 0; i < 40; ++i) {
            s.checkCancel();
            const double target = (lo + hi) / 2;
            auto starts = greedyFill(m, target);
            if (starts.empty()) {
                lo = target;
            } else {
                hi = target;
                best = std::move(starts);
            }
        }
        return best;
    }

    // ---- PipeDream's dynamic program (Narayanan et al. 2019, §3.1): minimise the slowest stage.

    std::vector<std::size_t> pipeDreamCuts(const Search& s, bool memoryChecked)
    {
        const auto& m = s.m_model;
        const auto n = m.nodeCount();
        const auto S = static_cast<std::size_t>(m.stages());
        // best[x][e]: slowest stage when nodes [0, e) form stages 0..x; from[x][e]: where stage x starts.
        std::vector<std::vector<double>> best(S, std::vector<double>(n + 1, kInfinity));
        std::vector<std::vector<std::size_t>> from(S, std::vector<std::size_t>(n + 1, 0));
        for (std::size_t e = 1; e <= n; ++e) {
            if (!memoryChecked || m.approxMemoryBytes(0, e, 0) <= m.capacityBytes())
                best[0][e] = m.computeNs(0, e);
        }
        for (std::size_t x = 1; x < S; ++x) {
            s.checkCancel();
            s.report(static_cast<double>(x) / static_cast<double>(S));
            for (std::size_t e = x + 1; e <= n; ++e) {
                for (std::size_t b = x; b < e; ++b) {
                    const double stage = m.computeNs(b, e);
                    if (stage >= best[x][e])
                        continue; // later starts only shorten the last stage; keep scanning
                    const double t = std::max(best[x - 1][b], stage);
                    if (t < best[x][e]
                        && (!memoryChecked || m.approxMemoryBytes(b, e, static_cast<int>(x)) <= m.capacityBytes())) {
                        best[x][e] = t;
                        from[x][e] = b;
                    }
                }
            }
        }
        if (!std::isfinite(best[S - 1][n]))
            return {};
        std::vector<std::size_t> cuts(S - 1);
        std::size_t e = n;
        for (std::size_t x = S - 1; x > 0; --x) {
            cuts[x - 1] = from[x][e];
            e = from[x][e];
        }
        return cuts;
    }

    // ---- torchgpipe's balance by count: the same number of transformer layers per stage.

    std::vector<std::size_t> equalLayerCuts(const StageModel& m)
    {
        const auto& g = m.graph();
        std::vector<std::size_t> layerStart; // first node of each layer, in order
        std::int32_t last = kNoLayer;
        for (const auto& node : g.nodes()) {
            if (node.layer != kNoLayer && node.layer != last) {
                layerStart.push_back(node.id.index());
                last = node.layer;
            }
        }
        const auto S = static_cast<std::size_t>(m.stages());
        if (layerStart.size() < S) // too few layers: equal node counts instead
            return computeBalancedPartition(std::vector<double>(g.nodeCount(), 1.0), m.stages()).stageStarts;
        std::vector<std::size_t> starts { 0 };
        for (std::size_t s = 1; s < S; ++s)
            starts.push_back(layerStart[s * layerStart.size() / S]);
        return starts;
    }

    // ---- Memory-balanced (Algorithm 2, generalised): the smallest per-device peak reachable by
    // filling stages greedily in order, found by bisection on the target. Over nodes [b, e) and
    // stages first..last, so DawnPiper can ask for the memory-balanced cut of any sub-problem.

    std::vector<std::size_t> memoryBalancedStarts(
        const StageModel& m, std::size_t b, std::size_t e, int first, int last)
    {
        const int count = last - first + 1;
        const auto fill = [&](double target) {
            std::vector<std::size_t> starts { b };
            std::size_t from = b;
            for (int x = first; x < last; ++x) {
                std::size_t to = from + 1;
                const auto room = e - static_cast<std::size_t>(last - x);
                while (to < room && m.approxMemoryBytes(from, to + 1, x) <= target)
                    ++to;
                starts.push_back(to);
                from = to;
            }
            return std::make_pair(m.approxMemoryBytes(from, e, last) <= target, starts);
        };
        double lo = 0;
        double hi = 0;
        for (int x = first; x <= last; ++x)
            hi = std::max(hi, m.approxMemoryBytes(b, e, x));
        for (int i = 0; i < 50 && count > 1; ++i) {
            const double target = (lo + hi) / 2;
            (fill(target).first ? hi : lo) = target;
        }
        return fill(hi).second;
    }

    std::vector<std::size_t> memoryBalancedCuts(const StageModel& m)
    {
        return memoryBalancedStarts(m, 0, m.nodeCount(), 0, m.stages() - 1);
    }

    // ---- Exhaustive: every cut combination, pruned by the best slowest stage so far.

    class Exhaustive : public Search
    {
    public:
        using Search::Search;
        std::vector<std::size_t> run()
        {
            if (m_model.nodeCount() > 80 || m_model.stages() > 5)
                throw Error("exhaustive search is limited to 80 nodes and 5 stages (the graph has "
                    + std::to_string(m_model.nodeCount()) + " nodes)");
            std::vector<std::size_t> starts { 0 };
            recurse(0, 0, 0.0, starts);
            return m_best;
        }

    private:
        void recurse(std::size_t b, int stage, double slowest, std::vector<std::size_t>& starts)
        {
            const auto n = m_model.nodeCount();
            const int S = m_model.stages();
            if (stage == S - 1) {
                const auto ev = m_model.evaluate(b, n, stage);
                const double t = std::max(slowest, ev.fits ? ev.timeNs : kInfinity);
                if (t < m_bestTime) {
                    m_bestTime = t;
                    m_best = starts;
                }
                return;
            }
            checkCancel();
            for (auto e = b + 1; e + static_cast<std::size_t>(S - 1 - stage) <= n; ++e) {
                const auto ev = m_model.evaluate(b, e, stage);
                const double t = std::max(slowest, ev.fits ? ev.timeNs : kInfinity);
                if (t >= m_bestTime)
                    continue;
                starts.push_back(e);
                recurse(e, stage + 1, t, starts);
                starts.pop_back();
            }
        }
        double m_bestTime = kInfinity;
        std::vector<std::size_t> m_best;
    };

    std::vector<std::size_t> withZero(std::vector<std::size_t> cuts)
    {
        cuts.insert(cuts.begin(), 0);
        return cuts;
    }

    std::vector<double> nodeComputeTimes(const StageModel& m)
    {
        std::vector<double> t;
        for (std::size_t i = 0; i < m.nodeCount(); ++i)
            t.push_back(m.computeNs(i, i + 1));
        return t;
    }

    std::vector<std::size_t> runAlgorithm(const StageModel& m, const PlannerOptions& o)
    {
        const Search s(m, o);
        switch (o.algorithm) {
        case PlanAlgorithm::DawnPiper: {
            DawnPiper d(m, o);
            const auto r = d.solve();
            // BiPar's answer, refined by sliding cuts; plus the same refinement from the greedy
            // bisection and the baselines' partitions, for the cases where Theorem 4.1's conditions
            // do not hold (e.g. a last stage with one micro-batch in flight cannot trade memory for
            // recompute, so the optimum leaves [rho_mb, rho_cb]). The best plan that fits wins.
            std::vector<std::vector<std::size_t>> seeds { r.time < kInfinity ? withZero(r.cuts)
                                                                             : std::vector<std::size_t> {},
                greedyBisection(s), equalLayerCuts(m), memoryBalancedCuts(m),
                computeBalancedPartition(nodeComputeTimes(m), m.stages()).stageStarts };
            std::vector<std::size_t> best;
            for (auto& seed : seeds) {
                if (seed.empty())
                    continue;
                if (o.refineReach > 0)
                    seed = refineBoundaries(s, std::move(seed), o.refineReach);
                if (scoreOf(m, seed).overBytes == 0 && (best.empty() || scoreOf(m, seed) < scoreOf(m, best)))
                    best = seed;
            }
            return best;
        }
        case PlanAlgorithm::PipeDream:
        case PlanAlgorithm::PipeDreamMemory: {
            const auto cuts = pipeDreamCuts(s, o.algorithm == PlanAlgorithm::PipeDreamMemory);
            return cuts.empty() && m.stages() > 1 ? cuts : withZero(cuts);
        }
        case PlanAlgorithm::GPipe:
            return equalLayerCuts(m);
        case PlanAlgorithm::ComputeBalanced:
            return computeBalancedPartition(nodeComputeTimes(m), m.stages()).stageStarts;
        case PlanAlgorithm::MemoryBalanced:
            return memoryBalancedCuts(m);
        case PlanAlgorithm::Exhaustive: {
            Exhaustive ex(m, o);
            const auto best = ex.run();
            return best;
        }
        }
        return {};
    }

} // namespace

std::vector<StageMemoryPlan> Plan::memoryPlans() const
{
    std::vector<StageMemoryPlan> plans;
    for (const auto& s : stages)
        plans.push_back(s.memoryPlan);
    return plans;
}

Plan evaluatePlan(const StageModel& model, const Partition& partition, const std::string& algorithm)
{
    checkPartition(partition, model.nodeCount());
    Plan plan;
    plan.algorithm = algorithm;
    plan.partition = partition;
    plan.schedule = model.schedule();
    plan.microBatch = model.microBatch();
    plan.feasible = true;
    for (int s = 0; s < partition.stageCount(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        auto ev = model.evaluate(partition.stageBegin(id), partition.stageEnd(id, model.nodeCount()), s);
        plan.slowestStageNs = std::max(plan.slowestStageNs, ev.timeNs);
        if (!ev.fits && plan.feasible) {
            plan.feasible = false;
            plan.reason = "stage " + std::to_string(s) + " needs "
                + std::to_string(static_cast<std::int64_t>(ev.peakBytes)) + " bytes, "
                + std::to_string(static_cast<std::int64_t>(ev.overBytes)) + " over the "
                + std::to_string(static_cast<std::int64_t>(model.capacityBytes())) + "-byte limit even after "
                + "swap/recompute";
        }
        plan.stages.push_back(std::move(ev));
    }
    return plan;
}

Plan findPlan(const StageModel& model, const PlannerOptions& options)
{
    const auto start = std::chrono::steady_clock::now();
    Plan plan;
    try {
        const auto starts = runAlgorithm(model, options);
        if (starts.empty()) {
            plan.algorithm = std::string(toString(options.algorithm));
            plan.schedule = model.schedule();
            plan.microBatch = model.microBatch();
            plan.reason = "no partition into " + std::to_string(model.stages()) + " stages fits "
                + std::to_string(static_cast<std::int64_t>(model.capacityBytes())) + " bytes per device";
        } else {
            plan = evaluatePlan(model, Partition { starts }, std::string(toString(options.algorithm)));
        }
    } catch (const Cancelled&) {
        plan.algorithm = std::string(toString(options.algorithm));
        plan.reason = "cancelled";
    }
    plan.searchSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (options.progress)
        options.progress(1.0);
    return plan;
}

std::string_view toString(PlanAlgorithm a)
{
    switch (a) {
    case PlanAlgorithm::DawnPiper:
        return "dawnpiper";
    case PlanAlgorithm::PipeDream:
        return "pipedream";
    case PlanAlgorithm::PipeDreamMemory:
        return "pipedream-mem";
    case PlanAlgorithm::GPipe:
        return "gpipe";
    case PlanAlgorithm::ComputeBalanced:
        return "compute-balanced";
    case PlanAlgorithm::MemoryBalanced:
        return "memory-balanced";
    case PlanAlgorithm::Exhaustive:
        return "exhaustive";
    }
    return "dawnpiper";
}

const std::vector<PlanAlgorithm>& allPlanAlgorithms()
{
    static const std::vector<PlanAlgorithm> kAll = {
        PlanAlgorithm::DawnPiper,
        PlanAlgorithm::PipeDream,
        PlanAlgorithm::PipeDreamMemory,
        PlanAlgorithm::GPipe,
        PlanAlgorithm::ComputeBalanced,
        PlanAlgorithm::MemoryBalanced,
        PlanAlgorithm::Exhaustive,
    };
    return kAll;
}

PlanAlgorithm parsePlanAlgorithm(std::string_view text)
{
    for (auto a : allPlanAlgorithms()) {
        if (toString(a) == text)
            return a;
    }
    throw Error("unknown planning algorithm '" + std::string(text)
        + "' (dawnpiper, pipedream, pipedream-mem, gpipe, compute-balanced, memory-balanced, exhaustive)");
}

std::string planToJson(const Plan& plan)
{
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (const auto& s : plan.stages) {
        stages.push_back({ { "time_ms", s.timeNs / 1e6 }, { "overhead_ms", s.overheadNs / 1e6 },
            { "peak_bytes", s.peakBytes }, { "fits", s.fits }, { "parameters", s.cost.parameterCount },
            { "activation_bytes", s.cost.activationBytes }, { "swapped_bytes", s.memoryPlan.swappedBytes },
            { "recomputed_bytes", s.memoryPlan.recomputedBytes }, { "send_bytes", s.cost.sendForwardBytes } });
    }
    const nlohmann::ordered_json j = { { "algorithm", plan.algorithm }, { "schedule", scheduleName(plan.schedule) },
        { "stages", plan.schedule.stages }, { "micro_batches", plan.schedule.microBatches },
        { "micro_batch", plan.microBatch }, { "cuts", plan.partition.cutsText() }, { "feasible", plan.feasible },
        { "reason", plan.reason }, { "slowest_stage_ms", plan.slowestStageNs / 1e6 },
        { "search_seconds", plan.searchSeconds }, { "stage_details", stages } };
    return j.dump(2);
}

} // namespace ps

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
