#include "onnx/norm_lowering.h"

#include "onnx/opset_lowering.h"

#include <cstring>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {
namespace {

    float floatAttr(const onnx::NodeProto& n, const std::string& name, float fallback)
    {
        for (const auto& a : n.attribute()) {
            if (a.name() == name)
                return a.f();
        }
        return fallback;
    }

    std::int64_t intAttr(const onnx::NodeProto& n, const std::string& name, std::int64_t fallback)
    {
        for (const auto& a : n.attribute()) {
            if (a.name() == name)
                return a.i();
        }
        return fallback;
    }

    // True when every element of the float tensor equals `value` (false without its data).
    bool allEqual(const onnx::TensorProto& t, float value)
    {
        if (t.data_type() != onnx::TensorProto::FLOAT)
            return false;
        std::vector<float> v(t.float_data().begin(), t.float_data().end());
        if (v.empty() && !t.raw_data().empty()) {
            v.resize(t.raw_data().size() / sizeof(float));
            std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
        }
        if (v.empty())
            return false;
        for (float x : v) {
            if (x != value)
                return false;
        }
        return true;
    }

    class Decomposer
    {
    public:
        Decomposer(onnx::ModelProto& model, int opset, const std::optional<std::set<std::string>>& parameters)
            : m_model(model)
            , m_opset(opset)
            , m_parameters(parameters)
        {
            for (const auto& t : model.graph().initializer())
                m_initializers[t.name()] = &t;
            for (const auto& n : model.graph().node()) {
                if (n.op_type() == "Constant" && n.output_size() == 1) {
                    for (const auto& a : n.attribute()) {
                        if (a.name() == "value" && a.has_t())
                            m_constants[n.output(0)] = &a.t();
                    }
                }
            }
        }

        [[nodiscard]] bool handles(const onnx::NodeProto& n) const
        {
            if (!(n.domain().empty() || n.domain() == "ai.onnx") || n.output_size() != 1 || n.input_size() < 1)
                return false;
            const auto& op = n.op_type();
            if (op == "RMSNormalization")
                return intAttr(n, "axis", -1) < 0 && n.input_size() >= 2;
            return (op == "InstanceNormalization" && n.input_size() == 3)
                || (op == "GroupNormalization" && n.input_size() == 3);
        }

