// Baseline partitioners and the refinement/bisection helpers DawnPiper uses as extra seeds.
#include "plan/partition_search.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>

namespace ps::detail {

// ---- Boundary refinement after BiPar: slide each cut a few nodes while the plan improves.
// DawnPiper's premise (§3) is that most nodes are cheap, so moving a boundary by a node changes
// stage time and memory a little; BiPar's candidate interval is exact only under Theorem 4.1's
// conditions, and this pass repairs the cases where they do not hold.

double transferWaitShare(const ScheduleSpec& spec)
{
    switch (spec.kind) {
    case ScheduleKind::OneFOneB:
    case ScheduleKind::Interleaved:
    case ScheduleKind::ZeroBubbleH1:
        return 1;
    case ScheduleKind::KFKB:
        return 1.0 / std::max(1, spec.groupSize);
    default:
        return 0;
    }
}

double exposedTransferNs(const StageModel& m, std::size_t cut, int stage)
{
    const auto& spec = m.schedule();
    const double share = transferWaitShare(spec);
    if (share <= 0)
        return 0;
    const double bytes = m.cutBytes(cut) + m.cutGradBytes(cut);
    if (bytes <= 0)
        return 0;
    const auto& cluster = m.cluster();
    const int devices = std::max(1, spec.devices());
    const DeviceId from { static_cast<std::uint32_t>(stage % devices) };
    const DeviceId to { static_cast<std::uint32_t>((stage + 1) % devices) };
    const auto& link = cluster.nodeOf(from) == cluster.nodeOf(to) ? cluster.intraNode : cluster.interNode;
    if (link.bandwidth <= 0)
        return 0;
    return share * 1e9 * (bytes / link.bandwidth + 2 * link.latencySeconds);
}

Score scoreOf(const StageModel& m, const std::vector<std::size_t>& starts)
{
    Score s { 0, 0 };
    for (std::size_t x = 0; x < starts.size(); ++x) {
        const auto end = x + 1 < starts.size() ? starts[x + 1] : m.nodeCount();
        const auto ev = m.evaluate(starts[x], end, static_cast<int>(x));
        s.overBytes += ev.fits ? 0 : std::max(ev.overBytes, ev.peakBytes - m.capacityBytes());
        const int stage = static_cast<int>(x);
        const double waits = std::max(x > 0 ? exposedTransferNs(m, starts[x], stage - 1) : 0.0,
            end < m.nodeCount() ? exposedTransferNs(m, end, stage) : 0.0);
        s.slowestNs = std::max(s.slowestNs, ev.timeNs + waits);
        s.slowestComputeNs = std::max(s.slowestComputeNs, ev.timeNs);
    }
    return s;
}

std::vector<std::size_t> narrowWaistCuts(
    const StageModel& m, const std::vector<std::size_t>& starts, std::size_t window)
{
    const std::size_t n = m.nodeCount();
    std::vector<std::size_t> moved { 0 };
    for (std::size_t s = 1; s < starts.size(); ++s) {
        const auto c = starts[s];
        const auto lo = std::max(moved.back() + 1, c > window ? c - window : 1);
        const auto hi = std::min(c + window, n - (starts.size() - s));
        const auto distance = [c](std::size_t y) { return y > c ? y - c : c - y; };
        auto best = std::clamp(c, lo, std::max(lo, hi));
        // A cut's traffic both ways, as exposedTransferNs charges it.
        const auto bytes = [&m](std::size_t x) { return m.cutBytes(x) + m.cutGradBytes(x); };
        for (auto x = lo; x <= hi; ++x) {
            if (bytes(x) < bytes(best) || (bytes(x) == bytes(best) && distance(x) < distance(best)))
                best = x;
        }
        moved.push_back(best);
    }
    return moved;
}

// Moves cuts first..last (1-based cut indices into starts) by `delta` nodes; false if a stage
// would become empty or leave the graph.
static bool shiftCuts(std::vector<std::size_t>& starts, std::size_t first, std::size_t last, long delta, std::size_t n)
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

static std::vector<std::size_t> greedyFill(const StageModel& m, double target)
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

std::vector<std::size_t> memoryBalancedStarts(const StageModel& m, std::size_t b, std::size_t e, int first, int last)
{
    const auto fill = [&](double target) {
        std::vector<std::size_t> starts { b };
        std::size_t from = b;
        for (int x = first; x < last; ++x) {
            // The longest run from `from` under the target (at least one node): approxMemoryBytes
            // grows with the run's end (prefix sums of non-negative bytes), so bisect for it.
            std::size_t to = from + 1; // taken
            // First end not taken (past the room left for the later stages, never below to + 1).
            std::size_t over = std::max(to + 1, e - static_cast<std::size_t>(last - x) + 1);
            while (over - to > 1) {
                const auto mid = to + (over - to) / 2;
                (m.approxMemoryBytes(from, mid, x) <= target ? to : over) = mid;
            }
            starts.push_back(to);
            from = to;
        }
        return std::make_pair(m.approxMemoryBytes(from, e, last) <= target, starts);
    };
    return smallestFittingFill(m, b, e, first, last, fill);
}

std::vector<std::size_t> smallestFittingFill(
    const StageModel& m, std::size_t b, std::size_t e, int first, int last, const MemoryFill& fill)
{
    double lo = 0;
    double hi = 0;
    for (int x = first; x <= last; ++x)
        hi = std::max(hi, m.approxMemoryBytes(b, e, x));
    for (int i = 0; i < 50 && last > first; ++i) {
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

namespace {

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

} // namespace

std::vector<std::size_t> exhaustiveStarts(const Search& search)
{
    Exhaustive ex(search.m_model, search.m_options);
    return ex.run();
}

std::vector<double> nodeComputeTimes(const StageModel& m)
{
    std::vector<double> t;
    for (std::size_t i = 0; i < m.nodeCount(); ++i)
        t.push_back(m.computeNs(i, i + 1));
    return t;
}

} // namespace ps::detail
