// Internal to the ONNX importer: evaluates the subgraphs that are static once the input dimensions
// are bound, so shape inference can see through them and the IR gets constants instead of ops:
// the integer shape computations torch emits for dynamic axes (Shape -> Gather -> Unsqueeze ->
// Concat -> Reshape, Slice bounds, ConstantOfShape ...) and the masks and position ids computed in
// the forward of models written without registered buffers (Range, comparisons, Trilu, Where,
// Cast, ScatterND on constants). ONNX 1.12's own data propagation stops at several of these ops.
//
// Only values that do not depend on a parameter are folded: integer initializers, Constant nodes
// of integers and scalars, and what is computed from them and from shapes. A float Constant with
// several elements is a slice of a parameter (the importer keeps it trainable), so it is not.
#pragma once

#include <cstdint>
#include <functional>
#include <onnx/onnx_pb.h>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {

// A folded value. Every element type is held as double (integers up to 2^53 exactly; int64
// sentinels such as INT64_MAX saturate when read back with ints()).
struct FoldedTensor
{
    std::vector<std::int64_t> shape;
    int elemType = onnx::TensorProto::INT64; // onnx::TensorProto::DataType
    std::vector<double> values; // row-major

    [[nodiscard]] bool isFloat() const
    {
        return elemType == onnx::TensorProto::FLOAT || elemType == onnx::TensorProto::DOUBLE;
    }
    // The values as int64, saturating at the int64 range.
    [[nodiscard]] std::vector<std::int64_t> ints() const;
};

// The concrete shapes of a model after shape inference: graph inputs, value_info and initializers
// (symbolic ones left out).
[[nodiscard]] std::unordered_map<std::string, std::vector<std::int64_t>> shapesOf(const onnx::ModelProto& model);

// Repeats {shape inference, evaluate what became computable} on a copy of `model` until nothing
// changes. Returns the evaluated values by tensor name; `inferred` receives the working copy,
// whose value_info holds the shapes of every other tensor. `infer` runs ONNX shape inference.
// Float initializers are weights, except those named in `constantFloats` (frequency tables,
// onnx/frequency_tables.h), whose values are known too.
std::unordered_map<std::string, FoldedTensor> foldShapeComputations(const onnx::ModelProto& model,
    onnx::ModelProto& inferred, const std::function<void(onnx::ModelProto&)>& infer,
    const std::set<std::string>& constantFloats = {});

} // namespace ps::onnximport
