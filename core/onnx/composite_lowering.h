// Composite operators the IR has no op for, written out in ops it has (the way torch itself exports
// LLaMA's RMSNorm, or attention at opsets before 23).
//
// Attention (23, 24) and RotaryEmbedding (23): onnx/attention_lowering.h.
//
// Normalizations: InstanceNormalization (torch's GroupNorm export at opsets 13-20 is Reshape to
// (N, groups, -1), InstanceNormalization with exporter-made ones and zeros, Reshape back, then the
// real affine), GroupNormalization (18: scale per group; 21: per channel) and RMSNormalization (23).
// Over x viewed as (N, C or groups, -1):
//   d = x - ReduceMean(x, 2);  y = d / Sqrt(ReduceMean(d * d, 2) + epsilon)   (population variance)
// then the scale and bias per channel (or per group). GroupNormalization's are always applied. An
// InstanceNormalization's are left out where they are the exporter's identity, not the model's (so
// they are not counted as parameters): in torch's GroupNorm pattern (Reshape -> InstanceNormalization
// -> Reshape) ones and zeros by value, or unread (an import without weights), whatever their names;
// elsewhere only ones/zeros that are Constants or initializers torch.export's signature does not
// list as parameters. RMSNormalization (negative axis: the trailing axes it names; fp32):
//   y = x * Reciprocal(Sqrt(ReduceMean(x * x, axes) + epsilon)) * scale.
// Runs before the opset-17 lowering, writing ReduceMean in the model's opset form. New values and
// nodes are named after the node ("<node>/mean", ...).
// Depends on: onnx protobuf types; onnx/graph_writer.h, onnx/attention_lowering.h,
// onnx/opset_lowering.h (operator versions).
#pragma once

#include <onnx/onnx_pb.h>
#include <optional>
#include <set>
#include <string>

namespace ps::onnximport {

// Replaces every Attention and RotaryEmbedding (in the forms onnx/attention_lowering.h reads),
// InstanceNormalization, GroupNormalization and
// RMSNormalization (negative axis) of the main graph, at the model's default-domain `opset`, by its
// decomposition; returns how many it replaced (the others are left for the opset lowering to
// refuse, naming them). `parameters`: torch.export's signature parameters, when the model has one.
int decomposeCompositeOps(onnx::ModelProto& model, int opset, const std::optional<std::set<std::string>>& parameters);

} // namespace ps::onnximport
