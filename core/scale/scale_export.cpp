#include "scale/scale_export.h"

#include <nlohmann/json.hpp>

namespace ps {

std::string megatronLaunch(const GptShape& g, const ScaleConfig& c, const NodeSpec& node)
{
    const int nodes = (c.gpus() + node.gpus - 1) / node.gpus;
    std::string out = "# " + c.text() + " on " + std::to_string(c.gpus()) + " GPUs (" + std::to_string(nodes) + " x "
        + node.id + "); run on every node with its NODE_RANK, adding the data, tokenizer (its vocabulary: "
        + std::to_string(g.vocab) + " here) and optimizer arguments\n";
    out += "torchrun --nnodes " + std::to_string(nodes) + " --nproc-per-node "
        + std::to_string(std::min(node.gpus, c.gpus()))
        + " --node-rank $NODE_RANK --master-addr $MASTER_ADDR --master-port 6000 \\\n";
    out += "  pretrain_gpt.py \\\n";
    out += "  --num-layers " + std::to_string(g.layers) + " --hidden-size " + std::to_string(g.hidden)
        + " --num-attention-heads " + std::to_string(g.heads) + " --seq-length " + std::to_string(g.seq)
        + " --max-position-embeddings " + std::to_string(g.seq) + " \\\n";
    out += "  --tensor-model-parallel-size " + std::to_string(c.tensor) + " --pipeline-model-parallel-size "
        + std::to_string(c.pipeline);
    if (c.chunks > 1)
        out += " --num-layers-per-virtual-pipeline-stage "
            + std::to_string(g.layers / (static_cast<std::int64_t>(c.pipeline) * c.chunks));
    out += " \\\n";
    out += "  --micro-batch-size " + std::to_string(c.microBatch) + " --global-batch-size "
        + std::to_string(c.globalBatch);
    switch (c.recompute) {
    case Recompute::Full:
        out += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
        break;
    case Recompute::Selective:
        out += " --recompute-granularity selective";
        break;
    case Recompute::None:
        break;
    }
    if (c.sequenceParallel)
        out += " --sequence-parallel";
    if (c.zero1)
        out += " --use-distributed-optimizer";
    if (c.overlapGradientReduce)
        out += " --overlap-grad-reduce";
    out += " \\\n  --bf16\n";
    return out;
}

std::string deepspeedConfig(const ScaleConfig& c)
{
    nlohmann::ordered_json j { { "train_batch_size", c.globalBatch },
        { "train_micro_batch_size_per_gpu", c.microBatch }, { "gradient_accumulation_steps", c.microBatches() },
        { "bf16", { { "enabled", true } } },
        { "activation_checkpointing",
            { { "partition_activations", false }, { "contiguous_memory_optimization", false },
                { "number_checkpoints", c.recompute == Recompute::Full ? 1 : 0 } } } };
    if (c.zero1 || c.overlapGradientReduce)
        j["zero_optimization"] = { { "stage", c.zero1 ? 1 : 0 }, { "overlap_comm", c.overlapGradientReduce } };
    return j.dump(2) + "\n";
}

} // namespace ps
