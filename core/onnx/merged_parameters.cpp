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

namespace {

    bool isFloatType(int type)
    {
        return type == onnx::TensorProto::FLOAT || type == onnx::TensorProto::FLOAT16
            || type == onnx::TensorProto::BFLOAT16 || type == onnx::TensorProto::DOUBLE;
    }

    std::size_t floatElementBytes(int type)
    {
        return type == onnx::TensorProto::DOUBLE ? 8 : type == onnx::TensorProto::FLOAT ? 4 : 2;
    }

    // Values held in a typed field this file does not compare (fp16 in int32_data, double_data).
    bool typedValues(const onnx::TensorProto& t)
    {
        return t.int32_data_size() > 0 || t.double_data_size() > 0;
    }

    // The initializer's values as bytes (not copied); false where they were not read (weights left out).
    bool valuesOf(const onnx::TensorProto& t, std::string_view& bytes)
    {
        if (t.has_raw_data()) {
            bytes = t.raw_data();
            return true;
        }
        if (t.float_data_size() > 0) {
            bytes = std::string_view(reinterpret_cast<const char*>(t.float_data().data()),
                static_cast<std::size_t>(t.float_data_size()) * sizeof(float));
            return true;
        }
        return false;
    }

    // How `copy` relates to `kept`: 1 the same values, 2 their transpose (2-D), 0 neither.
    int relation(const onnx::TensorProto& kept, const onnx::TensorProto& copy)
    {
        if (kept.data_type() != copy.data_type())
            return 0;
        const std::vector<std::int64_t> a(kept.dims().begin(), kept.dims().end());
        const std::vector<std::int64_t> b(copy.dims().begin(), copy.dims().end());
        const bool same = a == b;
        const bool transposed = a.size() == 2 && b.size() == 2 && a[0] == b[1] && a[1] == b[0];
        if (!same && !transposed)
            return 0;
        if (typedValues(kept) || typedValues(copy))
            return 0; // values that cannot be compared here: left as they are
        std::string_view x;
        std::string_view y;
        if (!valuesOf(kept, x) || !valuesOf(copy, y)) // by shape: the metadata says they are one, but a
            return same && transposed ? 0 : same ? 1 : 2; // square one could be either
        if (x.size() != y.size())
            return 0;
        // Values all equal (zeros, ones) tell nothing: two such tensors are not one parameter.
        const auto e0 = floatElementBytes(kept.data_type());
        bool uniform = x.size() >= e0;
        for (std::size_t i = e0; uniform && i < x.size(); i += e0)
            uniform = x.compare(i, e0, x, 0, e0) == 0;
        if (uniform)
            return 0;
        if (same && x == y)
            return 1;
        if (!transposed)
            return 0;
        const auto e = floatElementBytes(kept.data_type());
        const auto rows = static_cast<std::size_t>(a[0]);
        const auto cols = static_cast<std::size_t>(a[1]);
        if (x.size() != rows * cols * e)
            return 0;
        for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t c = 0; c < cols; ++c) {
                if (x.compare((r * cols + c) * e, e, y, (c * rows + r) * e, e) != 0)
                    return 0;
            }
        }
        return 2;
    }

    // Per float initializer a node reads, the parameter placeholder its call read for it: the
    // initializers not named after a parameter paired one to one with the placeholders whose
    // parameter the node does not read by name. `unpaired` gets the initializers a call left open.
    void pairReads(const onnx::NodeProto& node, const std::map<std::string, std::string>& placeholders,
        const std::unordered_map<std::string, const onnx::TensorProto*>& floats,
        std::map<std::string, std::set<std::string>>& standsFor, std::set<std::string>& unpaired)
    {
        const auto read = placeholdersRead(fxNode(node), placeholders);
        std::vector<std::string> open;
        for (const auto& r : read) {
            const auto& target = placeholders.at(r);
            if (std::find(node.input().begin(), node.input().end(), target) == node.input().end())
                open.push_back(r);
        }
        std::vector<std::string> copies;
        for (const auto& in : node.input()) {
            if (floats.contains(in) && std::find(copies.begin(), copies.end(), in) == copies.end())
                copies.push_back(in);
        }
        std::erase_if(copies, [&](const std::string& name) {
            return std::any_of(
                placeholders.begin(), placeholders.end(), [&](const auto& p) { return p.second == name; });
        });
        if (copies.size() == 1 && open.size() == 1) {
            standsFor[copies.front()].insert(open.front());
            return;
        }
        unpaired.insert(copies.begin(), copies.end());
    }

    // Every copy in `replaced` (copy -> kept, relation 1 same values, 2 transpose) read as the kept
    // initializer: the same values by its name, a transpose through a Transpose node ahead of every reader.
    void applyTies(onnx::GraphProto& g, const std::map<std::string, std::pair<std::string, int>>& replaced)
    {
        if (replaced.empty())
            return;
        auto* graph = &g;
        for (auto& node : *graph->mutable_node()) {
            for (int i = 0; i < node.input_size(); ++i) {
                const auto r = replaced.find(node.input(i));
                if (r != replaced.end() && r->second.second == 1)
                    node.set_input(i, r->second.first);
            }
        }
        auto* inits = graph->mutable_initializer();
        inits->erase(std::remove_if(inits->begin(), inits->end(),
                         [&](const onnx::TensorProto& t) { return replaced.contains(t.name()); }),
            inits->end());
        // An initializer the file also lists as a graph input (older exporters) goes from there too.
        auto* inputs = graph->mutable_input();
        inputs->erase(std::remove_if(inputs->begin(), inputs->end(),
                          [&](const onnx::ValueInfoProto& v) { return replaced.contains(v.name()); }),
            inputs->end());
        // Transposed copies become Transpose nodes ahead of every reader.
        std::vector<onnx::NodeProto> front;
        for (const auto& [copy, keptHow] : replaced) {
            if (keptHow.second != 2)
                continue;
            auto& n = front.emplace_back();
            n.set_op_type("Transpose");
            n.set_name("tied/" + copy);
            n.add_input(keptHow.first);
            n.add_output(copy);
            auto* perm = n.add_attribute();
            perm->set_name("perm");
            perm->set_type(onnx::AttributeProto::INTS);
            perm->add_ints(1);
            perm->add_ints(0);
        }
        if (!front.empty()) {
            google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
            for (auto& n : front)
                *nodes.Add() = std::move(n);
            for (auto& n : *graph->mutable_node())
                *nodes.Add() = std::move(n);
            graph->mutable_node()->Swap(&nodes);
        }
    }

    bool hasSubgraphs(const onnx::GraphProto& graph)
    {
        for (const auto& node : graph.node()) {
            for (const auto& a : node.attribute()) {
                if (a.type() == onnx::AttributeProto::GRAPH || a.type() == onnx::AttributeProto::GRAPHS)
                    return true;
            }
        }
        return false;
    }

} // namespace

