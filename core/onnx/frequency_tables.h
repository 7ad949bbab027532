// Frequency tables: float initializers (and Constant nodes, torch's folded buffers) that only feed position tables the
// forward computes through Sin or Cos (a rotary embedding's inverse frequencies times the positions, then cos and sin;
// a sinusoidal position encoding's divisors). Torch keeps them as buffers; an importer without the tracer's record
// (onnx/tracer_metadata.h) would otherwise train them. Static values are those the data cannot change once the sizes
// are bound: initializers, Constant nodes, Shape and Size of any value, and every deterministic node whose inputs are
// all static. An initializer is a frequency table when, followed through its static uses, every path reaches a Sin or
// Cos before it meets a data-dependent value or a graph output. A learned position table (looked up by positions, then
// added to the tokens) never passes a Sin or Cos, so it stays a parameter.
// Depends on: onnx protobuf types only.
#pragma once

#include <onnx/onnx_pb.h>
#include <set>
#include <string>

namespace ps::onnximport {

// The names of the float initializers and Constant outputs of `model` that are frequency tables.
[[nodiscard]] std::set<std::string> frequencyTables(const onnx::ModelProto& model);

} // namespace ps::onnximport
