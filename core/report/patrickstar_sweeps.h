// PatrickStar §9's evaluations beside the report's tables (patrickstar_report.cpp): the shared
// search of one paper setup, Fig. 12 at each batch, Fig. 13's multi-GPU throughput against
// DeepSpeed, a sweep of GPU buffers DeepSpeed keeps outside the model (the paper's explanation of
// its Table 3 row), and §9.2.4's 120 GB host at several host shares.
// Depends on: plan/max_model.h, report/reproduction.h.
#pragma once

#include "plan/max_model.h"
#include "report/reproduction.h"

#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <vector>

namespace ps::detail::patrickstar {

// The paper's search on `gpus` V100s with `hostGb` of host memory (§9.1), before any sweep's change.
[[nodiscard]] MaxModelRequest requestFor(const nlohmann::ordered_json& paper, int gpus, double hostGb);
[[nodiscard]] const RungResult* largest(const MaxModelResult& r, TrainingSystem system);
// Billions of parameters of the system's largest model (uncapped: the ladder continues past 12B).
[[nodiscard]] double billions(const MaxModelResult& r, TrainingSystem system);
// "12B (12.1B, b32, 56.4 TF)", or "none".
[[nodiscard]] std::string largestText(const MaxModelResult& r, TrainingSystem system);
[[nodiscard]] const SystemEstimate* rungEstimate(
    const MaxModelResult& r, const std::string& label, TrainingSystem system);

// Fig. 12's rungs on one GPU at each batch per GPU of §9.1 (the report's table takes the best).
void addBatchSweep(const nlohmann::ordered_json& paper, PaperReport& report);
// Fig. 13 (§9.2.3): every paper rung's total throughput on each GPU count of `results`, PatrickStar
// against DeepSpeed (and PyTorch DDP where it fits), beside what the paper's text gives.
void addFigure13(
    const nlohmann::ordered_json& paper, const std::map<int, MaxModelResult>& results, PaperReport& report);
// DeepSpeed's largest model with GPU memory held outside the model, fixed or per process; returns
// the sentence the report's summary says about it.
[[nodiscard]] std::string addZeroBufferSweep(
    const nlohmann::ordered_json& paper, const std::vector<int>& gpuCounts, PaperReport& report);
// §9.2.4's 120 GB host with PatrickStar's chunks allowed 0.8, 0.9 and all of host memory, with and
// without the reference code's build in host memory first.
void addLowHostShares(const nlohmann::ordered_json& paper, PaperReport& report);

} // namespace ps::detail::patrickstar
