// An ONNX model imported as a project's model, the way `pipestudio import` and the studio's
// File > Import ONNX take it: the importer's options, sizes of named dynamic dimensions checked
// against the file, and a loss attached to the first output so the model trains.
// Depends on: onnx/onnx_import.h, graph/loss.h.
#pragma once

#include "graph/loss.h"
#include "onnx/onnx_import.h"

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace ps {

struct ModelImportOptions
{
    OnnxImportOptions onnx;
    std::string loss; // "", "cross-entropy" or "mse"
    std::optional<Shape> labelsShape; // with a loss: the labels' shape (default: from the output)
};

// "NAME=SIZE" texts (`--dim past=32`) into `options.dims`; throws ps::Error naming the text.
void addDimSizes(const std::vector<std::string>& assignments, OnnxImportOptions& options);
// "4,128" as a labels shape of positive sizes; throws ps::Error naming the text.
[[nodiscard]] Shape parseLabelsShape(const std::string& text);

// Imports `path`: every size given by name must name a dynamic dimension of its inputs (a
// misspelt one would do nothing), then the importer runs and the loss is attached. Throws
// ps::Error naming the file, the dimension or the loss.
[[nodiscard]] OnnxImport importModel(const std::filesystem::path& path, const ModelImportOptions& options);

} // namespace ps