int tieFoldedCopies(onnx::ModelProto& model)
{
    const auto signature = torchExportPlaceholders(model.graph());
    if (!signature || signature->empty())
        return 0;
    const auto& placeholders = *signature;
    auto* graph = model.mutable_graph();
    if (hasSubgraphs(*graph))
        return 0; // a subgraph may read a copy by name: not renamed here
    std::unordered_map<std::string, const onnx::TensorProto*> floats;
    for (const auto& t : graph->initializer()) {
        if (isFloatType(t.data_type()) && t.dims_size() > 0)
            floats[t.name()] = &t;
    }
    std::map<std::string, std::set<std::string>> standsFor;
    std::set<std::string> unpaired;
    for (const auto& node : graph->node())
        pairReads(node, placeholders, floats, standsFor, unpaired);
    // Per parameter: the initializer named after it first, then the copies standing for it alone.
    std::map<std::string, std::vector<std::string>> members;
    for (const auto& [placeholder, target] : placeholders) {
        if (floats.contains(target))
            members[placeholder].push_back(target);
    }
    for (const auto& [name, params] : standsFor) {
        if (params.size() == 1 && !unpaired.contains(name))
            members[*params.begin()].push_back(name);
    }
    std::map<std::string, std::pair<std::string, int>> replaced; // copy -> (kept, relation)
    for (const auto& [placeholder, names] : members) {
        for (std::size_t k = 1; k < names.size(); ++k) {
            const auto how = relation(*floats.at(names.front()), *floats.at(names[k]));
            if (how != 0)
                replaced[names[k]] = { names.front(), how };
        }
    }
    // A copy read through a value fx folded away (`x @ w.T`: its call names `%permute`, not the
    // parameter) pairs with nothing: where its values (read, not all equal) are a parameter's or
    // their transpose, it is that parameter too.
    std::set<std::string> targets;
    for (const auto& [placeholder, target] : placeholders) {
        if (floats.contains(target))
            targets.insert(target);
    }
    for (const auto& [name, tensor] : floats) {
        if (targets.contains(name) || replaced.contains(name) || standsFor.contains(name))
            continue;
        std::string_view bytes;
        if (!valuesOf(*tensor, bytes))
            continue;
        for (const auto& target : targets) {
            std::string_view own;
            if (!valuesOf(*floats.at(target), own))
                continue;
            if (const auto how = relation(*floats.at(target), *tensor); how != 0) {
                replaced[name] = { target, how };
                break;
            }
        }
    }
    applyTies(*graph, replaced);
    return static_cast<int>(replaced.size());
}

