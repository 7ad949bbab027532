// ONNX import: a model exported by torch.onnx.export (opsets 13-17) becomes a fine-grained graph
// with bound shapes and its initializers as parameters (with their values).
//
// Dynamic dimensions are bound from user-given sizes (batch, sequence), every tensor's shape comes
// from ONNX's own shape inference, and what is static once they are bound is evaluated and folded
// into constant tensors (Constant nodes, shape computations, masks and position ids: see
// onnx/shape_folding.h). Initializers a gradient can reach become parameters; `Identity` copies of
// an initializer (torch's exporter stores equal initializers once) become parameters of their own
// with the shared value, other Identity nodes are removed. ONNX ops map to IR ops by one rule each
// (onnx/op_mapping.cpp), including the decomposed forms torch emits. Anything else becomes an
// opaque node costed from its shapes, listed in the report as an op the engine cannot train.
// Depends on: graph/, Debian's libonnx (protobuf); no Qt, no CUDA.
#pragma once

#include "graph/graph.h"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ps {

struct OnnxImportOptions
{
    std::int64_t batch = 1; // binds dims named like "batch" and the first dynamic dim of each input
    std::int64_t sequence = 128; // binds dims named like "seq"/"sequence" and the second dynamic dim
    std::map<std::string, std::int64_t> dims; // explicit bindings by dim_param name
    bool keepWeights = true; // store initializer values in the graph (and the project)
};

struct OnnxImportReport
{
    int opset = 0;
    std::size_t onnxNodes = 0;
    std::size_t foldedConstants = 0; // Constant nodes
    std::size_t foldedShapeNodes = 0; // static computations evaluated at import (shapes, masks, position ids)
    std::size_t aliasedParameters = 0; // Identity copies of an initializer, each its own parameter
    std::size_t foldedIdentities = 0; // other Identity nodes, removed
    std::map<std::string, std::int64_t> boundDims; // dim_param -> size
    std::map<std::string, int> opaqueOps; // op type -> count: costed, not trainable by the engine
};

struct OnnxImport
{
    Graph graph;
    OnnxImportReport report;
};

// Throws ps::Error with one line naming the file and the problem (not a model, unsupported opset,
// a cycle through a named node, shape inference failure, unbound dimension).
[[nodiscard]] OnnxImport importOnnx(const std::filesystem::path& path, const OnnxImportOptions& options = {});

} // namespace ps
