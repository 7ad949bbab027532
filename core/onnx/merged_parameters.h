// torch.export's ONNX exporter merges initializers of equal values: every freshly initialised
// LayerNorm's ones and zeros become one tensor, which ties parameters torch trains separately and
// makes the import count fewer parameters. The graph signature (graph metadata) maps each parameter
// placeholder to its name ("p_blocks_0_ln2_weight: PARAMETER target='blocks.0.ln2.weight'"), and each
// node's "pkg.torch.onnx.fx_node" metadata names the placeholders its aten call read, in order. A
// node that reads a parameter initializer where its call read another parameter the file no longer
// holds gets a copy of the values under that parameter's name: the parameters torch had, untied.
// Depends on: onnx protobuf types; onnx/opset_lowering.h (unknown-field metadata).
#pragma once

#include <onnx/onnx_pb.h>

namespace ps::onnximport {

// Unties merged parameter initializers as above; returns how many copies it made (0 for a model
// without torch.export's signature or node metadata).
int untieMergedParameters(onnx::ModelProto& model);

} // namespace ps::onnximport
