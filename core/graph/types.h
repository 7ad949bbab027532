// Value types of the graph IR: element types, tensor kinds, shapes and op types.
//
// Owns: the vocabulary shared by the IR, the zoo, importers and the cost model, with the names
// used in project files. Depends on: the standard library only (no Qt, no CUDA).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

enum class DType : std::uint8_t { F32, F16, BF16, F64, I64, I32, I8, U8, Bool };

enum class TensorKind : std::uint8_t {
    Activation, // produced by a node; lives per micro-batch
    Parameter, // trainable weight; gets a gradient and optimizer state
    Input, // fed by the data loader (token ids, labels, masks)
    Constant, // fixed data baked into the graph (position ids, bucket ids)
};

// Dimensions of a tensor, outermost first. A scalar has no dimensions.
using Shape = std::vector<std::int64_t>;

// The op set of the IR. Fine-grained on purpose: one node per matmul, bias add, norm, softmax,
// activation, residual add, dropout and layout change, as DawnPiper's compiled graphs (section 3.1).
enum class OpType : std::uint8_t {
    Embedding, // (ids (...), table (V, C)) -> (..., C)
    MatMul, // (a (..., M, K), b (..., K, N)[, bias (N)]) -> (..., M, N); attr trans_b
    BiasAdd, // (x (..., N), bias (N)) -> x
    Add, // broadcasting a + b (residual adds, position embeddings, attention bias)
    Mul, // broadcasting a * b
    Scale, // x * attr scale
    LayerNorm, // (x, gamma (C), beta (C)) -> x, over the last dim
    RMSNorm, // (x, gamma (C)) -> x, over the last dim (T5 layer norm)
    Softmax, // over the last dim
    Gelu,
    Relu,
    Tanh,
    Dropout, // attr p
    Mask, // attention scores with a causal mask (attr causal) and/or a padding mask input (B, T)
    Reshape, // attr shape (one -1 allowed)
    Transpose, // attr perm
    Split, // attr axis, sizes; several outputs
    Slice, // attr axis, start, end
    Concat, // attr axis
    CrossEntropy, // (logits (..., V), labels (...)) -> scalar mean loss
    // Ops of traced models (ONNX decompositions and convolutional networks).
    Sub, // broadcasting a - b
    Div, // broadcasting a / b (LayerNorm decomposed below opset 17)
    Pow, // x ^ attr exponent
    Sqrt,
    Erf, // GELU decomposed: 0.5 x (1 + erf(x / sqrt 2))
    ReduceMean, // attr axes, keepdims
    Select, // x[..., index, ...] on attr axis; the axis is removed (a class token)
    Expand, // broadcast to attr shape
    Conv, // (x (N, C, H, W), w (F, C / group, kH, kW)[, bias (F)]); attrs strides, pads, dilations, group
    BatchNorm, // (x (N, C, ...), gamma (C), beta (C), running mean (C), running var (C)); attrs epsilon, momentum
    MaxPool, // attrs kernel, strides, pads (top, left, bottom, right), dilations, ceil_mode
    GlobalAvgPool, // (N, C, spatial...) -> (N, C, 1, ...)
    // Ops of traced models added with the op registry (core/graph/op_registry.h). Bool and integer
    // values (masks, indices) have dtype Bool/I64 in the graph; they never need a gradient.
    Sigmoid,
    HardSigmoid, // max(0, min(1, alpha x + beta)); attrs alpha (0.2), beta (0.5)
    HardSwish, // x * HardSigmoid(x) with alpha 1/6, beta 0.5
    LeakyRelu, // x < 0 ? alpha x : x; attr alpha (0.01)
    Clip, // min(max(x, attr min), attr max); an absent bound is open (Relu6: min 0, max 6)
    Exp,
    Log,
    Neg,
    Abs,
    Max, // broadcasting elementwise max(a, b); the gradient goes to the larger (a on ties)
    Min, // broadcasting elementwise min(a, b); the gradient goes to the smaller (a on ties)
    Where, // (condition (bool), a, b) broadcast -> condition ? a : b
    Equal, // broadcasting comparisons -> Bool
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Not, // Bool -> Bool
    And, // broadcasting Bool, Bool -> Bool
    Or,
    Cast, // attr to (a DType name: "f32", "i64", "bool" ...)
    ReduceSum, // attrs axes (empty: all), keepdims
    ReduceMax, // attrs axes (empty: all), keepdims; the gradient goes to the first maximum
    CumSum, // attrs axis, exclusive (0), reverse (0)
    Trilu, // lower (attr upper 0) or upper (upper 1) triangle of the last two dims; attr k (diagonal offset)
    AvgPool, // attrs kernel, strides, pads (top, left, bottom, right), ceil_mode, count_include_pad
    Pad, // attrs pads (begin of every axis, then end of every axis; ONNX order), mode ("constant",
         // "reflect", "edge"), value
    Resize, // (N, C, H, W) -> (N, C, H', W'); attrs mode ("nearest", "linear"), sizes (H', W'),
            // coordinate_transformation_mode, nearest_mode (ONNX names)
    Gather, // (data, indices (i64)) -> data.shape[:axis] + indices.shape + data.shape[axis + 1:]; attr axis
    ScatterND, // (data, indices (i64, (..., k)), updates) -> data with updates written at indices
    TopK, // (x) -> (values, indices (i64)) along attr axis; attrs k, largest (1), sorted (1)
    Einsum, // attr equation, one or two operands ("bhid,bhjd->bhij")
    Reciprocal, // 1 / x (LLaMA's RMSNorm as exported: x * Reciprocal(Sqrt(mean(x^2) + eps)))
    IsNaN, // x != x -> Bool (a masked softmax's guard: Where(IsNaN(p), 0, p))
    GatherElements, // (data, indices (i64, data's rank)) -> indices' shape; data[.., indices[i], ..] on attr axis
    GatherND, // (data, indices (i64, (..., r))) -> data[indices[..., :]] slices; attr batch_dims
    ConvTranspose, // (x (N, C, H, W), w (C, F / group, kH, kW)[, bias (F)]); attrs strides, pads, dilations, group,
                   // output_padding: Conv's input gradient as a layer (decoders, U-Nets)
    ScatterElements, // (data, indices (i64, data's rank), updates (indices' shape)) -> data with updates written
                     // at the indices on attr axis; attr add (1: added, ONNX reduction "add"; torch's scatter_add)
    Sin, // sin x (rotary tables computed in the forward; folded to constants when static)
    Cos, // cos x
    Attention, // (q (..., Tq, D), k (..., Tk, D), v (..., Tk, Dv)[, padding (B, Tk)]) -> (..., Tq, Dv):
               // softmax(scale q k^T, causal and padding masked as Mask does) v, saving no probabilities
               // (graph/attention_fusion.h); attrs scale, causal, dropout (p)
    GroupNorm, // (x (N, C, ...)[, gamma (C)[, beta (C)]]) -> x normalized over each of attr groups channel
               // groups with every position, then per-channel gamma, beta (graph/group_norm.h); attr epsilon
    Opaque, // imported op with no mapping; costed from its shapes only
};

