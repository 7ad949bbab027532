// DawnPiper's Tables 1-2 methods as PipeStudio runs them (dawnpiper_report.cpp): the paper's rows
// (Algorithm 1 for DPiper-S/AS under the schedule of their baselines, GPipe, PipeDream, ZeRO), the
// columns the paper lacks, and each cell's largest batch in the paper's definition.
// Depends on: cluster/, cost/, plan/, report/reproduction.h.
#pragma once

#include "cluster/cluster.h"
#include "cost/profile.h"
#include "graph/graph.h"
#include "plan/planner.h"

#include <limits>
#include <map>
#include <string>
#include <vector>

namespace ps::detail {

// A method of the tables as PipeStudio runs it.
struct DawnMethod
{
    std::string table; // "table1_sync" or "table2_async"
    std::string mo; // the paper's "MO" column: None, R, S+R
    std::string paperName; // "DPiper-S"
    std::string schedule; // gpipe, 1f1b, pipedream; "zero-2"/"zero-3": data parallel
    PlanAlgorithm algorithm = PlanAlgorithm::DawnPiper;
    PlannerLimits limits;
    bool miniBatch = false; // the cell is M x micro-batch (sync) rather than a micro-batch
    // Empty: the paper's row, its method as the paper describes it. Else a column the paper does
    // not have: an alternative where it is silent, or PipeStudio's own search ("portfolio, 1F1B").
    std::string variant;

    [[nodiscard]] std::string key() const
    {
        return mo + " " + paperName + (variant.empty() ? "" : " (" + variant + ")");
    }
    // How the cell was computed, printed beside it.
    [[nodiscard]] std::string asRun() const
    {
        if (schedule.starts_with("zero-"))
            return schedule + " data parallel";
        return std::string(toString(algorithm)) + ", " + schedule + (limits.checkpointStages ? " + checkpoints" : "")
            + (limits.allowSwap || limits.allowRecompute ? " + swap/recompute plan" : "");
    }
};

// A cell of the tables: ours and the paper's (NaN where it has none).
struct DawnCell
{
    double ours = 0;
    double paper = std::numeric_limits<double>::quiet_NaN();
};

// The cells of Tables 1 and 2 by table, then method (DawnMethod::key), then "model stages".
using DawnCells = std::map<std::string, std::map<std::string, std::map<std::string, DawnCell>>>;

// The paper's rows, in its order.
[[nodiscard]] std::vector<DawnMethod> dawnMethods();
// The columns the paper does not have: DPiper-S under sync 1F1B, PipeStudio's own search.
[[nodiscard]] std::vector<DawnMethod> dawnVariants();
[[nodiscard]] std::vector<DawnMethod> dawnAllMethods();
// Our cell: the largest batch in the paper's definition for `m`, model and stage count; the search
// time of DawnPiper's algorithms goes to `searchSeconds` (the longest per algorithm).
[[nodiscard]] double dawnBatch(const DawnMethod& m, const Graph& graph, const Profile& profile, const Cluster& cluster,
    int stages, std::map<PlanAlgorithm, double>& searchSeconds);
// A batch as a cell shows it: whole, "-" where none.
[[nodiscard]] std::string batchCellText(double v);

} // namespace ps::detail
