// ONNX external data: initializers whose bytes live in a side file (`m.onnx` + `m.onnx.data`, as
// torch 2.x's exporter writes every model, and onnx.save_model(..., save_as_external_data=True)
// large ones), read into the model so every later step sees them as raw data.
// Depends on: onnx protobuf types; util/error.h.
#pragma once

#include <filesystem>
#include <onnx/onnx_pb.h>
#include <string>
#include <vector>

namespace ps::onnximport {

// Replaces each external initializer's reference by its bytes, read from the file its `location`
// names beside `modelPath` at `offset`/`length`. With `values` false only integer tensors (shape
// data the importer folds) are read; float weights stay external and their files are not looked
// for (a plan without weights, the import dialog's preview). Throws ps::Error naming the initializer and the file when
// it is missing, escapes the model's folder, or holds fewer bytes than the tensor needs. Returns the bytes read.
std::int64_t loadExternalData(onnx::ModelProto& model, const std::filesystem::path& modelPath, bool values);

// The files external initializers name that are not beside `modelPath` (each once, in order).
[[nodiscard]] std::vector<std::string> missingExternalFiles(
    const onnx::ModelProto& model, const std::filesystem::path& modelPath);

} // namespace ps::onnximport
