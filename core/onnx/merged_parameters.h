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
#include <set>
#include <string>

namespace ps::onnximport {

// Unties merged parameter initializers as above; returns how many copies it made (0 for a model
// without torch.export's signature or node metadata).
int untieMergedParameters(onnx::ModelProto& model);

// The other way round: the exporter's optimizer folds computations on a parameter into a new
// initializer, so a parameter read both as itself and transposed (a language model's tied input
// embedding and output head: GPT-2's head reads wte^T) is stored twice, and an importer that took
// initializers for parameters would train two. Where the calls reading two initializers name the
// same parameter, and one holds the other's values or (2-D) their transpose (compared where the
// values were read; by shape alone where the weights were left out), the copy is replaced by the
// kept one, through a Transpose node for a transposed copy. Returns how many copies it replaced.
int tieFoldedCopies(onnx::ModelProto& model);

// The same tie for exports without torch.export's metadata (the TorchScript exporter), where
// PipeStudio's tracer named the parameters (onnx/tracer_metadata.h): each initializer that is not
// `named` (a parameter or buffer of the module) and whose values (read, not all equal) are those of
// exactly one initializer in `kept`, or their transpose, is replaced by it. Returns how many copies
// it replaced.
int tieCopiesByValue(onnx::ModelProto& model, const std::set<std::string>& kept, const std::set<std::string>& named);

// Initializers that torch computed from buffers only (rotary cos/sin tables from a registered
// inverse-frequency buffer) and its optimizer folded: every call reading them names no parameter,
// and every parameter of the signature is still read by some call (so none was folded into them),
// or fx named them after a factory op ("zeros_3"). Constants, not parameters. Empty without
// torch.export's signature or node metadata.
[[nodiscard]] std::set<std::string> foldedBufferConstants(const onnx::ModelProto& model);

} // namespace ps::onnximport
