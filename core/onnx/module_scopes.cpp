#include "onnx/module_scopes.h"

#include "onnx/opset_lowering.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace ps::onnximport {
namespace {

    std::map<std::string, std::string> nodeMetadata(const onnx::NodeProto& node)
    {
        constexpr int kMetadataProps = 9; // NodeProto.metadata_props (IR 10), unknown to libonnx 1.12
        std::map<std::string, std::string> out;
        for (const auto& entry : unknownMessageFields(node, kMetadataProps)) {
            onnx::StringStringEntryProto kv;
            if (kv.ParseFromString(entry))
                out[kv.key()] = kv.value();
        }
        return out;
    }

    // The items of a Python list of strings as repr() writes it: ['', 'h', 'h.0'].
    std::vector<std::string> pythonStrings(const std::string& text)
    {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < text.size(); ++i) {
            const char quote = text[i];
            if (quote != '\'' && quote != '"')
                continue;
            std::string item;
            for (++i; i < text.size() && text[i] != quote; ++i) {
                if (text[i] == '\\' && i + 1 < text.size())
                    ++i;
                item += text[i];
            }
            out.push_back(std::move(item));
        }
        return out;
    }

    std::string shortClass(const std::string& qualified)
    {
        const auto dot = qualified.find_last_of('.');
        return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
    }

    std::optional<std::vector<ModuleLevel>> fromNameScopes(const std::string& scopes, const std::string& classes)
    {
        const auto paths = pythonStrings(scopes);
        const auto types = pythonStrings(classes);
        if (paths.size() != types.size() || paths.size() < 2)
            return std::nullopt; // not the form torch writes: as if there were no metadata
        std::vector<ModuleLevel> out;
        for (std::size_t i = 0; i + 1 < paths.size(); ++i) // the last entry is the op itself
            out.push_back({ paths[i], shortClass(types[i]) });
        return out;
    }

    // ": __main__.Net/h.0: __main__.Block/h.0.fc: torch.nn.modules.linear.Linear/addmm: aten.addmm.default",
    // the last entry the op itself.
    std::optional<std::vector<ModuleLevel>> fromNamespace(const std::string& text)
    {
        std::vector<ModuleLevel> out;
        std::size_t start = 0;
        while (start <= text.size()) {
            const auto end = std::min(text.find('/', start), text.size());
            const auto part = text.substr(start, end - start);
            const auto colon = part.find(": ");
            if (colon == std::string::npos)
                return std::nullopt;
            out.push_back({ part.substr(0, colon), shortClass(part.substr(colon + 2)) });
            start = end + 1;
        }
        out.pop_back(); // the op (a lone entry: a call in no module, not even the root's)
        return out;
    }

} // namespace

std::optional<std::vector<ModuleLevel>> torchModuleLevels(const onnx::NodeProto& node)
{
    const auto meta = nodeMetadata(node);
    const auto scopes = meta.find("pkg.torch.onnx.name_scopes");
    const auto classes = meta.find("pkg.torch.onnx.class_hierarchy");
    if (scopes != meta.end() && classes != meta.end())
        return fromNameScopes(scopes->second, classes->second);
    if (const auto ns = meta.find("namespace"); ns != meta.end())
        return fromNamespace(ns->second);
    return std::nullopt;
}

std::string blockOfModulePath(const std::string& path)
{
    // As the TorchScript names' blocks (onnx_import.cpp's scopeOf): a component that is an index
    // past the first ("layers.3"), or one that ends in an index ("layer_3").
    for (std::size_t start = 0; start < path.size();) {
        const auto end = std::min(path.find('.', start), path.size());
        const auto component = std::string_view(path).substr(start, end - start);
        const auto digits = component.find_last_not_of("0123456789");
        const bool index = !component.empty() && digits != component.size() - 1
            && (digits == std::string_view::npos || component[digits] == '_');
        if (index && (start > 0 || digits != std::string_view::npos))
            return path.substr(0, end);
        start = end + 1;
    }
    return {};
}

} // namespace ps::onnximport
