// ONNX shape inference that survives what libonnx 1.12 cannot infer (its data propagation crashes
// on an input without a type) and sees operators newer than its schemas as their opset-17
// stand-ins (onnx/opset_lowering.h). Depends on: onnx protobuf types and libonnx.
#pragma once

#include <onnx/onnx_pb.h>

namespace ps::onnximport {

// Fills `model`'s value_info and output types in place.
void inferShapesSafely(onnx::ModelProto& model);

} // namespace ps::onnximport
