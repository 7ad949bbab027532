// Megatron-LM Table 1's rows as the reports run them (megatron_report.cpp, published_report.cpp):
// each row's model and the configuration the paper leaves partly open, as its artifact scripts ran it.
// Depends on: scale/scale_model.h, nlohmann-json.
#pragma once

#include "scale/scale_model.h"

#include <nlohmann/json.hpp>

namespace ps::detail {

// The row's sizes and global batch, full recomputation, and what the paper leaves open as NVIDIA's
// examples/sc21/run_table_1.sh ran it (the row's micro_batch, virtual_stages and
// overlap_gradient_reduce; micro-batch 1, 1F1B and no overlap where a row has none).
[[nodiscard]] ScaleConfig megatronPaperConfig(const nlohmann::json& row);
// The row's GPT (layers, width, heads) at the paper's sequence and vocabulary.
[[nodiscard]] GptShape megatronModel(const nlohmann::json& paper, const nlohmann::json& row);

} // namespace ps::detail