struct OpTypeInfo
{
    OpType type;
    std::string_view name;
    bool isView; // output aliases the input's storage: no bytes written, nothing to free
};

[[nodiscard]] std::string_view toString(DType dtype);
[[nodiscard]] std::string_view toString(TensorKind kind);
[[nodiscard]] std::string_view toString(OpType op);
[[nodiscard]] std::optional<DType> parseDType(std::string_view name);
[[nodiscard]] std::optional<TensorKind> parseTensorKind(std::string_view name);
[[nodiscard]] std::optional<OpType> parseOpType(std::string_view name);
[[nodiscard]] const std::vector<OpTypeInfo>& allOpTypes();
[[nodiscard]] bool isViewOp(OpType op);

[[nodiscard]] std::int64_t bytesPerElement(DType dtype);
[[nodiscard]] std::int64_t numElements(const Shape& shape);
[[nodiscard]] std::int64_t numBytes(const Shape& shape, DType dtype);
// "(4, 1024, 768)"; "()" for a scalar.
[[nodiscard]] std::string formatShape(const Shape& shape);
// Inverse of the project-file form "4,1024,768" (empty string is a scalar).
[[nodiscard]] std::string joinShape(const Shape& shape);
[[nodiscard]] Shape splitShape(std::string_view text);

} // namespace ps
