// What PipeStudio's tracer (profiler/python/pipestudio_trace.py) writes beside an export: the
// module's parameters and buffers as torch holds them (model metadata "pipestudio.module", JSON),
// each with all its names (a tied weight is one tensor under several), whether it trains, its
// element count and the sum and sum of squares of its values. An ONNX file alone cannot say
// which initializers are buffers or frozen parameters, or that a transposed copy the exporter
// folded (a tied head reading the embedding transposed) is a parameter already counted; with this,
// the importer decides them as torch does. Without it, the importer's rules stay as they are.
// Depends on: onnx protobuf types, nlohmann_json, core/util (Error).
#pragma once

#include <cstddef>
#include <cstdint>
#include <onnx/onnx_pb.h>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace ps::onnximport {

struct TracedTensor
{
    std::vector<std::string> names; // the first is the module's own path
    bool parameter = false; // false: a buffer
    bool trainable = false; // a parameter with requires_grad
    std::int64_t elements = 0;
    std::optional<double> sum; // of the values in double precision; none for integer tensors
    std::optional<double> sumSquares;
};

struct TracedModule
{
    std::string torchVersion;
    std::vector<TracedTensor> tensors;
};

// The tracer's record, or nothing for a file without one. A record that does not parse is an
// error naming the metadata key.
[[nodiscard]] std::optional<TracedModule> readTracedModule(const onnx::ModelProto& model);

// The names of the module's parameters (trainable or frozen), every alias included; with
// `buffers`, its buffers' too.
[[nodiscard]] std::set<std::string> tracedParameterNames(const TracedModule& module, bool buffers = false);

// How the tracer decides an initializer: by its name, else by its values (an exporter's copy holds
// a tensor's values, transposed or not: same count, sum and sum of squares); nothing where neither
// decides (no match, or matches both trainable and not). `values` are float32 values, or null.
struct TracedDecision
{
    bool parameter = false;
    std::string rule; // as the import report lists it
};
[[nodiscard]] std::optional<TracedDecision> decideByTracer(
    const TracedModule& module, const std::string& name, std::int64_t elements, const std::vector<std::byte>* values);

} // namespace ps::onnximport
