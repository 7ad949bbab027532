// Internal to the op registry: the shape rules its entries name (one per op family), and the
// einsum letter sizes the Einsum cost rule shares with its shape rule.
// Depends on: graph/op_registry.h.
#pragma once

#include "graph/op_registry.h"

#include <map>

namespace ps::opshapes {

std::vector<Shape> sameShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> broadcastAll(const Node& node, const ShapeInputs& in);
std::vector<Shape> embeddingShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> matmulShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> biasAddShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> normShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> maskShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> reshapeShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> transposeShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> splitShapes(const Node& node, const ShapeInputs& in);
std::vector<Shape> sliceShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> concatShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> crossEntropyShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> reduceShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> selectShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> expandShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> convShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> convTransposeShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> batchNormShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> poolShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> globalPoolShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> triluShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> cumSumShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> castShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> padShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> resizeShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> gatherShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> scatterNdShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> gatherElementsShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> scatterElementsShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> gatherNdShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> topKShape(const Node& node, const ShapeInputs& in);
std::vector<Shape> einsumShape(const Node& node, const ShapeInputs& in);

// Size of every einsum letter, checked across the operands.
std::map<char, std::int64_t> einsumSizes(const EinsumSpec& spec, const ShapeInputs& in);

} // namespace ps::opshapes
