// DawnPiper ablations that measure why cells sit far from the paper's (dawnpiper_report.cpp calls
// them): the S+R cells split into swap alone and recompute alone, the CNN's ratios against the
// depth of the network and its cells against the image side, and the memory GPipe and PipeDream leave unused.
// Depends on: report/dawnpiper_methods.h, cluster/, cost/, plan/, zoo/.
#pragma once

#include "cluster/cluster.h"
#include "cost/profile.h"
#include "graph/graph.h"
#include "plan/planner.h"
#include "report/reproduction.h"

#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

namespace ps::detail {

// Table 1's and 2's S+R DawnPiper cells (Algorithm 1) for `models` (the tables' names, e.g.
// "gpt2") again with swap alone and recompute alone, beside the paper's S+R cell. Appends to `md`.
void addSwapRecomputeSplit(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const ReproduceOptions& options,
    std::string& md);

// The asynchronous S+R DPiper-AS batch over PipeDream's without memory optimization on AmoebaNet-D
// with 6, 12 and the paper's normal cells, beside the paper's AmoebaNet ratio. Appends to `md`.
void addCnnDepthSweep(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<int>& stageCounts, const ReproduceOptions& options, std::string& md);

// The AmoebaNet column's cells on 4 GPUs (memory optimization none, and S+R for DawnPiper) at
// image sides of 224, 288 and 320 pixels, each beside the paper's (which gives no side). Appends
// to `md`.
void addCnnImageSweep(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const ReproduceOptions& options, std::string& md);

// PipeDream's asynchronous cell on the AmoebaNet column without memory optimization, cut by its
// dynamic program over operations and with the cells shared equally among the stages, and the
// DPiper-AS S+R ratio over each beside the paper's. Appends to `md`.
void addCnnPipeDreamCuts(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<int>& stageCounts, const ReproduceOptions& options, std::string& md);

// 1 - mean / largest stage peak of `algorithm`'s plan under `schedule` on `stages` GPUs, without
// memory optimization (or, with `checkpoint`, every stage checkpointed: torchgpipe's "always"), at `share`
// of its largest batch; the batch in `batch`. NaN where no plan has a stage.
[[nodiscard]] double memoryWaste(const Graph& g, const Profile& p, const DeviceSpec& device, const LinkSpec& link,
    int stages, const std::string& schedule, PlanAlgorithm algorithm, bool checkpoint, double share, double& batch);

// BERT's memory waste (1 - mean / largest stage peak, §3.1) under GPipe at a quarter, a half and all
// of its largest batch, with equal-layer cuts, equal-time cuts and every stage checkpointed,
// and under PipeDream's at its largest on GPipe's GPU count and the paper's (the paper: about 28% on
// 4 and over 40% on 8, §3.1). Appends to `md`.
void addBertMemoryWaste(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const ReproduceOptions& options, std::string& md);

} // namespace ps::detail