        void decompose(const onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
        {
            m_out = &out;
            m_prefix = (n.name().empty() ? n.output(0) : n.name()) + "/";
            if (n.op_type() == "RMSNormalization")
                rms(n);
            else
                standardize(n);
        }

    private:
        // The exporter's identity scale (ones) or bias (zeros): a Constant, or an initializer that
        // torch.export's signature does not list as a parameter.
        [[nodiscard]] bool exporterIdentity(const std::string& name, float value) const
        {
            if (const auto c = m_constants.find(name); c != m_constants.end())
                return allEqual(*c->second, value);
            const auto i = m_initializers.find(name);
            return i != m_initializers.end() && m_parameters && !m_parameters->contains(name)
                && allEqual(*i->second, value);
        }

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

        std::string node(const std::string& op, const std::string& name, std::vector<std::string> inputs)
        {
            auto* n = m_out->Add();
            n->set_op_type(op);
            n->set_name(m_prefix + name);
            for (auto& i : inputs)
                n->add_input(std::move(i));
            n->add_output(m_prefix + name);
            return n->output(0);
        }

        onnx::NodeProto& last()
        {
            return *m_out->Mutable(m_out->size() - 1);
        }

        static void setInt(onnx::NodeProto& n, const std::string& name, std::int64_t value)
        {
            auto* a = n.add_attribute();
            a->set_name(name);
            a->set_type(onnx::AttributeProto::INT);
            a->set_i(value);
        }

        // ReduceMean keeping dims over `axes`, in the model's opset form (an axes input from 18).
        std::string mean(const std::string& name, const std::string& x, const std::vector<std::int64_t>& axes)
        {
            if (m_opset >= 18)
                return node("ReduceMean", name, { x, constant(name + "_axes", axes) });
            const auto out = node("ReduceMean", name, { x });
            auto* a = last().add_attribute();
            a->set_name("axes");
            a->set_type(onnx::AttributeProto::INTS);
            for (auto v : axes)
                a->add_ints(v);
            return out;
        }

        // (x - mean) / sqrt(var + eps) over `axes`.
        std::string normalized(const std::string& x, const std::vector<std::int64_t>& axes, float epsilon)
        {
            const auto d = node("Sub", "centered", { x, mean("mean", x, axes) });
            const auto var = mean("variance", node("Mul", "squared", { d, d }), axes);
            const auto std = node("Sqrt", "std", { node("Add", "variance_eps", { var, scalar("epsilon", epsilon) }) });
            return node("Div", "normalized", { d, std });
        }

        // Instance and group normalization over (N, C or groups, -1), then the affine per channel.
        void standardize(const onnx::NodeProto& n)
        {
            const bool group = n.op_type() == "GroupNormalization";
            const auto groups = group ? intAttr(n, "num_groups", 1) : 0;
            const bool perGroup = group && versionAfter17("GroupNormalization", m_opset) < 21;
            const auto& x = n.input(0);
            const auto shape = node("Shape", "shape", { x });
            auto y =
                normalized(node("Reshape", "grouped", { x, constant("grouped_shape", { 0, group ? groups : 0, -1 }) }),
                    { 2 }, floatAttr(n, "epsilon", 1e-5F));
            const auto& scale = n.input(1);
            const auto& bias = n.input(2);
            const bool scaled = !exporterIdentity(scale, 1.0F);
            const bool shifted = !exporterIdentity(bias, 0.0F);
            if (group && !perGroup && (scaled || shifted)) { // (N, G, S) -> (N, C, S): the affine per channel
                const auto channels = node("Concat", "channels_shape",
                    { constant("batch_dim", { 0 }), node("Shape", "scale_shape", { scale }),
                        constant("rest_dim", { -1 }) });
                setInt(last(), "axis", 0);
                y = node("Reshape", "channels", { y, channels });
            }
            if (scaled)
                y = node("Mul", "scaled", { y, node("Unsqueeze", "scale", { scale, constant("scale_axes", { 1 }) }) });
            if (shifted)
                y = node("Add", "shifted", { y, node("Unsqueeze", "bias", { bias, constant("bias_axes", { 1 }) }) });
            auto* back = m_out->Add();
            back->set_op_type("Reshape");
            back->set_name(m_prefix + "restored");
            back->add_input(y);
            back->add_input(shape);
            back->add_output(n.output(0));
        }

        void rms(const onnx::NodeProto& n)
        {
            const auto& x = n.input(0);
            std::vector<std::int64_t> axes;
            for (auto a = intAttr(n, "axis", -1); a < 0; ++a)
                axes.push_back(a);
            const auto ms = mean("mean_square", node("Mul", "squared", { x, x }), axes);
            const auto eps = scalar("epsilon", floatAttr(n, "epsilon", 1e-5F));
            const auto inv = node(
                "Reciprocal", "inverse_rms", { node("Sqrt", "rms", { node("Add", "mean_square_eps", { ms, eps }) }) });
            const auto normalized = node("Mul", "normalized", { x, inv });
            auto* out = m_out->Add();
            out->set_op_type("Mul");
            out->set_name(m_prefix + "scaled");
            out->add_input(normalized);
            out->add_input(n.input(1));
            out->add_output(n.output(0));
        }

        onnx::ModelProto& m_model;
        int m_opset = 17;
        const std::optional<std::set<std::string>>& m_parameters;
        std::unordered_map<std::string, const onnx::TensorProto*> m_initializers;
        std::unordered_map<std::string, const onnx::TensorProto*> m_constants;
        google::protobuf::RepeatedPtrField<onnx::NodeProto>* m_out = nullptr;
        std::string m_prefix;
    };

} // namespace

int decomposeNormalizations(onnx::ModelProto& model, int opset, const std::optional<std::set<std::string>>& parameters)
{
    Decomposer decomposer(model, opset, parameters);
    bool any = false;
    for (const auto& n : model.graph().node())
        any = any || decomposer.handles(n);
    if (!any)
        return 0;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    int replaced = 0;
    for (const auto& n : model.graph().node()) {
        if (decomposer.handles(n)) {
            decomposer.decompose(n, nodes);
            ++replaced;
        } else {
            *nodes.Add() = n;
        }
    }
    model.mutable_graph()->mutable_node()->Swap(&nodes);
    return replaced;
}

} // namespace ps::onnximport
