#include "report/dawnpiper_methods.h"

#include "plan/zero_baseline.h"
#include "report/reproduction.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace ps::detail {

// The paper's rows. DPiper-S and DPiper-AS run Algorithm 1 (`dawnpiper-paper`, §4.2 with Alg. 2's
// balanced positions). SPP is GPipe-style in the paper (§2: "SPP, e.g. GPipe", micro-batches =
// stages, §5.1), so DPiper-S runs the same schedule as its GPipe baseline; the paper does not say
// which sync schedule it used, so 1F1B is measured beside it (dawnVariants()).
std::vector<DawnMethod> dawnMethods()
{
    const PlannerLimits none { 0, false, false, false };
    const PlannerLimits sr { 0, true, true, false };
    const PlannerLimits checkpoint { 0, false, false, true };
    const auto paper = PlanAlgorithm::DawnPiperPaper;
    return {
        { "table1_sync", "None", "ZeRO-2", "zero-2", PlanAlgorithm::GPipe, none, true, "" },
        { "table1_sync", "None", "ZeRO-3", "zero-3", PlanAlgorithm::GPipe, none, true, "" },
        { "table1_sync", "None", "GPipe", "gpipe", PlanAlgorithm::GPipe, none, true, "" },
        { "table1_sync", "None", "DPiper-S", "gpipe", paper, none, true, "" },
        { "table1_sync", "R", "GPipe", "gpipe", PlanAlgorithm::GPipe, checkpoint, true, "" },
        { "table1_sync", "S+R", "DPiper-S", "gpipe", paper, sr, true, "" },
        { "table2_async", "None", "PipeDream", "pipedream", PlanAlgorithm::PipeDream, none, false, "" },
        { "table2_async", "None", "DPiper-AS", "pipedream", paper, none, false, "" },
        { "table2_async", "S+R", "DPiper-AS", "pipedream", paper, sr, false, "" },
    };
}

// Columns the paper does not have: DPiper-S under sync 1F1B (the open schedule question), and
// PipeStudio's own DawnPiper search (BiPar plus seeds and refinement, `dawnpiper`) under each.
std::vector<DawnMethod> dawnVariants()
{
    const PlannerLimits none { 0, false, false, false };
    const PlannerLimits sr { 0, true, true, false };
    std::vector<DawnMethod> out;
    for (const auto& [mo, limits] : { std::pair { "None", none }, std::pair { "S+R", sr } }) {
        out.push_back(
            { "table1_sync", mo, "DPiper-S", "1f1b", PlanAlgorithm::DawnPiperPaper, limits, true, "Alg. 1, 1F1B" });
        out.push_back(
            { "table1_sync", mo, "DPiper-S", "gpipe", PlanAlgorithm::DawnPiper, limits, true, "ours, GPipe" });
        out.push_back({ "table1_sync", mo, "DPiper-S", "1f1b", PlanAlgorithm::DawnPiper, limits, true, "ours, 1F1B" });
    }
    for (const auto& [mo, limits] : { std::pair { "None", none }, std::pair { "S+R", sr } })
        out.push_back(
            { "table2_async", mo, "DPiper-AS", "pipedream", PlanAlgorithm::DawnPiper, limits, false, "ours" });
    return out;
}

std::vector<DawnMethod> dawnAllMethods()
{
    auto all = dawnMethods();
    const auto more = dawnVariants();
    all.insert(all.end(), more.begin(), more.end());
    return all;
}

// Our cell: the largest batch in the paper's definition for this method, model and stage count.
double dawnBatch(const DawnMethod& m, const Graph& graph, const Profile& profile, const Cluster& cluster, int stages,
    std::map<PlanAlgorithm, double>& searchSeconds)
{
    if (m.schedule.starts_with("zero-")) { // data parallel: the whole model on each device
        const int stage = m.schedule == "zero-2" ? 2 : 3;
        return stages
            * zeroMaxMicroBatch(graph, profile, stages, stage, static_cast<double>(cluster.device.memoryBytes));
    }
    const auto spec = parseScheduleSpec(m.schedule, stages, stages); // sync: M = stages (§5.1)
    PlannerOptions options;
    options.algorithm = m.algorithm;
    options.limits = m.limits;
    const auto r = findMaxMicroBatch(graph, profile, spec, cluster, options, 1 << 12);
    if (m.algorithm != PlanAlgorithm::GPipe && m.algorithm != PlanAlgorithm::PipeDream
        && r.microBatch > 0) { // §5.4: search under 1 s
        const StageModel model(graph, profile, spec, cluster, r.microBatch, m.limits);
        const auto start = std::chrono::steady_clock::now();
        [[maybe_unused]] const auto plan = findPlan(model, options);
        auto& longest = searchSeconds[m.algorithm];
        longest = std::max(longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    return m.miniBatch ? r.microBatch * spec.microBatches : r.microBatch;
}

std::string batchCellText(double v)
{
    return std::isfinite(v) ? fixed(v, 0) : "-";
}

} // namespace ps::detail
