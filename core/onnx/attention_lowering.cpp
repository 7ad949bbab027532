#include "onnx/attention_lowering.h"

#include "onnx/op_mapping_support.h"

#include <limits>

namespace ps::onnximport {
namespace {

    using mapping::present;

    bool writes(const onnx::NodeProto& n, int output)
    {
        return n.output_size() > output && !n.output(output).empty();
    }

    // Whether dims `d` are unknown or of rank `rank`.
    bool rankIs(const std::vector<std::int64_t>& d, std::size_t rank)
    {
        return d.empty() || d.size() == rank;
    }

    // Whether dims `d` are known (value_info, which exporters write, gives them) and of rank `rank`.
    bool knownRank(const std::vector<std::int64_t>& d, std::size_t rank)
    {
        return d.size() == rank;
    }

} // namespace

bool AttentionLowering::handles(const onnx::NodeProto& n) const
{
    if (n.op_type() == "Attention")
        return attentionForm(n);
    if (n.op_type() == "RotaryEmbedding")
        return rotaryForm(n);
    return false;
}

void AttentionLowering::decompose(const onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
{
    begin(n, out);
    if (n.op_type() == "Attention")
        attention(n);
    else
        rotary(n);
}

bool AttentionLowering::attentionForm(const onnx::NodeProto& n) const
{
    if (n.input_size() < 3 || writes(n, 3) || present(n, 6) || nodeInt(n, "left_window_size", -1) >= 0
        || nodeInt(n, "right_window_size", -1) >= 0)
        return false;
    const auto qHeads = nodeInt(n, "q_num_heads", 0);
    const auto kvHeads = nodeInt(n, "kv_num_heads", 0);
    const bool threeD = qHeads != 0 || kvHeads != 0;
    if (threeD && (qHeads <= 0 || kvHeads <= 0 || qHeads % kvHeads != 0))
        return false;
    const std::size_t rank = threeD ? 3 : 4;
    for (int i = 0; i < 3; ++i) {
        if (!knownRank(dims(n.input(i)), rank))
            return false;
    }
    if (present(n, 4) != present(n, 5))
        return false; // a past key without its value
    // Keys in all: the past's and this call's (-1 where unknown).
    auto keys = [&] {
        const auto k = dims(n.input(1));
        return k[threeD ? 1 : 2];
    }();
    for (int i = 4; i < 6 && present(n, i); ++i) {
        const auto past = dims(n.input(i));
        if (!rankIs(past, 4))
            return false;
        if (i == 4)
            keys = past.empty() || past[2] < 0 || keys < 0 ? -1 : keys + past[2];
    }
    if (present(n, 3)) {
        const auto t = elemType(n.input(3));
        if (t != onnx::TensorProto::BOOL && t != onnx::TensorProto::FLOAT)
            return false; // a mask of unknown type
        const auto mask = dims(n.input(3));
        if (!mask.empty() && mask.back() > 0 && keys > 0 && mask.back() != keys)
            return false; // shorter than the keys: ONNX pads it, which is not written out here
    }
    return true;
}

// (B, S, count * D) -> (B, count, S, D).
std::string AttentionLowering::heads(const std::string& name, const std::string& x, std::int64_t count)
{
    const auto split = node("Reshape", name + "_heads", { x, constant(name + "_heads_shape", { 0, 0, count, -1 }) });
    const auto out = node("Transpose", name + "_by_head", { split });
    setInts(last(), "perm", { 0, 2, 1, 3 });
    return out;
}

// K or V (B, Hkv, L, D) repeated to Q's heads (B, Hq, L, D): each kv head serves Hq / Hkv query
// heads in turn (repeat_interleave, as grouped-query attention does).
std::string AttentionLowering::repeatHeads(const std::string& name, const std::string& kv, const std::string& q)
{
    const auto groups = node(
        "Div", name + "_groups", { shapeSlice(name + "_q_heads", q, 1, 2), shapeSlice(name + "_kv_heads", kv, 1, 2) });
    const auto wide = node("Unsqueeze", name + "_5d", { kv, constant(name + "_axis", { 2 }) });
    const auto to = node("Concat", name + "_expanded_shape",
        { shapeSlice(name + "_lead", kv, 0, 2), groups, shapeSlice(name + "_tail", kv, 2, 4) });
    setInt(last(), "axis", 0);
    const auto expanded = node("Expand", name + "_expanded", { wide, to });
    const auto shape = node(
        "Concat", name + "_shape", { shapeSlice(name + "_q_lead", q, 0, 2), shapeSlice(name + "_kv_tail", kv, 2, 4) });
    setInt(last(), "axis", 0);
    return node("Reshape", name + "_repeated", { expanded, shape });
}

// Scores (.., S, L) with key j of query i kept where j <= i + past length (the lower triangle of
// (S, L) shifted right by the past), else -inf.
std::string AttentionLowering::causalScores(const std::string& scores, const std::string& pastLength)
{
    const auto ones = node("ConstantOfShape", "ones", { shapeSlice("scores_shape", scores, -2, 4) });
    auto* value = last().add_attribute();
    value->set_name("value");
    value->set_type(onnx::AttributeProto::TENSOR);
    value->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    value->mutable_t()->add_dims(1);
    value->mutable_t()->add_float_data(1.0F);
    std::vector<std::string> in { ones };
    if (!pastLength.empty())
        in.push_back(pastLength);
    const auto triangle = node("Trilu", "lower", std::move(in));
    setInt(last(), "upper", 0);
    const auto lower = node("Cast", "causal", { triangle });
    setInt(last(), "to", onnx::TensorProto::BOOL);
    return node("Where", "causal_scores",
        { lower, scores, scalar("causal_minus_inf", -std::numeric_limits<float>::infinity()) });
}

void AttentionLowering::attention(const onnx::NodeProto& n)
{
    const auto qHeads = nodeInt(n, "q_num_heads", 0);
    const auto kvHeads = nodeInt(n, "kv_num_heads", 0);
    const bool threeD = qHeads > 0;
    auto q = n.input(0);
    auto k = n.input(1);
    auto v = n.input(2);
    if (threeD) {
        q = heads("query", q, qHeads);
        k = heads("key", k, kvHeads);
        v = heads("value", v, kvHeads);
    }
    std::string pastLength;
    if (present(n, 4)) { // the cache, then this call's keys and values
        pastLength = node("Squeeze", "past_length", { shapeSlice("past_shape", n.input(4), 2, 3) });
        k = nodeTo("Concat", "present_key", { n.input(4), k }, writes(n, 1) ? n.output(1) : m_prefix + "present_key");
        setInt(last(), "axis", 2);
        v = nodeTo(
            "Concat", "present_value", { n.input(5), v }, writes(n, 2) ? n.output(2) : m_prefix + "present_value");
        setInt(last(), "axis", 2);
    } else {
        if (writes(n, 1))
            nodeTo("Identity", "present_key", { k }, n.output(1));
        if (writes(n, 2))
            nodeTo("Identity", "present_value", { v }, n.output(2));
    }
    const auto qd = dims(q);
    const auto kd = dims(k);
    const bool sameHeads = threeD ? qHeads == kvHeads : qd.size() == 4 && kd.size() == 4 && qd[1] > 0 && qd[1] == kd[1];
    if (!sameHeads) { // fewer (or unknown) kv heads: repeat them over the query groups
        k = repeatHeads("key", k, q);
        v = repeatHeads("value", v, q);
    }
    std::string scale;
    if (nodeHas(n, "scale")) {
        scale = scalar("scale", nodeFloat(n, "scale", 1.0F));
    } else { // 1 / sqrt(D), folded at import from the static shape
        const auto d = node("Cast", "head_dim", { shapeSlice("head_dim_shape", q, -1, 4) });
        setInt(last(), "to", onnx::TensorProto::FLOAT);
        scale = node("Reciprocal", "scale", { node("Sqrt", "sqrt_head_dim", { d }) });
    }
    const auto kt = node("Transpose", "key_t", { k });
    setInts(last(), "perm", { 0, 1, 3, 2 });
    auto scores = node("Mul", "scores", { node("MatMul", "qk", { q, kt }), scale });
    if (const auto cap = nodeFloat(n, "softcap", 0.0F); cap > 0.0F) { // before the masks: -inf stays -inf
        const auto c = scalar("softcap", cap);
        scores = node("Mul", "capped", { node("Tanh", "tanh", { node("Div", "over_cap", { scores, c }) }), c });
    }
    if (present(n, 3)) {
        const auto& mask = n.input(3);
        scores = elemType(mask) == onnx::TensorProto::BOOL
            ? node("Where", "masked", { mask, scores, scalar("minus_inf", -std::numeric_limits<float>::infinity()) })
            : node("Add", "masked", { scores, mask });
    }
    if (nodeInt(n, "is_causal", 0) != 0)
        scores = causalScores(scores, pastLength);
    const auto probs = node("Softmax", "probs", { scores });
    setInt(last(), "axis", -1);
    if (!threeD) {
        nodeTo("MatMul", "context", { probs, v }, n.output(0));
        return;
    }
    const auto context = node("Transpose", "context_by_token", { node("MatMul", "context", { probs, v }) });
    setInts(last(), "perm", { 0, 2, 1, 3 });
    nodeTo("Reshape", "context_merged", { context, constant("merged_shape", { 0, 0, -1 }) }, n.output(0));
}

// D, the size of one head of x, where known (-1 otherwise).
std::int64_t AttentionLowering::rotaryHeadSize(const onnx::NodeProto& n) const
{
    const auto x = dims(n.input(0));
    const auto count = nodeInt(n, "num_heads", 0);
    if (x.size() == 4)
        return x[3];
    if (x.size() == 3 && count > 0 && x[2] > 0 && x[2] % count == 0)
        return x[2] / count;
    return -1;
}

bool AttentionLowering::rotaryForm(const onnx::NodeProto& n) const
{
    if (n.input_size() < 3 || n.output_size() != 1)
        return false;
    const auto count = nodeInt(n, "num_heads", 0);
    if (!knownRank(dims(n.input(0)), count > 0 ? 3 : 4))
        return false;
    const auto d = rotaryHeadSize(n);
    const auto r = nodeInt(n, "rotary_embedding_dim", 0);
    if (r < 0 || r % 2 != 0)
        return false;
    if (r > 0) // whether x has a tail that is not rotated must be known
        return d > 0 && r <= d;
    const auto cache = dims(n.input(1));
    return d > 0 ? d % 2 == 0 : !cache.empty() && cache.back() > 0; // R: D, or twice the cache's width
}

std::string AttentionLowering::slice(
    const std::string& name, const std::string& x, std::int64_t start, std::int64_t end, std::int64_t step)
{
    std::vector<std::string> in { x, constant(name + "_start", { start }), constant(name + "_end", { end }),
        constant(name + "_axis", { -1 }) };
    if (step != 1)
        in.push_back(constant(name + "_step", { step }));
    return node("Slice", name, std::move(in));
}

void AttentionLowering::rotary(const onnx::NodeProto& n)
{
    const auto count = nodeInt(n, "num_heads", 0);
    const bool threeD = count > 0;
    const bool interleaved = nodeInt(n, "interleaved", 0) != 0;
    const auto d = rotaryHeadSize(n);
    const auto attr = nodeInt(n, "rotary_embedding_dim", 0);
    const auto r = attr > 0 ? attr : d > 0 ? d : 2 * dims(n.input(1)).back();
    const bool tail = attr > 0 && attr < d;
    // (B, S, heads, D) with the caches' (B, S, R/2) unsqueezed at 2, or (B, heads, S, D) at 1.
    const auto x = threeD ? node("Reshape", "x_heads", { n.input(0), constant("x_heads_shape", { 0, 0, count, -1 }) })
                          : n.input(0);
    auto cos = n.input(1);
    auto sin = n.input(2);
    if (present(n, 3)) {
        cos = node("Gather", "cos_at_positions", { cos, n.input(3) });
        setInt(last(), "axis", 0);
        sin = node("Gather", "sin_at_positions", { sin, n.input(3) });
        setInt(last(), "axis", 0);
    }
    const auto axis = constant("head_axis", { threeD ? 2 : 1 });
    cos = node("Unsqueeze", "cos", { cos, axis });
    sin = node("Unsqueeze", "sin", { sin, axis });
    const auto rotated = tail ? slice("rotated_part", x, 0, r) : x;
    const auto x1 = interleaved ? slice("even", rotated, 0, r, 2) : slice("first_half", rotated, 0, r / 2);
    const auto x2 = interleaved ? slice("odd", rotated, 1, r, 2) : slice("second_half", rotated, r / 2, r);
    const auto real = node("Sub", "real", { node("Mul", "cos_x1", { cos, x1 }), node("Mul", "sin_x2", { sin, x2 }) });
    const auto imag = node("Add", "imag", { node("Mul", "sin_x1", { sin, x1 }), node("Mul", "cos_x2", { cos, x2 }) });
    std::string out;
    if (interleaved) { // (.., R/2, 2) pairs back to (.., R)
        const auto pairAxis = constant("pair_axis", { -1 });
        const auto pairs = node("Concat", "pairs",
            { node("Unsqueeze", "real_pair", { real, pairAxis }), node("Unsqueeze", "imag_pair", { imag, pairAxis }) });
        setInt(last(), "axis", -1);
        out = node("Reshape", "rotated", { pairs, node("Shape", "rotated_shape", { rotated }) });
    } else {
        out = node("Concat", "rotated", { real, imag });
        setInt(last(), "axis", -1);
    }
    if (tail) {
        out = node("Concat", "with_tail", { out, slice("tail", x, r, std::numeric_limits<std::int64_t>::max()) });
        setInt(last(), "axis", -1);
    }
    if (threeD)
        nodeTo("Reshape", "merged", { out, node("Shape", "input_shape", { n.input(0) }) }, n.output(0));
    else
        nodeTo("Identity", "output", { out }, n.output(0));
}

} // namespace ps::onnximport
