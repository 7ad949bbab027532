// What the ONNX corpus tests share: the corpus directory (PS_ONNX_CORPUS, written by
// tests/data/make_onnx_corpus.py) and the import options of one of its models.
#pragma once

#include "onnx/onnx_import.h"

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

namespace ps::testing {

// The manifest, and `dir` set to the corpus directory; nullopt without one (no torch).
inline std::optional<nlohmann::json> corpusManifest(std::filesystem::path& dir)
{
    const char* env = std::getenv("PS_ONNX_CORPUS");
    if (!env || !std::filesystem::exists(std::filesystem::path(env) / "manifest.json"))
        return std::nullopt;
    dir = env;
    return nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
}

// Exports with fixed shapes import at their exported sizes (the importer's default). Of dynamic
// ones, dim 0 of the first input is the batch; dim 1 of 2-D token ids the sequence.
inline OnnxImportOptions corpusImportOptions(const nlohmann::json& entry)
{
    OnnxImportOptions options;
    if (entry["dynamic_inputs"].empty())
        return options;
    const auto& first = entry["inputs"][0];
    const auto shape = first["shape"].get<Shape>();
    if (!shape.empty())
        options.batch = shape[0];
    if (shape.size() == 2 && first["dtype"] == "int64")
        options.sequence = shape[1];
    return options;
}

} // namespace ps::testing
