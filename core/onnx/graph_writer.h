// Writing an ONNX node out as other nodes (onnx/composite_lowering.h, onnx/attention_lowering.h):
// new nodes go to an output list, new constants to the model's initializers, both named after the
// node being replaced ("<its first output>/<name>", unique in the graph); value types come from the
// model's value_info, inputs, outputs and initializers as they were before the rewrite.
// Depends on: onnx protobuf types.
#pragma once

#include <cstdint>
#include <onnx/onnx_pb.h>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {

class GraphWriter
{
public:
    explicit GraphWriter(onnx::ModelProto& model)
        : m_model(model)
    {
        for (const auto& t : model.graph().initializer())
            m_initializers[t.name()] = &t;
        for (const auto* list : { &model.graph().value_info(), &model.graph().input(), &model.graph().output() }) {
            for (const auto& v : *list)
                m_types[v.name()] = &v.type();
        }
    }

    // Starts writing the replacement of `n` into `out`.
    void begin(const onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
    {
        m_out = &out;
        m_prefix = n.output(0) + "/";
        // Fields this protobuf does not know (IR 10's metadata_props: the module path) go to every
        // node written in its place.
        m_annotations.Clear();
        m_annotations.mutable_unknown_fields()->MergeFrom(n.unknown_fields());
    }

    // A node `op` reading `inputs`, its one output named after it; returns that output.
    std::string node(const std::string& op, const std::string& name, std::vector<std::string> inputs)
    {
        return nodeTo(op, name, std::move(inputs), m_prefix + name);
    }
    // The same, writing the value `output` (one of the replaced node's outputs).
    std::string nodeTo(
        const std::string& op, const std::string& name, std::vector<std::string> inputs, const std::string& output)
    {
        auto* n = m_out->Add();
        n->mutable_unknown_fields()->MergeFrom(m_annotations.unknown_fields());
        n->set_op_type(op);
        n->set_name(m_prefix + name);
        for (auto& i : inputs)
            n->add_input(std::move(i));
        n->add_output(output);
        return output;
    }
    onnx::NodeProto& last()
    {
        return *m_out->Mutable(m_out->size() - 1);
    }

    // An int64 vector initializer, or a float scalar one.
    std::string constant(const std::string& name, const std::vector<std::int64_t>& values)
    {
        auto* t = m_model.mutable_graph()->add_initializer();
        t->set_name(m_prefix + name);
        t->set_data_type(onnx::TensorProto::INT64);
        t->add_dims(static_cast<std::int64_t>(values.size()));
        for (auto v : values)
            t->add_int64_data(v);
        return t->name();
    }
    std::string scalar(const std::string& name, float value)
    {
        auto* t = m_model.mutable_graph()->add_initializer();
        t->set_name(m_prefix + name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        t->add_float_data(value);
        return t->name();
    }

    static void setInt(onnx::NodeProto& n, const std::string& name, std::int64_t value)
    {
        auto* a = n.add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(value);
    }
    static void setInts(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& values)
    {
        auto* a = n.add_attribute();
        a->set_name(name);
        a->set_type(onnx::AttributeProto::INTS);
        for (auto v : values)
            a->add_ints(v);
    }

    // Shape(x)[start:end] (a 1-D int64 value).
    std::string shapeSlice(const std::string& name, const std::string& x, std::int64_t start, std::int64_t end)
    {
        const auto out = node("Shape", name, { x });
        setInt(last(), "start", start);
        setInt(last(), "end", end);
        return out;
    }

    // Element type and dims (-1 where unknown; empty where no shape is known) of a value, where
    // value_info, the graph's inputs and outputs or an initializer say.
    [[nodiscard]] int elemType(const std::string& name) const
    {
        if (const auto t = m_types.find(name); t != m_types.end())
            return t->second->tensor_type().elem_type();
        if (const auto i = m_initializers.find(name); i != m_initializers.end())
            return i->second->data_type();
        return 0;
    }
    [[nodiscard]] std::vector<std::int64_t> dims(const std::string& name) const
    {
        std::vector<std::int64_t> out;
        if (const auto t = m_types.find(name); t != m_types.end() && t->second->tensor_type().has_shape()) {
            for (const auto& d : t->second->tensor_type().shape().dim())
                out.push_back(d.has_dim_value() ? d.dim_value() : -1);
        } else if (const auto i = m_initializers.find(name); i != m_initializers.end()) {
            out.assign(i->second->dims().begin(), i->second->dims().end());
        }
        return out;
    }

protected:
    onnx::ModelProto& m_model;
    std::unordered_map<std::string, const onnx::TensorProto*> m_initializers;
    std::unordered_map<std::string, const onnx::TypeProto*> m_types; // value_info, inputs, outputs
    google::protobuf::RepeatedPtrField<onnx::NodeProto>* m_out = nullptr;
    std::string m_prefix;
    onnx::NodeProto m_annotations; // holds the replaced node's unknown fields
};

// An attribute of `n`, or `fallback` where it has none.
inline std::int64_t nodeInt(const onnx::NodeProto& n, const std::string& name, std::int64_t fallback)
{
    for (const auto& a : n.attribute()) {
        if (a.name() == name)
            return a.i();
    }
    return fallback;
}
inline float nodeFloat(const onnx::NodeProto& n, const std::string& name, float fallback)
{
    for (const auto& a : n.attribute()) {
        if (a.name() == name)
            return a.f();
    }
    return fallback;
}
inline bool nodeHas(const onnx::NodeProto& n, const std::string& name)
{
    for (const auto& a : n.attribute()) {
        if (a.name() == name)
            return true;
    }
    return false;
}

} // namespace ps::onnximport
