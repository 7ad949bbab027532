#include "onnx/merged_parameters.h"

#include "onnx/opset_lowering.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {
namespace {

    // The node's fx_node text (NodeProto.metadata_props, field 9 in IR 10), or empty.
    std::string fxNode(const onnx::NodeProto& node)
    {
        constexpr int kMetadataProps = 9;
        for (const auto& entry : unknownMessageFields(node, kMetadataProps)) {
            onnx::StringStringEntryProto kv;
            if (kv.ParseFromString(entry) && kv.key() == "pkg.torch.onnx.fx_node")
                return kv.value();
        }
        return {};
    }

    // The parameter placeholders "%p_..." the call's arguments name, in order, each once.
    std::vector<std::string> placeholdersRead(const std::string& fx, const std::map<std::string, std::string>& known)
    {
        std::vector<std::string> out;
        const auto args = fx.find("(args = ");
        if (args == std::string::npos)
            return out;
        for (auto at = fx.find('%', args); at != std::string::npos; at = fx.find('%', at + 1)) {
            auto end = at + 1;
            while (end < fx.size() && (std::isalnum(static_cast<unsigned char>(fx[end])) || fx[end] == '_'))
                ++end;
            const auto name = fx.substr(at + 1, end - at - 1);
            if (known.contains(name) && std::find(out.begin(), out.end(), name) == out.end())
                out.push_back(name);
        }
        return out;
    }

} // namespace

int untieMergedParameters(onnx::ModelProto& model)
{
    const auto signature = torchExportPlaceholders(model.graph());
    if (!signature || signature->empty())
        return 0;
    const auto& placeholders = *signature;
    std::unordered_map<std::string, int> initializers; // name -> index
    for (int i = 0; i < model.graph().initializer_size(); ++i)
        initializers[model.graph().initializer(i).name()] = i;
    std::set<std::string> parameterNames;
    for (const auto& [placeholder, target] : placeholders)
        parameterNames.insert(target);
    int copies = 0;
    for (auto& node : *model.mutable_graph()->mutable_node()) {
        std::vector<int> slots; // the node's inputs that are parameter initializers
        for (int i = 0; i < node.input_size(); ++i) {
            if (parameterNames.contains(node.input(i)) && initializers.contains(node.input(i)))
                slots.push_back(i);
        }
        if (slots.empty())
            continue;
        const auto read = placeholdersRead(fxNode(node), placeholders);
        if (read.size() != slots.size())
            continue; // the call's parameters do not pair with the node's one to one
        for (std::size_t k = 0; k < slots.size(); ++k) {
            const auto& merged = node.input(slots[k]);
            const auto& own = placeholders.at(read[k]);
            if (own == merged)
                continue;
            if (!initializers.contains(own)) { // the parameter the exporter merged away: a copy
                const auto source = initializers.at(merged);
                auto* copy = model.mutable_graph()->add_initializer();
                *copy = model.graph().initializer(source);
                copy->set_name(own);
                initializers[own] = model.graph().initializer_size() - 1;
                ++copies;
            }
            node.set_input(slots[k], own);
        }
    }
    return copies;
}

} // namespace ps::onnximport
