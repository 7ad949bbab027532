// Megatron-LM Table 1's rows as the reports run them (megatron_report.cpp, published_report.cpp):
// each row's model and the configuration the paper leaves partly open, fixed by one rule.
// Depends on: scale/scale_model.h, nlohmann-json.
#pragma once

#include "scale/scale_model.h"

#include <nlohmann/json.hpp>

namespace ps::detail {

// Micro-batch 1; the interleaved schedule (the paper's setup: "interleaved 1F1B where PP > 1") with
// the fewest chunks v > 1 that split a stage's layers evenly; full recomputation.
[[nodiscard]] ScaleConfig megatronPaperConfig(const nlohmann::json& row);
// The row's GPT (layers, width, heads) at the paper's sequence and vocabulary.
[[nodiscard]] GptShape megatronModel(const nlohmann::json& paper, const nlohmann::json& row);

} // namespace ps::detail
