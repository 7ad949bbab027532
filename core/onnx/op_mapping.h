// Internal to the ONNX importer: maps one ONNX node to an IR op where the IR has one, including
// the decomposed forms torch emits; constant operands (folded shapes, scalar constants) become
// attributes and are dropped from the inputs. One rule per ONNX op type (op_mapping.cpp's table);
// the IR op it produces is defined once in graph/op_registry.h. The importer keeps a mapping only
// where the IR's shape inference agrees with ONNX's.
#pragma once

#include "graph/graph.h"
#include "onnx/shape_folding.h"

#include <functional>
#include <onnx/onnx_pb.h>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ps::onnximport {

struct MappingContext
{
    const Graph& graph; // the tensors imported so far (the node's inputs among them)
    const std::unordered_map<std::string, FoldedTensor>& folded; // evaluated tensors by name
    const std::unordered_map<std::string, std::pair<Shape, DType>>& shapes; // inferred shapes by name
    const std::unordered_map<std::string, TensorId>& tensors; // graph tensors by ONNX name
    // Adds an i64 constant tensor (indices a mapping computes, e.g. a strided Slice's) named `name`.
    std::function<TensorId(const std::string& name, std::vector<std::int64_t> values)> addIndices;
};

// `n` has the node's inputs, output count and Opaque op; returns it mapped, or unchanged.
[[nodiscard]] Node mapNode(const onnx::NodeProto& node, Node n, const MappingContext& ctx);

// The ONNX op types the table maps (some only in the forms the IR supports); for reports and tests.
[[nodiscard]] std::vector<std::string> mappedOnnxOps();

} // namespace ps::onnximport