int tieCopiesByValue(onnx::ModelProto& model, const std::set<std::string>& kept, const std::set<std::string>& named)
{
    auto* graph = model.mutable_graph();
    if (hasSubgraphs(*graph))
        return 0;
    std::unordered_map<std::string, const onnx::TensorProto*> floats;
    for (const auto& t : graph->initializer()) {
        if (isFloatType(t.data_type()) && t.dims_size() > 0)
            floats[t.name()] = &t;
    }
    std::map<std::string, std::pair<std::string, int>> replaced;
    for (const auto& [name, tensor] : floats) {
        std::string_view bytes;
        if (kept.contains(name) || named.contains(name) || !valuesOf(*tensor, bytes))
            continue;
        // A copy of exactly one parameter (layers cloned unchanged hold equal values: none is tied).
        std::vector<std::pair<std::string, int>> matches;
        for (const auto& target : kept) {
            const auto it = floats.find(target);
            std::string_view own;
            if (it == floats.end() || !valuesOf(*it->second, own))
                continue;
            if (const auto how = relation(*it->second, *tensor); how != 0)
                matches.emplace_back(target, how);
        }
        if (matches.size() == 1)
            replaced[name] = matches.front();
    }
    applyTies(*graph, replaced);
    return static_cast<int>(replaced.size());
}

std::set<std::string> foldedBufferConstants(const onnx::ModelProto& model)
{
    const auto signature = torchExportPlaceholders(model.graph());
    if (!signature || signature->empty())
        return {};
    const auto& placeholders = *signature;
    std::set<std::string> initializers;
    for (const auto& t : model.graph().initializer())
        initializers.insert(t.name());
    std::set<std::string> accounted;
    std::map<std::string, bool> readsNoParameter; // float initializer -> every reader's call names none
    for (const auto& node : model.graph().node()) {
        const auto fx = fxNode(node);
        const auto read = placeholdersRead(fx, placeholders);
        accounted.insert(read.begin(), read.end());
        for (const auto& in : node.input()) {
            if (!initializers.contains(in))
                continue;
            const auto [it, fresh] = readsNoParameter.try_emplace(in, true);
            it->second = it->second && !fx.empty() && read.empty();
        }
    }
    // fx names a value after the op that made it ("zeros_3"): a factory op's output holds no parameter.
    const auto factoryMade = [](const std::string& name) {
        for (const std::string_view op : { "zeros", "ones", "full", "arange", "empty", "scalar_tensor" }) {
            if (name.starts_with(op) && (name.size() == op.size() || name[op.size()] == '_')
                && name.find_first_not_of("0123456789", std::min(name.size(), op.size() + 1)) == std::string::npos)
                return true;
        }
        return false;
    };
    bool folded = false; // a parameter was folded into some initializer: which one is unknown
    for (const auto& [placeholder, target] : placeholders)
        folded = folded || (!accounted.contains(placeholder) && !initializers.contains(target));
    std::set<std::string> targets;
    for (const auto& [placeholder, target] : placeholders)
        targets.insert(target);
    // Without values, a tensor shaped as a parameter or its transpose may be a copy tieFoldedCopies
    // could not check: it stays trainable.
    std::vector<std::vector<std::int64_t>> parameterShapes;
    for (const auto& t : model.graph().initializer()) {
        if (targets.contains(t.name()))
            parameterShapes.emplace_back(t.dims().begin(), t.dims().end());
    }
    const auto mayBeParameterCopy = [&](const onnx::TensorProto& t) {
        std::string_view bytes;
        if (valuesOf(t, bytes))
            return false; // with values, tieFoldedCopies already took the copies
        const std::vector<std::int64_t> d(t.dims().begin(), t.dims().end());
        return std::any_of(parameterShapes.begin(), parameterShapes.end(),
            [&](const auto& p) { return p == d || (p.size() == 2 && d.size() == 2 && p[0] == d[1] && p[1] == d[0]); });
    };
    std::set<std::string> out;
    for (const auto& t : model.graph().initializer()) {
        std::int64_t n = 1;
        for (auto d : t.dims())
            n *= d;
        const auto r = readsNoParameter.find(t.name());
        if (isFloatType(t.data_type()) && n > 1 && !targets.contains(t.name()) && r != readsNoParameter.end()
            && r->second && (!folded || factoryMade(t.name())) && !mayBeParameterCopy(t))
            out.insert(t.name());
    }
    return out;
}

} // namespace ps::onnximport
