// Normalizations the IR has no op for, written out in ops it has (the way torch itself exports
// LLaMA's RMSNorm): InstanceNormalization (torch's GroupNorm export at opsets 13-20 is Reshape to
// (N, groups, -1), InstanceNormalization with exporter-made ones and zeros, Reshape back, then the
// real affine), GroupNormalization (18: scale per group; 21: per channel) and RMSNormalization (23).
// Over x viewed as (N, C or groups, -1):
//   d = x - ReduceMean(x, 2);  y = d / Sqrt(ReduceMean(d * d, 2) + epsilon)   (population variance)
// then the scale and bias per channel (or per group) where they are not the identity: an all-ones
// scale or all-zeros bias that is a Constant, or an initializer torch.export's signature does not
// name as a parameter, is the exporter's, not the model's, and is left out (so it is not counted
// as a parameter). RMSNormalization (negative axis: the trailing axes it names):
//   y = x * Reciprocal(Sqrt(ReduceMean(x * x, axes) + epsilon)) * scale.
// Runs before the opset-17 lowering, writing ReduceMean in the model's opset form. New values and
// nodes are named after the node ("<node>/mean", ...).
// Depends on: onnx protobuf types; onnx/opset_lowering.h (operator versions).
#pragma once

#include <onnx/onnx_pb.h>
#include <optional>
#include <set>
#include <string>

namespace ps::onnximport {

// Replaces every InstanceNormalization, GroupNormalization and RMSNormalization (negative axis) of
// the main graph, at the model's default-domain `opset`, by its decomposition; returns how many it
// replaced. `parameters`: torch.export's signature parameters, when the model has one.
int decomposeNormalizations(onnx::ModelProto& model, int opset, const std::optional<std::set<std::string>>& parameters);

} // namespace ps::onnximport
