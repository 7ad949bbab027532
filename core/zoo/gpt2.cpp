// GPT-2 (Radford et al. 2019) as Hugging Face's GPT2LMHeadModel lays it out: pre-LN blocks,
// fused c_attn projection, GELU MLP, tied lm_head. Scope names follow the released checkpoints.
#include "zoo/zoo_builders.h"

namespace ps::zoo {
namespace {

    TensorId gpt2Block(GraphBuilder& b, TensorId x, const ModelConfig& c)
    {
        AttentionSpec spec;
        spec.heads = c.heads;
        spec.headDim = c.effectiveHeadDim();
        spec.causal = true;
        spec.dropout = c.dropout;
        spec.fusedQkv = "c_attn";
        spec.projections[3] = "c_proj";

        auto h = layerNorm(b, x, "ln_1");
        {
            ScopeGuard scope(b, "attn");
            h = attention(b, h, h, spec);
            h = dropout(b, h, c.dropout, "resid_dropout");
        }
        x = b.op(OpType::Add, "attn_residual", { x, h });
        h = layerNorm(b, x, "ln_2");
        {
            ScopeGuard scope(b, "mlp");
            h = linear(b, h, c.effectiveFfn(), true, "c_fc");
            h = b.op(OpType::Gelu, "gelu", { h }, { { "approximate", std::string("tanh") } });
            h = linear(b, h, c.hidden, true, "c_proj");
            h = dropout(b, h, c.dropout, "dropout");
        }
        return b.op(OpType::Add, "mlp_residual", { x, h });
    }

} // namespace

Graph buildGpt2(const ModelConfig& c)
{
    GraphBuilder b(modelInfo(c));
    const auto ids = b.input("input_ids", { c.microBatch, c.seq }, DType::I64);
    const auto labels = b.input("labels", { c.microBatch, c.seq }, DType::I64);
    const auto positions = b.constant("position_ids", { c.seq }, arange(c.seq));
    const auto wte = b.parameter("wte.weight", { c.vocab, c.hidden });
    const auto wpe = b.parameter("wpe.weight", { c.maxPositions, c.hidden });

    const auto tokens = b.op(OpType::Embedding, "wte", { ids, wte }); // (B, T, C)
    const auto pos = b.op(OpType::Embedding, "wpe", { positions, wpe }); // (T, C)
    auto x = dropout(b, b.op(OpType::Add, "embed_add", { tokens, pos }), c.dropout, "drop");
    for (std::int64_t i = 0; i < c.layers; ++i) {
        b.setLayer(static_cast<std::int32_t>(i));
        ScopeGuard scope(b, "h." + std::to_string(i));
        x = gpt2Block(b, x, c);
    }
    b.setLayer(kNoLayer);
    x = layerNorm(b, x, "ln_f");
    const auto logits = b.op(OpType::MatMul, "lm_head", { x, wte }, { { "trans_b", std::int64_t { 1 } } }); // tied
    const auto loss = b.op(OpType::CrossEntropy, "loss", { logits, labels });
    return b.finish({ loss });
}

} // namespace ps::zoo
