// Internal to the ONNX importer: models exported with fixed shapes. torch.onnx.export without
// dynamic axes (its default) writes every input dimension as a number, and the traced shape
// constants (x.view(B, T, H, D) becomes Reshape(x, [2, 16, 4, 8])) carry the batch and sequence
// sizes of the example inputs. The importer takes those sizes as the defaults; another size
// re-specialises the graph: the input dimensions are set to it, every Reshape/Expand shape
// constant that carries the size is rewritten, and shapes are inferred again. A graph whose
// constants cannot be rewritten safely (a constant that fixes the size elsewhere: a folded mask,
// position ids, a zeros tensor) is refused naming the node, never imported at a mismatched size.
//
// Which fixed dimension is the batch: an explicit axis; else dimension 0 of every data input when
// they all agree, else a dimension all rank >= 2 inputs share with the same size (sequence-first
// encoder-decoders export (T, B, D) inputs of different T). Rank-3 float inputs alone do not say
// whether they are (B, T, C) or (T, B, C): the batch is the one of the first two dimensions along
// which samples never meet (doubling it at most doubles every value; doubling a sequence grows the
// attention scores four times), found by re-specialising each. The sequence: the other of the first
// two dimensions of token ids (integer, rank 2) and of rank-3 float inputs (B, T, C).
// Roles: input_dims.cpp; re-specialising: fixed_shapes.cpp.
// Depends on: onnx/onnx_import.h (the dimension report), onnx/shape_folding.h, libonnx, util/error.h.
#pragma once

#include "onnx/onnx_import.h"

#include <cstdint>
#include <functional>
#include <onnx/onnx_pb.h>
#include <optional>
#include <string>
#include <vector>

namespace ps::onnximport {

using InputDim = OnnxInputDim;

// Every dimension of every data input, fixed ones with their role. `batchAxis` forces the batch
// dimension of fixed inputs (an input shorter than it has none).
[[nodiscard]] std::vector<InputDim> describeInputDims(const onnx::ModelProto& model, std::optional<int> batchAxis);

// The batch size the file was exported with (the first fixed batch dimension), if any.
// Whether the fixed inputs leave the batch dimension open between 0 and 1 (rank-3 inputs with both
// fixed): separableAxis decides.
[[nodiscard]] bool batchAxisAmbiguous(const onnx::ModelProto& model);
// 0 or 1: the leading dimension along which the graph is separable (0 when both or neither are).
[[nodiscard]] int separableAxis(
    const onnx::ModelProto& model, const std::vector<int>& order, const std::function<void(onnx::ModelProto&)>& infer);

[[nodiscard]] std::optional<std::int64_t> exportedBatch(const std::vector<InputDim>& dims);

// Rewrites `model` (dynamic dimensions already bound) so that every fixed dimension whose `size`
// differs from `exported` takes `size`: the input dimensions and the shape constants of Reshape and
// Expand nodes that carry it (a constant shared by several nodes is copied). `infer` runs shape
// inference (with the importer's folding) on a copy; `order` is a topological order of the nodes.
// Returns how many shape constants were rewritten. Throws ps::Error (text without the file name)
// naming the node whose constant fixes the size and the export argument that makes it dynamic.
int respecialise(onnx::ModelProto& model, const std::vector<InputDim>& dims, const std::vector<int>& order,
    const std::function<void(onnx::ModelProto&)>& infer);

} // namespace ps::onnximport
