// The roles of an ONNX model's input dimensions (fixed_shapes.h explains the rules) and their
// JSON form in the project's model configuration.
#include "onnx/fixed_shapes.h"
#include "onnx/shape_arith.h"
#include "onnx/shape_folding.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

namespace ps {

const char* toString(DimRole role)
{
    switch (role) {
    case DimRole::Batch:
        return "batch";
    case DimRole::Sequence:
        return "sequence";
    case DimRole::Other:
        return "other";
    }
    return "other";
}

std::string inputDimsToJson(const std::vector<OnnxInputDim>& dims)
{
    auto list = nlohmann::json::array();
    for (const auto& d : dims) {
        nlohmann::json j { { "input", d.input }, { "axis", d.axis }, { "dynamic", d.dynamic },
            { "role", toString(d.role) }, { "size", d.size } };
        if (d.dynamic)
            j["param"] = d.param;
        else
            j["exported"] = d.exported;
        list.push_back(std::move(j));
    }
    return nlohmann::json { { "input_dims", list } }.dump();
}

std::vector<OnnxInputDim> inputDimsFromJson(const std::string& configJson)
{
    const auto j = nlohmann::json::parse(configJson, nullptr, false);
    std::vector<OnnxInputDim> dims;
    if (!j.is_object() || !j.contains("input_dims") || !j["input_dims"].is_array())
        return dims;
    for (const auto& e : j["input_dims"]) {
        if (!e.is_object())
            continue;
        OnnxInputDim d;
        d.input = e.value("input", "");
        d.axis = e.value("axis", 0);
        d.dynamic = e.value("dynamic", false);
        d.param = e.value("param", "");
        d.exported = e.value("exported", std::int64_t { 0 });
        d.size = e.value("size", std::int64_t { 0 });
        const auto role = e.value("role", "other");
        d.role = role == "batch" ? DimRole::Batch : role == "sequence" ? DimRole::Sequence : DimRole::Other;
        dims.push_back(std::move(d));
    }
    return dims;
}

std::string importConfigJson(const std::vector<OnnxInputDim>& dims, const std::vector<InitializerRule>& rules,
    const std::map<std::string, std::string>& moduleClasses)
{
    auto j = nlohmann::json::parse(inputDimsToJson(dims));
    auto list = nlohmann::json::array();
    for (const auto& r : rules)
        list.push_back({ { "name", r.name }, { "kind", r.parameter ? "parameter" : "constant" }, { "rule", r.rule } });
    j["initializers"] = std::move(list);
    if (!moduleClasses.empty())
        j["module_classes"] = moduleClasses;
    return j.dump();
}

std::map<std::string, std::string> moduleClassesFromJson(const std::string& configJson)
{
    const auto j = nlohmann::json::parse(configJson, nullptr, false);
    std::map<std::string, std::string> out;
    if (!j.is_object() || !j.contains("module_classes") || !j["module_classes"].is_object())
        return out;
    for (const auto& [path, type] : j["module_classes"].items()) {
        if (type.is_string())
            out[path] = type.get<std::string>();
    }
    return out;
}

std::vector<InitializerRule> initializerRulesFromJson(const std::string& configJson)
{
    const auto j = nlohmann::json::parse(configJson, nullptr, false);
    std::vector<InitializerRule> rules;
    if (!j.is_object() || !j.contains("initializers") || !j["initializers"].is_array())
        return rules;
    for (const auto& e : j["initializers"]) {
        if (e.is_object())
            rules.push_back({ e.value("name", ""), e.value("kind", "") == "parameter", e.value("rule", "") });
    }
    return rules;
}

} // namespace ps

namespace ps::onnximport {

using namespace arith;

namespace {

    bool isIntegerType(int t)
    {
        using T = onnx::TensorProto;
        return t == T::INT64 || t == T::INT32 || t == T::INT16 || t == T::INT8 || t == T::UINT8;
    }

    // Inputs a convolution reads (directly, or through the Unsqueeze of a 1-D one lowered to 2-D):
    // (N, C, ...) with the batch first and channels second.
    std::set<std::string> convolvedInputs(const onnx::GraphProto& graph)
    {
        std::set<std::string> convInputs;
        for (const auto& n : graph.node()) {
            if (n.op_type() == "Conv" && n.input_size() > 0)
                convInputs.insert(n.input(0));
        }
        std::set<std::string> out;
        for (const auto& n : graph.node()) {
            if (n.input_size() == 0)
                continue;
            if (n.op_type() == "Conv"
                || (n.op_type() == "Unsqueeze" && n.output_size() == 1 && convInputs.contains(n.output(0))))
                out.insert(n.input(0));
        }
        return out;
    }

} // namespace

namespace {

    // A graph input that is not an initializer, with its dims as exported.
    struct DataInput
    {
        std::string name;
        int elemType;
        std::vector<InputDim> dims;
    };

    std::vector<DataInput> dataInputs(const onnx::ModelProto& model)
    {
        std::set<std::string> initializers;
        for (const auto& i : model.graph().initializer())
            initializers.insert(i.name());
        std::vector<DataInput> inputs;
        for (const auto& input : model.graph().input()) {
            if (initializers.contains(input.name()) || !input.type().has_tensor_type())
                continue;
            DataInput in { input.name(), input.type().tensor_type().elem_type(), {} };
            int axis = 0;
            for (const auto& dim : input.type().tensor_type().shape().dim()) {
                InputDim d;
                d.input = input.name();
                d.axis = axis++;
                d.dynamic = !(dim.has_dim_value() && dim.dim_value() > 0);
                d.param = dim.dim_param();
                d.exported = d.dynamic ? 0 : dim.dim_value();
                d.size = d.exported;
                in.dims.push_back(std::move(d));
            }
            inputs.push_back(std::move(in));
        }
        return inputs;
    }

