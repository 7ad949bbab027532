// A scale configuration handed to the engines that run at that scale (issue P17, deliverable 6):
// Megatron-LM's pretrain_gpt.py flags under a torchrun launch across the nodes, and a DeepSpeed
// configuration with the same batch split. Flag names are Megatron-LM's (core_r0.x arguments.py).
// Depends on: scale/scale_model.h.
#pragma once

#include "scale/scale_model.h"

#include <string>

namespace ps {

// `torchrun --nnodes N --nproc-per-node G ... pretrain_gpt.py` with the model's sizes, t, p, the
// interleaved schedule's layers per virtual stage, micro and global batch, recomputation and
// bf16; one line per flag group, ending in a newline.
[[nodiscard]] std::string megatronLaunch(const GptShape& model, const ScaleConfig& config, const NodeSpec& node);
// DeepSpeed's JSON: train_batch_size = B, train_micro_batch_size_per_gpu = b,
// gradient_accumulation_steps = m, bf16, activation checkpointing. DeepSpeed takes the pipeline
// and tensor sizes in code, not in this file (PipelineModule(num_stages=p), the model's mpu of t).
[[nodiscard]] std::string deepspeedConfig(const ScaleConfig& config);

} // namespace ps
