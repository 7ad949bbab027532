// DawnPiper ablations that measure why cells sit far from the paper's (dawnpiper_report.cpp calls
// them): the S+R cells split into swap alone and recompute alone, and the CNN's ratios against the
// depth of the network.
// Depends on: report/dawnpiper_methods.h, cluster/, zoo/.
#pragma once

#include "cluster/cluster.h"
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

// The asynchronous S+R DPiper-AS batch over PipeDream's without memory optimization on ResNet-50,
// -101 and -152, beside the paper's AmoebaNet ratio. Appends to `md`.
void addCnnDepthSweep(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<int>& stageCounts, const ReproduceOptions& options, std::string& md);

// BERT's memory waste (1 - mean / largest stage peak, §3.2) under GPipe's cuts at a quarter, a half
// and all of its largest batch, and under PipeDream's at its largest (the paper: about 28% and over
// 40%, §3.2). Appends to `md`.
void addBertMemoryWaste(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const ReproduceOptions& options, std::string& md);

} // namespace ps::detail
