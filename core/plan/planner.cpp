#include "plan/planner.h"

#include "plan/mixed_pipe.h"
#include "plan/partition_search.h"
#include "util/enum_names.h"
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

    using namespace detail;

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

    std::vector<std::size_t> withZero(std::vector<std::size_t> cuts)
    {
        cuts.insert(cuts.begin(), 0);
        return cuts;
    }

    // The finalist whose plan simulates the shortest iteration on the model's cluster (`best` where
    // none simulates shorter); `winner` gets its name and " (simulated)".
    std::vector<std::size_t> fastestSimulated(const Search& search,
        const std::vector<std::pair<std::vector<std::size_t>, std::string>>& finalists, std::vector<std::size_t> best,
        std::string& winner)
    {
        const auto& m = search.m_model;
        // A finalist the simulator cannot run, or that runs out of memory in it, does not compete.
        const auto iterationOf = [&](const std::vector<std::size_t>& starts) {
            try {
                const auto plan = evaluatePlan(m, Partition { starts }, "dawnpiper");
                if (!plan.feasible)
                    return kInfinity;
                const auto sim = simulatePlan(plan, m.graph(), m.profile(), m.cluster());
                return sim.outOfMemory ? kInfinity : sim.iterationNs;
            } catch (const Error&) {
                return kInfinity;
            }
        };
        double fastest = iterationOf(best);
        for (const auto& [starts, name] : finalists) {
            search.checkCancel();
            if (starts == best)
                continue;
            const double ns = iterationOf(starts);
            if (ns < fastest) {
                fastest = ns;
                best = starts;
                winner = name + " (simulated)";
            }
        }
        return best;
    }

    // PipeStudio's DawnPiper: Algorithm 1 and four other seeds, refined, scored with the transfers
    // the schedule waits on; `winner` gets the winning seed's name.
    std::vector<std::size_t> dawnPiperPortfolio(const StageModel& m, const PlannerOptions& o, std::string& winner)
    {
        const Search s(m, o);
        DawnPiper d(m, o);
        const auto r = d.solve();
        // BiPar's answer, refined by sliding cuts; plus the same refinement from the greedy
        // bisection and the baselines' partitions, for the cases where Theorem 4.1's conditions
        // do not hold (e.g. a last stage with one micro-batch in flight cannot trade memory for
        // recompute, so the optimum leaves [rho_mb, rho_cb]). The best plan that fits wins.
        const std::vector<std::pair<const char*, std::vector<std::size_t>>> seeds {
            { "bipar", r.time < kInfinity ? withZero(r.cuts) : std::vector<std::size_t> {} },
            { "greedy-bisection", greedyBisection(s) }, { "equal-layers", equalLayerCuts(m) },
            { "memory-balanced", memoryBalancedCuts(m) },
            { "compute-balanced", computeBalancedPartition(nodeComputeTimes(m), m.stages()).stageStarts }
        };
        // Where the schedule waits on boundary transfers (scoreOf) and they are material (over 2% of
        // some seed's slowest stage), each seed also runs with its cuts moved to the narrowest cut
        // within a quarter of a stage's nodes: on a slow link a cut that sends much (inside
        // attention, its scores) costs more than the compute balance it buys.
        const auto material = [&m](const std::vector<std::size_t>& starts) {
            const auto score = scoreOf(m, starts);
            return score.slowestNs > 1.02 * score.slowestComputeNs;
        };
        const bool waits = m.stages() > 1 && transferWaitShare(m.schedule()) > 0
            && std::any_of(seeds.begin(), seeds.end(),
                [&](const auto& seed) { return !seed.second.empty() && material(seed.second); });
        const std::size_t window = std::max<std::size_t>(1, m.nodeCount() / (4 * static_cast<std::size_t>(m.stages())));
        std::vector<std::size_t> best;
        std::vector<std::pair<std::vector<std::size_t>, std::string>> finalists; // distinct, fitting
        const auto consider = [&](std::vector<std::size_t> seed, const std::string& name) {
            const auto start = seed;
            if (o.refineReach > 0)
                seed = refineBoundaries(s, std::move(seed), o.refineReach);
            const auto score = scoreOf(m, seed);
            if (score.overBytes > 0)
                return;
            const auto label = name + (seed != start ? " refined" : "");
            if (std::none_of(finalists.begin(), finalists.end(), [&](const auto& f) { return f.first == seed; }))
                finalists.emplace_back(seed, label);
            if (best.empty() || score < scoreOf(m, best)) {
                best = seed;
                winner = label;
            }
        };
        for (const auto& [name, start] : seeds) {
            if (start.empty())
                continue;
            consider(start, name);
            if (waits) {
                auto narrowed = narrowWaistCuts(m, start, window);
                if (narrowed != start)
                    consider(std::move(narrowed), std::string(name) + " narrowed");
            }
        }
        // Where the transfers are a material part of the slowest stage's cycle, how they compound
        // along the chain (a transfer-bound 1F1B waits on more than one round trip a slot) is
        // the simulator's to say: the finalists are ranked by their simulated iteration.
        if (waits && o.rankBySimulation && finalists.size() > 1 && material(best))
            best = fastestSimulated(s, finalists, best, winner);
        return best;
    }

    // `winner`: the portfolio's winning seed (dawnpiper only).
    std::vector<std::size_t> runAlgorithm(const StageModel& m, const PlannerOptions& o, std::string& winner)
    {
        const Search s(m, o);
        switch (o.algorithm) {
        case PlanAlgorithm::DawnPiperPaper: {
            // Algorithm 1 as published: BiPar + AdjacentPartition over [rho_cb, rho_mb] only.
            PlannerOptions paper = o;
            paper.widenCandidates = 0;
            DawnPiper d(m, paper);
            const auto r = d.solve();
            return r.time < kInfinity ? withZero(r.cuts) : std::vector<std::size_t> {};
        }
        case PlanAlgorithm::DawnPiper:
            return dawnPiperPortfolio(m, o, winner);
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
            return exhaustiveStarts(s);
        }
        case PlanAlgorithm::MixedPipe:
            break; // findPlan builds its Plan (mixed_pipe.cpp)
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

int Plan::deviceCount() const
{
    if (stageDevices.empty())
        return schedule.devices();
    std::uint32_t count = 0;
    for (auto d : stageDevices)
        count = std::max(count, d.value + 1);
    return static_cast<int>(count);
}

std::string Plan::stageDevicesText() const
{
    std::string out =
        std::to_string(stageDevices.size()) + " stages on " + std::to_string(deviceCount()) + " devices, stage:device";
    for (std::size_t s = 0; s < stageDevices.size(); ++s)
        out += " " + std::to_string(s) + ":" + std::to_string(stageDevices[s].value);
    return out;
}

Schedule planSchedule(const Plan& plan)
{
    auto schedule = generateSchedule(plan.schedule);
    if (plan.stageDevices.empty())
        return schedule;
    if (!plan.partition.dataflow() || plan.stages.size() != plan.stageDevices.size())
        return placeStages(schedule, plan.stageDevices);
    // A dataflow plan: its stages' own dependencies (direct sends) and times order each device.
    const auto S = plan.stages.size();
    StageFlow flow { std::vector<std::vector<StageId>>(S), std::vector<std::vector<StageId>>(S), {}, {} };
    for (std::size_t s = 0; s < S; ++s) {
        const auto& e = plan.stages[s];
        const StageId id(static_cast<std::uint32_t>(s));
        flow.forwardNs.push_back(e.cost.forwardNs);
        flow.backwardNs.push_back(e.timeNs - e.cost.forwardNs); // the recompute runs inside B
        for (const auto& send : e.cost.forwardSends)
            flow.producers[send.stage.index()].push_back(id);
        for (const auto& send : e.cost.backwardSends)
            flow.consumers[send.stage.index()].push_back(id);
    }
    return placeStages(schedule, plan.stageDevices, flow);
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
    const bool searchesMemory = options.algorithm == PlanAlgorithm::DawnPiper
        || options.algorithm == PlanAlgorithm::DawnPiperPaper || options.algorithm == PlanAlgorithm::PipeDreamMemory
        || options.algorithm == PlanAlgorithm::Exhaustive;
    if (searchesMemory && !model.parametersCanFit()) {
        // Answered from the lower bound at once: no partition of contiguous stages can hold the
        // parameters' state, whatever the activations, swaps or recomputes. (The memory-unaware
        // partitioners are quick and still report their own cuts with each stage's excess.)
        plan.algorithm = std::string(toString(options.algorithm));
        plan.schedule = model.schedule();
        plan.microBatch = model.microBatch();
        plan.reason = "no partition into " + std::to_string(model.stages()) + " stages fits "
            + std::to_string(static_cast<std::int64_t>(model.capacityBytes()))
            + " bytes per device: in every one some stage's parameters, gradients and optimizer states alone "
              "exceed it (the whole model's: "
            + std::to_string(
                static_cast<std::int64_t>(model.minimumStaticBytes(0, model.nodeCount(), model.stages() - 1)))
            + " bytes)";
        plan.searchSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (options.progress)
            options.progress(1.0);
        return plan;
    }
    try {
        std::string winner;
        const auto starts = options.algorithm == PlanAlgorithm::MixedPipe ? std::vector<std::size_t> {}
                                                                          : runAlgorithm(model, options, winner);
        if (options.algorithm == PlanAlgorithm::MixedPipe) {
            plan = planMixedPipe(model, options).plan; // with its stage-to-device map and node order
        } else if (starts.empty()) {
            plan.algorithm = std::string(toString(options.algorithm));
            plan.schedule = model.schedule();
            plan.microBatch = model.microBatch();
            plan.reason = "no partition into " + std::to_string(model.stages()) + " stages fits "
                + std::to_string(static_cast<std::int64_t>(model.capacityBytes())) + " bytes per device";
        } else {
            plan = evaluatePlan(model, Partition { starts }, std::string(toString(options.algorithm)));
            plan.seed = winner;
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
    case PlanAlgorithm::DawnPiperPaper:
        return "dawnpiper-paper";
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
    case PlanAlgorithm::MixedPipe:
        return "mixed-pipe";
    }
    return "dawnpiper";
}

const std::vector<PlanAlgorithm>& allPlanAlgorithms()
{
    static const std::vector<PlanAlgorithm> kAll = {
        PlanAlgorithm::DawnPiper,
        PlanAlgorithm::DawnPiperPaper,
        PlanAlgorithm::PipeDream,
        PlanAlgorithm::PipeDreamMemory,
        PlanAlgorithm::GPipe,
        PlanAlgorithm::ComputeBalanced,
        PlanAlgorithm::MemoryBalanced,
        PlanAlgorithm::Exhaustive,
        PlanAlgorithm::MixedPipe,
    };
    return kAll;
}

std::string outOfReach(PlanAlgorithm algorithm, std::size_t nodes, int stages)
{
    if (algorithm != PlanAlgorithm::Exhaustive || (nodes <= 80 && stages <= 5))
        return {};
    return "exhaustive search is limited to 80 nodes and 5 stages (the graph has " + std::to_string(nodes)
        + " nodes, the plan " + std::to_string(stages) + " stages)";
}

std::vector<PlanAlgorithm> everyPlanAlgorithmFor(std::size_t nodes, int stages)
{
    std::vector<PlanAlgorithm> out;
    for (auto a : allPlanAlgorithms()) {
        if (outOfReach(a, nodes, stages).empty())
            out.push_back(a);
    }
    return out;
}

PlanAlgorithm parsePlanAlgorithm(std::string_view text)
{
    return parseByName("planning algorithm", text, allPlanAlgorithms());
}

namespace {

    nlohmann::ordered_json tensorIds(const std::vector<TensorId>& ids)
    {
        auto out = nlohmann::ordered_json::array();
        for (auto id : ids)
            out.push_back(id.value);
        return out;
    }

    nlohmann::ordered_json sendList(const std::vector<StageSend>& sends)
    {
        auto out = nlohmann::ordered_json::array();
        for (const auto& s : sends)
            out.push_back({ { "stage", s.stage.value }, { "bytes", s.bytes } });
        return out;
    }

} // namespace

std::string planToJson(const Plan& plan)
{
    nlohmann::ordered_json stages = nlohmann::ordered_json::array();
    for (const auto& s : plan.stages) {
        stages.push_back({ { "time_ms", s.timeNs / 1e6 }, { "overhead_ms", s.overheadNs / 1e6 },
            { "peak_bytes", s.peakBytes }, { "fits", s.fits }, { "parameters", s.cost.parameterCount },
            { "activation_bytes", s.cost.activationBytes }, { "swapped_bytes", s.memoryPlan.swappedBytes },
            { "recomputed_bytes", s.memoryPlan.recomputedBytes }, { "kept_input_bytes", s.memoryPlan.keptInputBytes },
            { "send_bytes", s.cost.sendForwardBytes }, { "swapped_tensors", tensorIds(s.memoryPlan.swappedTensors) },
            { "recomputed_tensors", tensorIds(s.memoryPlan.recomputedTensors) } });
        if (!s.cost.forwardSends.empty())
            stages.back()["send_to"] = sendList(s.cost.forwardSends);
    }
    nlohmann::ordered_json j = { { "algorithm", plan.algorithm }, { "schedule", scheduleName(plan.schedule) },
        { "stages", plan.schedule.stages }, { "micro_batches", plan.schedule.microBatches },
        { "micro_batch", plan.microBatch }, { "cuts", plan.partition.cutsText() }, { "feasible", plan.feasible },
        { "reason", plan.reason }, { "slowest_stage_ms", plan.slowestStageNs / 1e6 },
        { "search_seconds", plan.searchSeconds }, { "seed", plan.seed }, { "stage_details", stages } };
    if (!plan.stageDevices.empty()) {
        j["devices"] = plan.deviceCount();
        j["stage_devices"] = nlohmann::ordered_json::array();
        for (auto d : plan.stageDevices)
            j["stage_devices"].push_back(d.value);
    }
    if (plan.partition.dataflow()) { // the order "cuts" counts in
        j["node_order"] = nlohmann::ordered_json::array();
        for (auto n : plan.partition.nodeOrder)
            j["node_order"].push_back(n.value);
    }
    if (const auto& sim = plan.simulation)
        j["simulation"] = { { "iteration_ms", sim->iterationNs / 1e6 }, { "samples_per_second", sim->samplesPerSecond },
            { "bubble_fraction", sim->bubbleFraction }, { "peak_bytes", sim->peakBytes },
            { "out_of_memory", sim->outOfMemory } };
    return j.dump(2);
}

} // namespace ps
