// Internal to the zoo: per-family graph builders and the transformer pieces they share.
#pragma once

#include "graph/graph_builder.h"
#include "zoo/model_config.h"

#include <array>
#include <string>

namespace ps::zoo {

Graph buildGpt2(const ModelConfig& config);
Graph buildBert(const ModelConfig& config);
Graph buildT5(const ModelConfig& config);
Graph buildMlp(const ModelConfig& config);
Graph buildResNet(const ModelConfig& config);
Graph buildAmoebaNet(const ModelConfig& config);

ModelInfo modelInfo(const ModelConfig& config);

// x @ W (+ b) with W (in, out) and b (out) named "<name>.weight" / "<name>.bias".
// 0, 1, ..., n - 1 (position ids).
std::vector<std::int64_t> arange(std::int64_t n);

TensorId linear(GraphBuilder& b, TensorId x, std::int64_t out, bool bias, const std::string& name);
TensorId layerNorm(GraphBuilder& b, TensorId x, const std::string& name);
TensorId rmsNorm(GraphBuilder& b, TensorId x, const std::string& name);
// Returns x unchanged when p == 0, so configurations without dropout have no dropout nodes.
TensorId dropout(GraphBuilder& b, TensorId x, double p, const std::string& name);

struct AttentionSpec
{
    std::int64_t heads = 1;
    std::int64_t headDim = 1;
    bool causal = false;
    bool bias = true; // biases on the projections
    bool scaleScores = true; // T5 folds 1/sqrt(d) into its initialisation and does not scale
    double dropout = 0;
    std::string fusedQkv; // non-empty: one projection of that name producing q, k and v (GPT-2)
    std::array<std::string, 4> projections { "q", "k", "v", "o" };
    TensorId positionBias; // (H, Tq, Tk) added to the scores (T5); invalid for none
    TensorId paddingMask; // (B, Tk) (BERT); invalid for none
};

// Multi-head attention of queries from xq over keys/values from xkv (the same tensor for
// self-attention). Returns the output projection, (B, Tq, C).
TensorId attention(GraphBuilder& b, TensorId xq, TensorId xkv, const AttentionSpec& spec);

// Convolutional pieces (cnn_blocks.cpp). A (kernelH x kernelW) convolution without bias, padded by
// half its kernel on each side (the size kept at stride 1), its weight "<name>.weight".
struct Conv2d
{
    std::int64_t out = 0;
    std::int64_t kernelH = 1;
    std::int64_t kernelW = 1;
    std::int64_t strideH = 1;
    std::int64_t strideW = 1;
};

TensorId conv2d(GraphBuilder& b, TensorId x, const Conv2d& c, const std::string& name);
// BatchNorm over channels (dim 1): gamma and beta parameters, running statistics constants.
TensorId batchNorm2d(GraphBuilder& b, TensorId x, const std::string& name);
TensorId relu(GraphBuilder& b, TensorId x, const std::string& name);

struct Pool2d
{
    std::int64_t kernel = 1;
    std::int64_t stride = 1;
    std::int64_t pad = 0;
};

// MaxPool or AvgPool (the average over the window's pixels inside the image: count_include_pad 0).
TensorId pool2d(GraphBuilder& b, OpType op, TensorId x, const Pool2d& p, const std::string& name);
// Global average pooling, flattening, a fully connected layer "fc" and the cross-entropy loss.
TensorId classifierHead(GraphBuilder& b, TensorId x, TensorId labels, std::int64_t classes);

} // namespace ps::zoo
