// DawnPiper §5.3's figures beside Tables 1-2 (dawnpiper_report.cpp): Figs. 6 and 7, training speed
// against batch size, 4 stages (BERT, GPT-2, T5) and 8 stages (GPT-2, T5), synchronous and
// asynchronous, DawnPiper's Algorithm 1 with its memory optimizer beside the baselines PipeStudio
// models (GPipe, with torchgpipe's checkpoints once it no longer fits; PipeDream; the paper's text
// compares with vPipe, which is not modelled); Fig. 8, the async plan's stage balance.
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

// Fig. 8: how balanced the async plan's stages are (T5, 8 GPUs, micro-batch 110 with memory
// optimization, or the largest that fits): the spread between the longest and the shortest stage
// time, over the longest, and the mean share of each GPU's memory the plan uses. Quick reports use
// their one model. Appends to `md`.
void addStageBalance(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
    std::string& md);

// The GPT-2 asynchronous headline (DPiper-AS with swap and recompute over PipeDream without, Table
// 2) again on GPUs that keep a reserve of 2, 4 and 6 GB from the tensors: the baseline's cell is a
// micro-batch of two or three, so a sample of granularity moves the ratio by half. Appends to `md`.
void addAsyncReserve(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<int>& stageCounts, const ReproduceOptions& options, std::string& md);

// Appends the Figs. 6-7 section (tables, figures, claims) to `report`. `models` and `stageCounts`
// are the tables' (Fig. 7 runs where 8 is among them, on its models other than BERT).
void addTrainingSpeed(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
    const ReproduceOptions& options, PaperReport& report);

} // namespace ps::detail
