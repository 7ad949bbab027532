// T5 v1.0 (Raffel et al. 2020) as Hugging Face's T5ForConditionalGeneration: RMS layer norms,
// bias-free projections, relative position bias computed in each stack's first block and shared
// by the others, ReLU feed-forward, lm_head tied to the shared embedding (scaled by d_model^-0.5).
#include "zoo/zoo_builders.h"

#include <cmath>
#include <cstdlib>

namespace ps::zoo {
namespace {

    struct Stack
    {
        const char* name; // "encoder" / "decoder"
        std::int64_t length; // tokens
        std::int64_t blocks;
        std::int32_t firstLayer; // global layer index of block 0
        bool causal;
    };

    AttentionSpec t5Attention(const ModelConfig& c, bool causal)
    {
        AttentionSpec spec;
        spec.heads = c.heads;
        spec.headDim = c.effectiveHeadDim();
        spec.causal = causal;
        spec.bias = false;
        spec.scaleScores = false;
        spec.dropout = c.dropout;
        return spec;
    }

    // T5's bucket of a relative position (Raffel et al. 2020; HF _relative_position_bucket): exact
    // buckets for small distances, logarithmic ones up to max_distance 128; the encoder tells
    // directions apart with half the buckets each, the causal decoder only looks back.
    std::int64_t relativeBucket(std::int64_t relative, bool causal, std::int64_t buckets)
    {
        constexpr double kMaxDistance = 128;
        std::int64_t bucket = 0;
        if (!causal) {
            buckets /= 2;
            bucket += relative > 0 ? buckets : 0;
            relative = std::abs(relative);
        } else {
            relative = -std::min<std::int64_t>(relative, 0);
        }
        const auto exact = buckets / 2;
        if (relative < exact)
            return bucket + relative;
        const auto large = exact
            + static_cast<std::int64_t>(std::log(static_cast<double>(relative) / static_cast<double>(exact))
                / std::log(kMaxDistance / static_cast<double>(exact)) * static_cast<double>(buckets - exact));
        return bucket + std::min(large, buckets - 1);
    }

    // (Tq, Tk) bucket ids -> (H, Tq, Tk) bias, owned by block 0's self-attention.
    TensorId relativeBias(GraphBuilder& b, const ModelConfig& c, std::int64_t length, bool causal)
    {
        std::vector<std::int64_t> ids;
        for (std::int64_t q = 0; q < length; ++q) {
            for (std::int64_t k = 0; k < length; ++k)
                ids.push_back(relativeBucket(k - q, causal, c.relativeBuckets));
        }
        const auto buckets = b.constant("relative_position_buckets", { length, length }, ids);
        const auto table = b.parameter("relative_attention_bias.weight", { c.relativeBuckets, c.heads });
        const auto bias = b.op(OpType::Embedding, "relative_attention_bias", { buckets, table });
        return b.op(
            OpType::Transpose, "relative_attention_bias_transpose", { bias }, { { "perm", Shape { 2, 0, 1 } } });
    }

    TensorId residualAttention(GraphBuilder& b, TensorId x, TensorId kv, const AttentionSpec& spec,
        const ModelConfig& c, const std::string& layer, const std::string& module)
    {
        ScopeGuard scope(b, layer);
        const auto h = rmsNorm(b, x, "layer_norm");
        TensorId a;
        {
            ScopeGuard inner(b, module);
            a = attention(b, h, kv.valid() ? kv : h, spec);
        }
        return b.op(OpType::Add, "residual", { x, dropout(b, a, c.dropout, "dropout") });
    }

    TensorId feedForward(GraphBuilder& b, TensorId x, const ModelConfig& c, const std::string& layer)
    {
        ScopeGuard scope(b, layer);
        auto h = rmsNorm(b, x, "layer_norm");
        {
            ScopeGuard inner(b, "DenseReluDense");
            h = b.op(OpType::Relu, "relu", { linear(b, h, c.effectiveFfn(), false, "wi") });
            h = linear(b, dropout(b, h, c.dropout, "dropout"), c.hidden, false, "wo");
        }
        return b.op(OpType::Add, "residual", { x, dropout(b, h, c.dropout, "dropout") });
    }

    TensorId runStack(GraphBuilder& b, TensorId x, TensorId encoderOut, const Stack& s, const ModelConfig& c)
    {
        ScopeGuard scope(b, s.name);
        TensorId bias;
        for (std::int64_t i = 0; i < s.blocks; ++i) {
            b.setLayer(s.firstLayer + static_cast<std::int32_t>(i));
            ScopeGuard block(b, "block." + std::to_string(i));
            if (i == 0) {
                ScopeGuard owner(b, "layer.0.SelfAttention");
                bias = relativeBias(b, c, s.length, s.causal);
            }
            auto self = t5Attention(c, s.causal);
            self.positionBias = bias;
            x = residualAttention(b, x, TensorId(), self, c, "layer.0", "SelfAttention");
            if (encoderOut.valid())
                x = residualAttention(b, x, encoderOut, t5Attention(c, false), c, "layer.1", "EncDecAttention");
            x = feedForward(b, x, c, encoderOut.valid() ? "layer.2" : "layer.1");
        }
        b.setLayer(kNoLayer);
        return dropout(b, rmsNorm(b, x, "final_layer_norm"), c.dropout, "dropout");
    }

} // namespace

Graph buildT5(const ModelConfig& c)
{
    GraphBuilder b(modelInfo(c));
    const auto decoderLength = c.effectiveDecoderSeq();
    const auto ids = b.input("input_ids", { c.microBatch, c.seq }, DType::I64);
    const auto decoderIds = b.input("decoder_input_ids", { c.microBatch, decoderLength }, DType::I64);
    const auto labels = b.input("labels", { c.microBatch, decoderLength }, DType::I64);
    const auto shared = b.parameter("shared.weight", { c.vocab, c.hidden });

    auto enc = dropout(
        b, b.op(OpType::Embedding, "encoder.embed_tokens", { ids, shared }), c.dropout, "encoder.embed_dropout");
    enc = runStack(b, enc, TensorId(), { "encoder", c.seq, c.layers, 0, false }, c);
    auto dec = dropout(
        b, b.op(OpType::Embedding, "decoder.embed_tokens", { decoderIds, shared }), c.dropout, "decoder.embed_dropout");
    dec = runStack(
        b, dec, enc, { "decoder", decoderLength, c.decoderLayers, static_cast<std::int32_t>(c.layers), true }, c);

    dec =
        b.op(OpType::Scale, "lm_head_scale", { dec }, { { "scale", 1.0 / std::sqrt(static_cast<double>(c.hidden)) } });
    const auto logits = b.op(OpType::MatMul, "lm_head", { dec, shared }, { { "trans_b", std::int64_t { 1 } } }); // tied
    return b.finish({ b.op(OpType::CrossEntropy, "loss", { logits, labels }) });
}

} // namespace ps::zoo
