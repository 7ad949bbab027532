// Internal to the ONNX importer: evaluates the small integer subgraphs torch emits for dynamic
// axes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Slice bounds, ConstantOfShape ...) once
// the input dimensions are bound, so shape inference can see through them. ONNX 1.12's own data
// propagation stops at several of these ops.
#pragma once

#include <cstdint>
#include <functional>
#include <onnx/onnx_pb.h>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {

struct IntTensor
{
    std::vector<std::int64_t> shape;
    std::vector<std::int64_t> values; // row-major
};

// Repeats {shape inference, evaluate what became computable} on a copy of `model` until nothing
// changes. Returns the evaluated values by tensor name; `inferred` receives the working copy,
// whose value_info holds the shapes of every other tensor. `infer` runs ONNX shape inference.
std::unordered_map<std::string, IntTensor> foldShapeComputations(
    const onnx::ModelProto& model, onnx::ModelProto& inferred, const std::function<void(onnx::ModelProto&)>& infer);

} // namespace ps::onnximport
