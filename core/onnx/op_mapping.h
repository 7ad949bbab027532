// Internal to the ONNX importer: maps one ONNX node to an IR op where the IR has one, including
// the decomposed forms torch emits; constant operands (folded shapes, scalar constants) become
// attributes and are dropped from the inputs. The importer keeps a mapping only where the IR's shape
// inference agrees with ONNX's.
#pragma once

#include "graph/graph.h"
#include "onnx/shape_folding.h"

#include <onnx/onnx_pb.h>
#include <string>
#include <unordered_map>
#include <utility>

namespace ps::onnximport {

struct MappingContext
{
    const Graph& graph; // the tensors imported so far (the node's inputs among them)
    const std::unordered_map<std::string, IntTensor>& folded; // evaluated integer tensors by name
    const std::unordered_map<std::string, std::pair<Shape, DType>>& shapes; // inferred shapes by name
};

// `n` has the node's inputs, output count and Opaque op; returns it mapped, or unchanged.
[[nodiscard]] Node mapNode(const onnx::NodeProto& node, Node n, const MappingContext& ctx);

} // namespace ps::onnximport