    // Axis 0, else 1, where every rank >= 2 input has one size there (its fixed dims); else 0.
    int commonBatchAxis(const std::vector<DataInput>& inputs)
    {
        const auto agree = [&inputs](int axis) {
            std::optional<std::int64_t> size;
            for (const auto& in : inputs) {
                if (in.dims.size() < 2)
                    continue;
                const auto& d = in.dims[static_cast<std::size_t>(axis)];
                if (d.dynamic)
                    continue;
                if (size && *size != d.exported)
                    return false;
                size = d.exported;
            }
            return true;
        };
        return agree(0) ? 0 : agree(1) ? 1 : 0;
    }

} // namespace

std::vector<InputDim> describeInputDims(const onnx::ModelProto& model, std::optional<int> batchAxis)
{
    auto inputs = dataInputs(model);
    // The batch axis of fixed inputs: given, else one every rank >= 2 input has with one size.
    const std::optional<int> batch = batchAxis ? batchAxis : std::optional<int>(commonBatchAxis(inputs));
    // A dynamic dimension not named like a sequence is the batch the importer binds (the first
    // such of each input): then no fixed dimension is a batch.
    const auto dynamicBatch = [](const DataInput& in) -> std::optional<int> {
        for (const auto& d : in.dims) {
            std::string lower = d.param;
            std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
            if (d.dynamic && lower.find("seq") == std::string::npos)
                return d.axis;
        }
        return std::nullopt;
    };
    const bool anyDynamicBatch =
        std::any_of(inputs.begin(), inputs.end(), [&](const DataInput& in) { return dynamicBatch(in).has_value(); });
    const auto convolved = convolvedInputs(model.graph());
    std::vector<InputDim> out;
    for (auto& in : inputs) {
        const auto rank = static_cast<int>(in.dims.size());
        const auto own = dynamicBatch(in);
        const int axis = batchAxis ? *batchAxis : own ? *own : convolved.contains(in.name) ? 0 : *batch;
        for (auto& d : in.dims) {
            if (d.dynamic)
                continue; // bound by name by the importer
            if (rank >= 1 && d.axis == axis && (rank >= 2 || batchAxis) && !anyDynamicBatch)
                d.role = DimRole::Batch;
            const bool sequenceLike =
                (rank == 2 && isIntegerType(in.elemType)) || (rank == 3 && in.elemType == onnx::TensorProto::FLOAT);
            if (convolved.contains(in.name)) { // (N, C, L): the length is the sequence
                if (rank == 3 && axis == 0 && d.axis == 2)
                    d.role = DimRole::Sequence;
            } else if (sequenceLike && axis <= 1 && d.axis == 1 - axis) {
                d.role = DimRole::Sequence;
            }
        }
        for (auto& d : in.dims)
            out.push_back(std::move(d));
    }
    return out;
}

std::optional<std::int64_t> exportedBatch(const std::vector<InputDim>& dims)
{
    for (const auto& d : dims) {
        if (!d.dynamic && d.role == DimRole::Batch)
            return d.exported;
    }
    return std::nullopt;
}

bool batchAxisAmbiguous(const onnx::ModelProto& model)
{
    const auto dims = describeInputDims(model, std::nullopt);
    const auto convolved = convolvedInputs(model.graph());
    std::set<std::string> inputs;
    bool candidate = false;
    for (const auto& d : dims)
        inputs.insert(d.input);
    for (const auto& input : inputs) {
        std::vector<const InputDim*> mine;
        for (const auto& d : dims) {
            if (d.input == input)
                mine.push_back(&d);
        }
        if (mine.size() != 3 || convolved.contains(input))
            return false; // tokens, images, tables and convolutions' inputs have their batch first
        if (mine[0]->dynamic || mine[1]->dynamic || mine[0]->exported < 2 || mine[1]->exported < 2)
            return false;
        candidate = true;
    }
    // Several (T, B, C) inputs of different T already told the batch apart (describeInputDims).
    return candidate && describeInputDims(model, std::nullopt) == describeInputDims(model, 0);
}

int separableAxis(
    const onnx::ModelProto& model, const std::vector<int>& order, const std::function<void(onnx::ModelProto&)>& infer)
{
    auto before = model;
    infer(before);
    const auto old = shapesOf(before);
    std::vector<int> separable;
    for (int axis : { 0, 1 }) {
        auto dims = describeInputDims(model, axis);
        for (auto& d : dims) {
            if (!d.dynamic && d.role == DimRole::Batch)
                d.size = std::max<std::int64_t>(1, mul(2, d.exported));
        }
        auto copy = model;
        try {
            respecialise(copy, dims, order, infer);
            infer(copy);
        } catch (const std::exception&) {
            continue; // cannot be resized along this axis: not the batch
        }
        // Samples never meet along the batch: every value grows at most as fast as the batch.
        // Along a sequence, attention scores grow with its square.
        double growth = 0;
        for (const auto& [name, shape] : shapesOf(copy)) {
            const auto it = old.find(name);
            const auto was = it == old.end() ? 0 : product(it->second, 0, it->second.size());
            if (was > 0)
                growth =
                    std::max(growth, static_cast<double>(product(shape, 0, shape.size())) / static_cast<double>(was));
        }
        if (growth <= 2.0 + 1e-9)
            separable.push_back(axis);
    }
    return separable.size() == 1 ? separable.front() : 0;
}

} // namespace ps::onnximport
