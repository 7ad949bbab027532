// Configuration of the built-in model zoo (GPT-2, BERT, T5, MLP, ResNet, AmoebaNet-D) and the graph builders.
//
// Owns: the presets with their published architecture sizes and the entry point that turns a
// configuration into a fine-grained op graph. Depends on: graph/ (no Qt, no CUDA).
#pragma once

#include "graph/graph.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class ModelFamily { Gpt2, Bert, T5, Mlp, ResNet, AmoebaNet };

struct ModelConfig
{
    std::string name = "custom";
    ModelFamily family = ModelFamily::Gpt2;
    // Transformer blocks (T5: encoder blocks); MLP: hidden layers; ResNet: depth; AmoebaNet: normal cells.
    std::int64_t layers = 12;
    std::int64_t decoderLayers = 0; // T5 decoder blocks
    std::int64_t hidden = 768; // d_model; ResNet: the stem's width (64); AmoebaNet: filters (D)
    std::int64_t heads = 12;
    std::int64_t headDim = 0; // 0: hidden / heads (T5-3B uses 128 with hidden 1024)
    std::int64_t ffn = 0; // 0: 4 * hidden
    std::int64_t seq = 1024; // tokens per sample (T5: encoder length); CNNs: the image side in pixels
    std::int64_t decoderSeq = 0; // T5 decoder length; 0: same as seq
    std::int64_t vocab = 50257; // MLP, CNNs: number of classes
    std::int64_t maxPositions = 1024; // learned position table rows (GPT-2, BERT)
    std::int64_t relativeBuckets = 32; // T5 relative attention buckets
    std::int64_t microBatch = 1; // samples per micro-batch: dim 0 of every activation
    double dropout = 0.1; // 0 removes the dropout nodes
    // Each attention as one Attention node (graph/attention_fusion.h) that saves no probabilities
    // (T5's self-attentions, whose scores get a position bias, stay chains).
    bool fusedAttention = false;

    [[nodiscard]] std::int64_t effectiveHeadDim() const
    {
        return headDim > 0 ? headDim : hidden / heads;
    }
    [[nodiscard]] std::int64_t effectiveFfn() const
    {
        return ffn > 0 ? ffn : 4 * hidden;
    }
    [[nodiscard]] std::int64_t effectiveDecoderSeq() const
    {
        return decoderSeq > 0 ? decoderSeq : seq;
    }
    bool operator==(const ModelConfig&) const = default;
};

[[nodiscard]] std::string_view toString(ModelFamily family);

// Names of the presets: gpt2-tiny (byte-level, CPU-sized), gpt2-small ... t5-3b, mlp, resnet-tiny,
// resnet50, resnet101, resnet152, amoebanet-tiny, amoebanet-d.
[[nodiscard]] std::vector<std::string> zooModelNames();
// Throws ps::Error listing the valid names when `name` is unknown.
[[nodiscard]] ModelConfig zooPreset(std::string_view name);
// Throws ps::Error naming the offending field (e.g. hidden not divisible by heads).
void checkModelConfig(const ModelConfig& config);
[[nodiscard]] std::string modelConfigToJson(const ModelConfig& config);
[[nodiscard]] ModelConfig modelConfigFromJson(std::string_view json);

// Builds the op graph for a configuration; the result is validated.
[[nodiscard]] Graph buildZooModel(const ModelConfig& config);
// The same zoo model at another micro-batch size (the graph's own when equal). Throws ps::Error for
// an imported graph, whose shapes were traced at one size.
[[nodiscard]] Graph buildAtMicroBatch(const Graph& graph, std::int64_t microBatch);

} // namespace ps
