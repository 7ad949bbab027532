#include "onnx/tracer_metadata.h"

#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ps::onnximport {
namespace {

    constexpr const char* kKey = "pipestudio.module";

    bool close(double a, double b)
    {
        return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b)) + 1e-12;
    }

    std::string quoted(const TracedTensor& t)
    {
        return "'" + t.names.front() + "'";
    }

} // namespace

std::optional<TracedModule> readTracedModule(const onnx::ModelProto& model)
{
    for (const auto& kv : model.metadata_props()) {
        if (kv.key() != kKey)
            continue;
        try {
            const auto j = nlohmann::json::parse(kv.value());
            if (j.value("version", 0) != 1)
                throw Error("version " + j.value("version", nlohmann::json()).dump() + " (this PipeStudio reads 1)");
            TracedModule m;
            m.torchVersion = j.value("torch", "");
            for (const auto& t : j.at("tensors")) {
                TracedTensor tensor;
                tensor.names = t.at("names").get<std::vector<std::string>>();
                if (tensor.names.empty())
                    throw Error("a tensor without a name");
                tensor.parameter = t.at("kind").get<std::string>() == "parameter";
                tensor.trainable = tensor.parameter && t.at("trainable").get<bool>();
                tensor.elements = t.at("elements").get<std::int64_t>();
                if (t.contains("sum") && t["sum"].is_number()) {
                    tensor.sum = t["sum"].get<double>();
                    tensor.sumSquares = t.at("sum_squares").get<double>();
                }
                m.tensors.push_back(std::move(tensor));
            }
            return m;
        } catch (const std::exception& e) {
            throw Error(std::string("model metadata '") + kKey + "' (PipeStudio's tracer) is not valid: " + e.what());
        }
    }
    return std::nullopt;
}

std::set<std::string> tracedParameterNames(const TracedModule& module, bool buffers)
{
    std::set<std::string> out;
    for (const auto& t : module.tensors) {
        if (t.parameter || buffers)
            out.insert(t.names.begin(), t.names.end());
    }
    return out;
}

std::optional<TracedDecision> decideByTracer(
    const TracedModule& module, const std::string& name, std::int64_t elements, const std::vector<std::byte>* values)
{
    for (const auto& t : module.tensors) {
        if (std::find(t.names.begin(), t.names.end(), name) == t.names.end())
            continue;
        if (t.trainable)
            return TracedDecision { true, "parameter: the tracer names it a trainable parameter" };
        return TracedDecision { false,
            t.parameter ? "constant: the tracer names it a frozen parameter (requires_grad=False)"
                        : "constant: the tracer names it a buffer" };
    }
    if (values == nullptr || values->size() != static_cast<std::size_t>(elements) * sizeof(float))
        return std::nullopt;
    // Values all equal (a fresh LayerNorm's ones, an exporter's zeros) tell nothing.
    if (values->size() > sizeof(float)) {
        bool uniform = true;
        for (std::size_t i = sizeof(float); uniform && i < values->size(); i += sizeof(float))
            uniform = std::memcmp(values->data() + i, values->data(), sizeof(float)) == 0;
        if (uniform)
            return std::nullopt;
    }
    double sum = 0;
    double squares = 0;
    for (std::size_t i = 0; i < values->size(); i += sizeof(float)) {
        float v = 0;
        std::memcpy(&v, values->data() + i, sizeof v);
        sum += v;
        squares += static_cast<double>(v) * v;
    }
    const TracedTensor* trainable = nullptr;
    const TracedTensor* fixed = nullptr;
    for (const auto& t : module.tensors) {
        if (t.elements != elements || !t.sum || !close(*t.sum, sum) || !close(*t.sumSquares, squares))
            continue;
        (t.trainable ? trainable : fixed) = &t;
    }
    if (trainable && !fixed)
        return TracedDecision { true,
            "parameter: holds the values of the tracer's trainable parameter " + quoted(*trainable)
                + " (the exporter's copy)" };
    if (fixed && !trainable)
        return TracedDecision { false,
            "constant: holds the values of the tracer's "
                + std::string(fixed->parameter ? "frozen parameter " : "buffer ") + quoted(*fixed)
                + " (the exporter's copy)" };
    return std::nullopt;
}

} // namespace ps::onnximport
