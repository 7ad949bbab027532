#include "onnx/function_inlining.h"

#include "onnx/opset_lowering.h"
#include "util/error.h"

#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

namespace ps::onnximport {
namespace {

    constexpr int kMaxDepth = 32;

    using Key = std::pair<std::string, std::string>; // domain, name

    std::string domainOf(const std::string& d)
    {
        return d == "ai.onnx" ? std::string() : d;
    }

    // IR 9's FunctionProto.attribute_proto (field 11: attributes with their defaults), which
    // libonnx 1.12 keeps as an unknown field.
    std::map<std::string, onnx::AttributeProto> attributeDefaults(const onnx::FunctionProto& f)
    {
        constexpr int kAttributeProto = 11;
        std::map<std::string, onnx::AttributeProto> out;
        for (const auto& entry : unknownMessageFields(f, kAttributeProto)) {
            onnx::AttributeProto a;
            if (a.ParseFromString(entry))
                out[a.name()] = a;
        }
        return out;
    }

    struct Function
    {
        const onnx::FunctionProto* proto = nullptr;
        std::map<std::string, onnx::AttributeProto> defaults;
    };

    class Inliner
    {
    public:
        explicit Inliner(const onnx::ModelProto& model)
        {
            for (const auto& f : model.functions())
                m_functions[{ domainOf(f.domain()), f.name() }] = { &f, attributeDefaults(f) };
        }

        [[nodiscard]] bool calls(const onnx::NodeProto& node) const
        {
            return m_functions.contains({ domainOf(node.domain()), node.op_type() });
        }

        void expand(const onnx::NodeProto& node, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out, int depth)
        {
            const auto it = m_functions.find({ domainOf(node.domain()), node.op_type() });
            if (it == m_functions.end()) {
                *out.Add() = node;
                return;
            }
            const auto& f = *it->second.proto;
            const std::string what = "local function '" + f.name() + "' (called by node '" + node.name() + "')";
            if (depth >= kMaxDepth)
                throw Error(what + " nests calls more than " + std::to_string(kMaxDepth) + " deep (recursion?)");
            if (node.input_size() > f.input_size() || node.output_size() > f.output_size())
                throw Error(what + ": the call has " + std::to_string(node.input_size()) + " inputs and "
                    + std::to_string(node.output_size()) + " outputs, the function " + std::to_string(f.input_size())
                    + " and " + std::to_string(f.output_size()));
            ++m_inlined;
            const std::string prefix = uniquePrefix(node);
            std::unordered_map<std::string, std::string> names; // formal -> actual ("" where omitted)
            for (int i = 0; i < f.input_size(); ++i)
                names[f.input(i)] = i < node.input_size() ? node.input(i) : std::string();
            for (int i = 0; i < f.output_size(); ++i) {
                const bool given = i < node.output_size() && !node.output(i).empty();
                if (names.contains(f.output(i))) { // an input passed through: Identity to the output
                    if (given) {
                        auto* pass = out.Add();
                        pass->set_op_type("Identity");
                        pass->set_name(prefix + f.output(i));
                        pass->add_input(names[f.output(i)]);
                        pass->add_output(node.output(i));
                    }
                    continue;
                }
                names[f.output(i)] = given ? node.output(i) : prefix + f.output(i); // omitted: internal
            }
            std::map<std::string, const onnx::AttributeProto*> given;
            for (const auto& a : node.attribute())
                given[a.name()] = &a;
            const auto rename = [&](const std::string& name) {
                if (name.empty())
                    return name;
                const auto found = names.find(name);
                return found != names.end() ? found->second : names.emplace(name, prefix + name).first->second;
            };
            for (const auto& body : f.node()) {
                onnx::NodeProto b = body;
                b.set_name(prefix + (body.name().empty() ? body.op_type() : body.name()));
                for (auto& in : *b.mutable_input())
                    in = rename(in);
                for (auto& o : *b.mutable_output())
                    o = rename(o);
                google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
                for (const auto& a : body.attribute()) {
                    if (a.ref_attr_name().empty()) {
                        *attrs.Add() = a;
                        continue;
                    }
                    const onnx::AttributeProto* value = nullptr;
                    if (const auto g = given.find(a.ref_attr_name()); g != given.end())
                        value = g->second;
                    else if (const auto d = it->second.defaults.find(a.ref_attr_name()); d != it->second.defaults.end())
                        value = &d->second;
                    if (value == nullptr)
                        continue; // absent, as ONNX defines an unset referenced attribute
                    auto* copy = attrs.Add();
                    *copy = *value;
                    copy->set_name(a.name());
                }
                b.mutable_attribute()->Swap(&attrs);
                expand(b, out, depth + 1);
            }
        }

        [[nodiscard]] int inlined() const
        {
            return m_inlined;
        }

    private:
        // "<call>/" (the call's name, else its operator), with "#k" where that prefix was used.
        std::string uniquePrefix(const onnx::NodeProto& node)
        {
            const std::string base = node.name().empty() ? node.op_type() : node.name();
            std::string prefix = base + "/";
            for (int k = 2; m_prefixes.contains(prefix); ++k)
                prefix = base + "#" + std::to_string(k) + "/";
            m_prefixes.insert(prefix);
            return prefix;
        }

        std::set<std::string> m_prefixes;
        std::map<Key, Function> m_functions;
        int m_inlined = 0;
    };

} // namespace

int inlineLocalFunctions(onnx::ModelProto& model)
{
    if (model.functions_size() == 0)
        return 0;
    Inliner inliner(model);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    for (const auto& node : model.graph().node())
        inliner.expand(node, nodes, 0);
    model.mutable_graph()->mutable_node()->Swap(&nodes);
    std::set<std::string> functionDomains;
    for (const auto& f : model.functions())
        functionDomains.insert(domainOf(f.domain()));
    std::set<std::string> used;
    for (const auto& n : model.graph().node())
        used.insert(domainOf(n.domain()));
    google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto> imports;
    std::set<std::string> imported;
    for (const auto& o : model.opset_import()) {
        if (!functionDomains.contains(domainOf(o.domain())) || used.contains(domainOf(o.domain()))) {
            *imports.Add() = o;
            imported.insert(domainOf(o.domain()));
        }
    }
    for (const auto& f : model.functions()) { // domains only a body imported
        for (const auto& o : f.opset_import()) {
            if (used.contains(domainOf(o.domain())) && imported.insert(domainOf(o.domain())).second)
                *imports.Add() = o;
        }
    }
    model.mutable_opset_import()->Swap(&imports);
    model.clear_functions();
    return inliner.inlined();
}

} // namespace ps::onnximport
