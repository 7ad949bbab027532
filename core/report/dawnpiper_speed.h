// DawnPiper §5.3, Figs. 6 and 7: training speed against batch size, 4 stages (BERT, GPT-2, T5) and 8
// stages (GPT-2, T5), synchronous and asynchronous, DawnPiper's Algorithm 1 with its memory
// optimizer beside the baselines PipeStudio models (GPipe, with torchgpipe's checkpoints once it no
// longer fits; PipeDream). The paper's own baseline in the text is vPipe, which is not modelled.
// Depends on: cluster/, cost/, plan/, zoo/, report/reproduction.h.
#pragma once

#include "cluster/cluster.h"
#include "report/reproduction.h"

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <string>
#include <vector>

namespace ps::detail {

// The largest batch Tables 1-2 found for DawnPiper with swap and recompute: `sync` the mini-batch
// of DPiper-S, else DPiper-AS's micro-batch, for a model ("bert") and stage count.
using LargestBatch = std::function<double(bool sync, const std::string& model, int stages)>;

// Appends the Figs. 6-7 section (tables, figures, claims) to `report`. `models` and `stageCounts`
// are the tables' (Fig. 7 runs where 8 is among them, on its models other than BERT).
void addTrainingSpeed(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
    const ReproduceOptions& options, PaperReport& report);

} // namespace ps::detail
