#include "onnx/model_import.h"

#include "util/error.h"

#include <algorithm>
#include <charconv>

namespace ps {

void addDimSizes(const std::vector<std::string>& assignments, OnnxImportOptions& options)
{
    for (const auto& d : assignments) {
        const auto eq = d.find('=');
        std::int64_t size = 0;
        const auto* end = d.data() + d.size();
        if (eq == std::string::npos || eq == 0 || std::from_chars(d.data() + eq + 1, end, size).ptr != end || size < 1)
            throw Error("--dim '" + d + "' is not NAME=SIZE with a positive size (e.g. --dim past=32)");
        options.dims[d.substr(0, eq)] = size;
    }
}

Shape parseLabelsShape(const std::string& text)
{
    Shape shape;
    try {
        shape = splitShape(text);
    } catch (const std::exception&) {
        throw Error("--labels-shape '" + text + "' is not a shape like 4,128");
    }
    if (shape.empty() || std::any_of(shape.begin(), shape.end(), [](auto d) { return d < 1; }))
        throw Error("--labels-shape '" + text + "' needs positive sizes");
    return shape;
}

OnnxImport importModel(const std::filesystem::path& path, const ModelImportOptions& options)
{
    if (!options.onnx.dims.empty()) {
        std::vector<std::string> known;
        for (const auto& d : describeOnnxInputs(path)) {
            if (d.dynamic && !d.param.empty() && std::find(known.begin(), known.end(), d.param) == known.end())
                known.push_back(d.param);
        }
        for (const auto& [name, size] : options.onnx.dims) {
            if (std::find(known.begin(), known.end(), name) != known.end())
                continue;
            std::string list;
            for (const auto& k : known)
                list += (list.empty() ? "" : ", ") + k;
            throw Error("--dim " + name + ": no dynamic input dimension of '" + path.string() + "' is named '" + name
                + "' (its named dynamic dimensions: " + (known.empty() ? std::string("none") : list) + ")");
        }
    }
    auto imported = importOnnx(path, options.onnx);
    if (!options.loss.empty()) {
        const auto kind = parseLossKind(options.loss);
        if (!kind)
            throw Error("unknown loss '" + options.loss + "' (cross-entropy or mse)");
        imported.graph = attachLoss(std::move(imported.graph), { *kind, options.labelsShape });
    }
    return imported;
}

} // namespace ps
