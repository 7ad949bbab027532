// BERT (Devlin et al. 2019) as Hugging Face's BertForPreTraining: post-LN encoder, separate
// query/key/value projections, padding mask, pooler, masked-LM head tied to the word embeddings
// and the next-sentence head. Scope names follow the released checkpoints.
#include "zoo/zoo_builders.h"

namespace ps::zoo {
namespace {

    TensorId bertLayer(GraphBuilder& b, TensorId x, TensorId mask, const ModelConfig& c)
    {
        AttentionSpec spec;
        spec.heads = c.heads;
        spec.headDim = c.effectiveHeadDim();
        spec.dropout = c.dropout;
        spec.paddingMask = mask;
        spec.projections = { "self.query", "self.key", "self.value", "output.dense" };
        TensorId h;
        {
            ScopeGuard scope(b, "attention");
            h = dropout(b, attention(b, x, x, spec), c.dropout, "output.dropout");
            h = layerNorm(b, b.op(OpType::Add, "output.residual", { h, x }), "output.LayerNorm");
        }
        auto f = linear(b, h, c.effectiveFfn(), true, "intermediate.dense");
        f = b.op(OpType::Gelu, "intermediate.gelu", { f }, { { "approximate", std::string("none") } });
        f = dropout(b, linear(b, f, c.hidden, true, "output.dense"), c.dropout, "output.dropout");
        return layerNorm(b, b.op(OpType::Add, "output.residual", { f, h }), "output.LayerNorm");
    }

    TensorId embeddings(GraphBuilder& b, const ModelConfig& c, TensorId ids, TensorId types, TensorId& wordTable)
    {
        ScopeGuard scope(b, "embeddings");
        const auto positions = b.constant("position_ids", { c.seq }, arange(c.seq));
        wordTable = b.parameter("word_embeddings.weight", { c.vocab, c.hidden });
        const auto posTable = b.parameter("position_embeddings.weight", { c.maxPositions, c.hidden });
        const auto typeTable = b.parameter("token_type_embeddings.weight", { 2, c.hidden });
        auto x = b.op(OpType::Embedding, "word_embeddings", { ids, wordTable });
        x = b.op(OpType::Add, "add_token_type",
            { x, b.op(OpType::Embedding, "token_type_embeddings", { types, typeTable }) });
        x = b.op(OpType::Add, "add_position",
            { x, b.op(OpType::Embedding, "position_embeddings", { positions, posTable }) });
        return dropout(b, layerNorm(b, x, "LayerNorm"), c.dropout, "dropout");
    }

    TensorId mlmLoss(GraphBuilder& b, TensorId x, TensorId wordTable, TensorId labels, const ModelConfig& c)
    {
        ScopeGuard scope(b, "cls.predictions");
        auto h = linear(b, x, c.hidden, true, "transform.dense");
        h = b.op(OpType::Gelu, "transform.gelu", { h }, { { "approximate", std::string("none") } });
        h = layerNorm(b, h, "transform.LayerNorm");
        h = b.op(OpType::MatMul, "decoder", { h, wordTable }, { { "trans_b", std::int64_t { 1 } } }); // tied
        h = b.op(OpType::BiasAdd, "decoder.bias_add", { h, b.parameter("bias", { c.vocab }) });
        return b.op(OpType::CrossEntropy, "loss", { h, labels });
    }

    TensorId nspLoss(GraphBuilder& b, TensorId x, TensorId labels, const ModelConfig& c)
    {
        TensorId pooled;
        {
            ScopeGuard scope(b, "pooler");
            const auto first = b.op(OpType::Slice, "first_token", { x },
                { { "axis", std::int64_t { 1 } }, { "start", std::int64_t { 0 } }, { "end", std::int64_t { 1 } } });
            const auto flat =
                b.op(OpType::Reshape, "flatten", { first }, { { "shape", Shape { c.microBatch, c.hidden } } });
            pooled = b.op(OpType::Tanh, "activation", { linear(b, flat, c.hidden, true, "dense") });
        }
        ScopeGuard scope(b, "cls.seq_relationship");
        return b.op(OpType::CrossEntropy, "loss", { linear(b, pooled, 2, true, "linear"), labels });
    }

} // namespace

Graph buildBert(const ModelConfig& c)
{
    GraphBuilder b(modelInfo(c));
    const auto ids = b.input("input_ids", { c.microBatch, c.seq }, DType::I64);
    const auto types = b.input("token_type_ids", { c.microBatch, c.seq }, DType::I64);
    const auto mask = b.input("attention_mask", { c.microBatch, c.seq }, DType::F32);
    const auto mlmLabels = b.input("mlm_labels", { c.microBatch, c.seq }, DType::I64);
    const auto nspLabels = b.input("nsp_labels", { c.microBatch }, DType::I64);

    TensorId wordTable;
    auto x = embeddings(b, c, ids, types, wordTable);
    for (std::int64_t i = 0; i < c.layers; ++i) {
        b.setLayer(static_cast<std::int32_t>(i));
        ScopeGuard scope(b, "encoder.layer." + std::to_string(i));
        x = bertLayer(b, x, mask, c);
    }
    b.setLayer(kNoLayer);
    const auto mlm = mlmLoss(b, x, wordTable, mlmLabels, c);
    const auto nsp = nspLoss(b, x, nspLabels, c);
    return b.finish({ b.op(OpType::Add, "total_loss", { mlm, nsp }) });
}

} // namespace ps::zoo
