// Transformer pieces shared by the zoo families, one IR node per kernel a framework would launch.
#include "zoo/zoo_builders.h"

#include <cmath>

namespace ps::zoo {
namespace {

    // (B, T, H*D) -> (B, H, T, D)
    TensorId splitHeads(GraphBuilder& b, TensorId x, const AttentionSpec& spec, const std::string& name)
    {
        const Shape s = b.shape(x); // a copy: adding nodes reallocates the tensor table
        const auto r = b.op(
            OpType::Reshape, name + "_heads", { x }, { { "shape", Shape { s[0], s[1], spec.heads, spec.headDim } } });
        return b.op(OpType::Transpose, name + "_transpose", { r }, { { "perm", Shape { 0, 2, 1, 3 } } });
    }

    // (B, H, T, D) -> (B, T, H*D)
    TensorId mergeHeads(GraphBuilder& b, TensorId x)
    {
        const Shape s = b.shape(x); // a copy: adding nodes reallocates the tensor table
        const auto t = b.op(OpType::Transpose, "context_transpose", { x }, { { "perm", Shape { 0, 2, 1, 3 } } });
        return b.op(OpType::Reshape, "context_merge", { t }, { { "shape", Shape { s[0], s[2], s[1] * s[3] } } });
    }

    std::array<TensorId, 3> projectQkv(GraphBuilder& b, TensorId xq, TensorId xkv, const AttentionSpec& spec)
    {
        const auto inner = spec.heads * spec.headDim;
        if (!spec.fusedQkv.empty()) {
            const auto qkv = linear(b, xq, 3 * inner, spec.bias, spec.fusedQkv);
            const auto parts = b.opMulti(OpType::Split, "qkv_split", { qkv },
                { { "axis", std::int64_t { -1 } }, { "sizes", Shape { inner, inner, inner } } });
            return { parts[0], parts[1], parts[2] };
        }
        return { linear(b, xq, inner, spec.bias, spec.projections[0]),
            linear(b, xkv, inner, spec.bias, spec.projections[1]),
            linear(b, xkv, inner, spec.bias, spec.projections[2]) };
    }

} // namespace

ModelInfo modelInfo(const ModelConfig& config)
{
    return { config.name, std::string(toString(config.family)), modelConfigToJson(config), config.microBatch };
}

std::vector<std::int64_t> arange(std::int64_t n)
{
    std::vector<std::int64_t> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
        v[static_cast<std::size_t>(i)] = i;
    return v;
}

TensorId linear(GraphBuilder& b, TensorId x, std::int64_t out, bool bias, const std::string& name)
{
    const auto in = b.shape(x).back();
    const auto w = b.parameter(name + ".weight", { in, out });
    auto y = b.op(OpType::MatMul, name + ".matmul", { x, w });
    if (bias)
        y = b.op(OpType::BiasAdd, name + ".bias_add", { y, b.parameter(name + ".bias", { out }) });
    return y;
}

TensorId layerNorm(GraphBuilder& b, TensorId x, const std::string& name)
{
    const auto c = b.shape(x).back();
    return b.op(OpType::LayerNorm, name,
        { x, b.parameter(name + ".weight", { c }), b.parameter(name + ".bias", { c }) }, { { "epsilon", 1e-5 } });
}

TensorId rmsNorm(GraphBuilder& b, TensorId x, const std::string& name)
{
    const auto c = b.shape(x).back();
    return b.op(OpType::RMSNorm, name, { x, b.parameter(name + ".weight", { c }) }, { { "epsilon", 1e-6 } });
}

TensorId dropout(GraphBuilder& b, TensorId x, double p, const std::string& name)
{
    if (p <= 0)
        return x;
    return b.op(OpType::Dropout, name, { x }, { { "p", p } });
}

TensorId attention(GraphBuilder& b, TensorId xq, TensorId xkv, const AttentionSpec& spec)
{
    const auto hidden = b.shape(xq).back();
    const auto [q, k, v] = projectQkv(b, xq, xkv, spec);
    const auto qh = splitHeads(b, q, spec, "q");
    const auto kh = splitHeads(b, k, spec, "k");
    const auto vh = splitHeads(b, v, spec, "v");
    auto scores = b.op(OpType::MatMul, "scores", { qh, kh }, { { "trans_b", std::int64_t { 1 } } }); // (B, H, Tq, Tk)
    if (spec.scaleScores)
        scores = b.op(
            OpType::Scale, "scale", { scores }, { { "scale", 1.0 / std::sqrt(static_cast<double>(spec.headDim)) } });
    if (spec.positionBias.valid())
        scores = b.op(OpType::Add, "position_bias", { scores, spec.positionBias });
    if (spec.causal || spec.paddingMask.valid()) {
        std::vector<TensorId> in { scores };
        if (spec.paddingMask.valid())
            in.push_back(spec.paddingMask);
        scores = b.op(OpType::Mask, "mask", in, { { "causal", std::int64_t { spec.causal ? 1 : 0 } } });
    }
    auto probs = b.op(OpType::Softmax, "softmax", { scores });
    probs = dropout(b, probs, spec.dropout, "attn_dropout");
    const auto context = b.op(OpType::MatMul, "context", { probs, vh }); // (B, H, Tq, D)
    return linear(b, mergeHeads(b, context), hidden, spec.bias, spec.projections[3]);
}

} // namespace ps::zoo
