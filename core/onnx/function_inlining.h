// ONNX local functions (ModelProto.functions: what torch.onnx.export(..., export_modules_as_functions=
// ...) writes for chosen module classes, and what other exporters emit for composite operators)
// inlined into the main graph before anything else reads it. Each call node is replaced by the
// function's body: the body's formal inputs and outputs become the call's actual ones, every other
// value and node name is prefixed by the call's name ("<call>/<name>"; "<call>#2/" where two calls
// share a name), an input passed straight through becomes an Identity, attributes that refer to the
// function's attributes (ref_attr_name) take the call's value, else the function's default (IR 9's
// attribute_proto), else are left out as ONNX defines. Calls inside bodies are inlined in turn.
// Depends on: onnx protobuf types; onnx/opset_lowering.h (unknown fields); util/error.h.
#pragma once

#include <onnx/onnx_pb.h>

namespace ps::onnximport {

// Replaces every call of a local function in the main graph by its body, drops the functions and
// the opset imports only they used; returns how many calls it inlined. Throws ps::Error naming the
// function for recursion deeper than 32 calls or a call with more inputs or outputs than it has.
int inlineLocalFunctions(onnx::ModelProto& model);

} // namespace ps::onnximport
