// Models exported at ONNX opsets 18 and newer, read by an importer whose shape inference knows the
// opset-17 schemas (Debian 12's libonnx 1.12): each node whose operator changed after opset 17 is
// rewritten into its opset-17 form where the change is one of form, not of meaning, and the model
// then declares opset 17. torch 2.9+ exports at opset 18 and newer by default (torch 2.15: 20).
//
// Rules (operator versions from ONNX 1.23's schemas; the node's version is the newest one at or
// below the model's opset):
// - Reductions (ReduceMean ... at 18, ReduceMax/Min at 20): the axes input, a constant, becomes
//   the axes attribute; noop_with_empty_axes (0) is dropped.
// - Split (18): num_outputs is dropped (opset 13's Split without sizes splits evenly into its
//   outputs; an uneven one, which opset 18 allows, fails shape inference or stays opaque).
// - Pad (18+) without the axes input and not in "wrap" mode; Resize (18, 19) with its new
//   attributes at their defaults; AveragePool and LpPool (18-22) without dilations (LpPool
//   without ceil_mode); Scatter reductions other than max/min; Cast/CastLike (19+) with saturate
//   and round_mode dropped (they only concern 8- and 4-bit floats).
// - Operators whose newer versions only add element types keep their node as it is.
// - Subgraphs (If/Loop bodies) are not lowered: those operators are refused after 17 anyway.
// - Gelu (20) stays: the op mapping takes it as the IR's Gelu (approximate "tanh" or exact), and
//   shape inference sees it as the elementwise op it is.
// - GroupNormalization and RMSNormalization never reach this, nor Attention and RotaryEmbedding in
//   the forms onnx/attention_lowering.h reads: onnx/composite_lowering.h writes them out in
//   opset-17 operators first.
// - Anything else changed or added after 17 (the other forms of Attention, control flow,
//   quantization, strings, ...) is refused, naming the node, operator and version.
// Depends on: onnx protobuf types; util/error.h.
#pragma once

#include <map>
#include <onnx/onnx_pb.h>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ps::onnximport {

inline constexpr int kNewestLoweredOpset = 25; // the newest opset whose changes are all classified here

// The version of `op` a model at `opset` uses: the newest since-version at or below it (0 when it
// changed at 17 or before, whatever it is).
[[nodiscard]] int versionAfter17(const std::string& op, int opset);

// Rewrites `model` (default-domain opset `opset`, 18..kNewestLoweredOpset) into opset 17 form and
// sets its opset import and IR version accordingly. Throws ps::Error naming the first node it
// cannot lower. Returns how many nodes changed form.
int lowerToOpset17(onnx::ModelProto& model, int opset);

// The length-delimited values of field `field` of `message` that libonnx 1.12's schema does not
// know (newer IR fields it keeps as unknown fields), in order.
[[nodiscard]] std::vector<std::string> unknownMessageFields(const google::protobuf::Message& message, int field);

// The graph's metadata_props (IR 10, field 16 of GraphProto: torch.export's graph signature),
// which libonnx 1.12's GraphProto keeps as an unknown field: (key, value) pairs.
[[nodiscard]] std::vector<std::pair<std::string, std::string>> graphMetadata(const onnx::GraphProto& graph);

// torch.export's graph signature's parameter placeholders and the parameters they stand for
// ("p_blocks_0_ln2_weight" -> "blocks.0.ln2.weight"), or nullopt without a signature.
[[nodiscard]] std::optional<std::map<std::string, std::string>> torchExportPlaceholders(const onnx::GraphProto& graph);

// The parameters torch.export's graph signature names (its "PARAMETER target='...'" lines), or
// nullopt when the graph carries no signature (not exported by torch 2.x's exporter).
[[nodiscard]] std::optional<std::set<std::string>> torchExportParameters(const onnx::GraphProto& graph);

// Shape inference's view of an operator libonnx 1.12 has no schema for but that keeps its input's
// shape and type (Gelu): the opset-17 operator to infer it as, or empty.
[[nodiscard]] std::string shapeStandIn(const std::string& op);

} // namespace ps::onnximport
