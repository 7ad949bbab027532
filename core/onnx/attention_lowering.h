// ONNX's Attention (23, 24) and RotaryEmbedding (23) written out in operators the IR has, as
// onnx/reference/ops/op_attention.py and op_rotary_embedding.py (ONNX 1.23) define them. Runs
// inside onnx/composite_lowering.h's pass, before the opset-17 lowering.
//
// Attention, inputs (B, heads, S, D) or, with q_num_heads and kv_num_heads, (B, S, heads * D):
//   3-D inputs are reshaped to (B, S, heads, D) and transposed to (B, heads, S, D) first, and Y back;
//   past_key/past_value (B, kv heads, P, D) are concatenated before K and V along the sequence: that
//   is present_key/present_value (outputs 1 and 2, written where the model names them);
//   scores = Q @ K^T * scale (default 1 / sqrt(D)); softcap c > 0: c * tanh(scores / c);
//   a bool mask selects (else -inf), a float mask adds; is_causal keeps key j for query i where
//   j <= i + P (top-left aligned without a past, bottom-right with one);
//   Y = softmax(scores) @ V, K and V repeated over query-head groups where they have fewer heads.
//   A row every key of which is masked gives NaN here (ONNX's reference gives 0 there).
//   Left to be refused: qk_matmul_output (output 3), nonpad_kv_seqlen (input 6), sliding windows,
//   a mask shorter than the keys, 3-D inputs whose head counts do not divide, and inputs whose rank
//   value_info does not give (exporters write it).
//
// RotaryEmbedding, input (B, heads, S, D) or, with num_heads, (B, S, heads * D); cos/sin caches
// (B, S, R/2), or (positions, R/2) read at position_ids (B, S); R = rotary_embedding_dim or D (the
// input's rank must be known from value_info, and D too where rotary_embedding_dim is given):
//   x1, x2 = the two halves of x[..., :R] (interleaved: its even and odd elements);
//   [cos * x1 - sin * x2, sin * x1 + cos * x2] (interleaved: pairwise), then x[..., R:] unchanged.
// Depends on: onnx/graph_writer.h.
#pragma once

#include "onnx/graph_writer.h"

namespace ps::onnximport {

class AttentionLowering : public GraphWriter
{
public:
    using GraphWriter::GraphWriter;

    // Whether `n` is an Attention or RotaryEmbedding in a form above.
    [[nodiscard]] bool handles(const onnx::NodeProto& n) const;
    // Writes its decomposition into `out`.
    void decompose(const onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out);

private:
    [[nodiscard]] bool attentionForm(const onnx::NodeProto& n) const;
    [[nodiscard]] bool rotaryForm(const onnx::NodeProto& n) const;
    void attention(const onnx::NodeProto& n);
    void rotary(const onnx::NodeProto& n);
    std::string heads(const std::string& name, const std::string& x, std::int64_t count);
    std::string repeatHeads(const std::string& name, const std::string& kv, const std::string& q);
    std::string causalScores(const std::string& scores, const std::string& pastLength);
    std::string slice(
        const std::string& name, const std::string& x, std::int64_t start, std::int64_t end, std::int64_t step = 1);
    [[nodiscard]] std::int64_t rotaryHeadSize(const onnx::NodeProto& n) const;
};

} // namespace ps::onnximport
