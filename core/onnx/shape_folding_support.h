// Internal to the ONNX importer's shape folding (shape_folding.cpp): the element and attribute
// helpers it shares with the layout ops (shape_folding_layout.cpp: Gather, Slice, Concat,
// Transpose, Reshape, Trilu, ScatterND on folded values), split from shape_folding.cpp.
#pragma once

#include "onnx/shape_folding.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::onnximport::folding {

using T = onnx::TensorProto;
using Known = std::unordered_map<std::string, FoldedTensor>;
using Shapes = std::unordered_map<std::string, std::vector<std::int64_t>>;
using Dims = std::vector<std::int64_t>;

// Folded values stay small: masks and position ids of a bound sequence, not weights.
constexpr std::int64_t kMaxElements = std::int64_t { 1 } << 20;

inline std::int64_t count(const Dims& shape)
{
    std::int64_t n = 1;
    for (auto d : shape) {
        if (d < 0 || (d > 0 && n > kMaxElements / d))
            return kMaxElements + 1;
        n *= d;
    }
    return n;
}

inline const onnx::AttributeProto* findAttr(const onnx::NodeProto& n, const char* name)
{
    for (const auto& a : n.attribute()) {
        if (a.name() == name)
            return &a;
    }
    return nullptr;
}

inline std::int64_t attrInt(const onnx::NodeProto& n, const char* name, std::int64_t fallback)
{
    const auto* a = findAttr(n, name);
    return a != nullptr ? a->i() : fallback;
}

inline std::optional<Dims> attrInts(const onnx::NodeProto& n, const char* name)
{
    const auto* a = findAttr(n, name);
    if (a == nullptr)
        return std::nullopt;
    return Dims(a->ints().begin(), a->ints().end());
}

inline std::int64_t normalize(std::int64_t i, std::int64_t size)
{
    return i < 0 ? i + size : i;
}

inline Dims stridesOf(const Dims& shape)
{
    Dims s(shape.size(), 1);
    for (std::size_t i = shape.size(); i-- > 1;)
        s[i - 1] = s[i] * shape[i];
    return s;
}

// The layout ops on folded values; nullopt where a value is not foldable (too large, unsupported).
std::optional<FoldedTensor> gather(const onnx::NodeProto& n, const FoldedTensor& data, const FoldedTensor& idx);
std::optional<FoldedTensor> slice(const onnx::NodeProto& n, const Known& k);
std::optional<FoldedTensor> concat(const onnx::NodeProto& n, const Known& k);
std::optional<FoldedTensor> transpose(const onnx::NodeProto& n, const FoldedTensor& x);
std::optional<FoldedTensor> reshape(const FoldedTensor& x, Dims shape);
std::optional<FoldedTensor> trilu(const onnx::NodeProto& n, const Known& k);
std::optional<FoldedTensor> scatterNd(const Known& k, const onnx::NodeProto& n);
// `round` rounds a product or sum to the operands' element type (float: to single precision).
std::optional<FoldedTensor> matmul(
    const FoldedTensor& a, const FoldedTensor& b, const std::function<double(double)>& round);

} // namespace ps::onnximport::folding
