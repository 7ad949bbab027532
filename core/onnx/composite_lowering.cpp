#include "onnx/composite_lowering.h"

#include "onnx/attention_lowering.h"
#include "onnx/opset_lowering.h"

#include <cstring>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {
namespace {

    bool hasValues(const onnx::TensorProto& t)
    {
        return t.float_data_size() > 0 || !t.raw_data().empty();
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

    class Decomposer : public GraphWriter
    {
    public:
        Decomposer(onnx::ModelProto& model, int opset, const std::optional<std::set<std::string>>& parameters)
            : GraphWriter(model)
            , m_opset(opset)
            , m_parameters(parameters)
            , m_attention(model)
        {
            for (const auto& n : model.graph().node()) {
                for (const auto& o : n.output())
                    m_producers[o] = &n;
                for (const auto& in : n.input())
                    m_readers[in].push_back(&n);
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
            if (!(n.domain().empty() || n.domain() == "ai.onnx") || n.input_size() < 1 || n.output_size() < 1)
                return false;
            if (m_attention.handles(n))
                return true;
            for (int i = 1; i < n.output_size(); ++i) { // the normalizations' mean and inverse deviation
                if (!n.output(i).empty())
                    return false;
            }
            const auto& op = n.op_type();
            if (op == "RMSNormalization")
                return nodeInt(n, "axis", -1) < 0 && n.input_size() >= 2;
            return (op == "InstanceNormalization" && n.input_size() == 3)
                || (op == "GroupNormalization" && n.input_size() == 3);
        }

        void decompose(const onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
        {
            if (m_attention.handles(n)) {
                m_attention.decompose(n, out);
                return;
            }
            begin(n, out);
            if (n.op_type() == "RMSNormalization")
                rms(n);
            else
                standardize(n);
        }

    private:
        // Whether `name`, a normalization's scale (`value` 1) or bias (0), is the exporter's identity
        // rather than the model's: inside torch's GroupNorm pattern (`inGroupNorm`) an initializer
        // or Constant that is all `value`, or whose bytes were not read (an import without weights);
        // elsewhere a Constant that is all `value`, or an initializer torch.export's signature does
        // not list as a parameter that is all `value` (or unread). Model parameters never match.
        [[nodiscard]] bool exporterIdentity(const std::string& name, float value, bool inGroupNorm) const
        {
            if (const auto c = m_constants.find(name); c != m_constants.end())
                return allEqual(*c->second, value);
            const auto i = m_initializers.find(name);
            if (i == m_initializers.end())
                return false;
            const bool notAParameter = m_parameters && !m_parameters->contains(name);
            if (!inGroupNorm && !notAParameter)
                return false;
            return !hasValues(*i->second) || allEqual(*i->second, value);
        }

        // torch's GroupNorm export: Reshape(x, (0, G, -1)) -> InstanceNormalization -> Reshape back,
        // the InstanceNormalization fed ones and zeros (the module's own affine follows).
        [[nodiscard]] bool groupNormPattern(const onnx::NodeProto& n) const
        {
            const auto producer = m_producers.find(n.input(0));
            const auto reader = m_readers.find(n.output(0));
            return n.op_type() == "InstanceNormalization" && producer != m_producers.end()
                && producer->second->op_type() == "Reshape" && reader != m_readers.end() && reader->second.size() == 1
                && reader->second.front()->op_type() == "Reshape";
        }

        // ReduceMean keeping dims over `axes`, in the model's opset form (an axes input from 18).
        std::string mean(const std::string& name, const std::string& x, const std::vector<std::int64_t>& axes)
        {
            if (m_opset >= 18)
                return node("ReduceMean", name, { x, constant(name + "_axes", axes) });
            const auto out = node("ReduceMean", name, { x });
            setInts(last(), "axes", axes);
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
            const auto groups = group ? nodeInt(n, "num_groups", 1) : 0;
            const bool perGroup = group && versionAfter17("GroupNormalization", m_opset) < 21;
            const auto& x = n.input(0);
            const auto shape = node("Shape", "shape", { x });
            auto y =
                normalized(node("Reshape", "grouped", { x, constant("grouped_shape", { 0, group ? groups : 0, -1 }) }),
                    { 2 }, nodeFloat(n, "epsilon", 1e-5F));
            const auto& scale = n.input(1);
            const auto& bias = n.input(2);
            const bool pattern = groupNormPattern(n);
            const bool scaled = group || !exporterIdentity(scale, 1.0F, pattern);
            const bool shifted = group || !exporterIdentity(bias, 0.0F, pattern);
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
            nodeTo("Reshape", "restored", { y, shape }, n.output(0));
        }

        void rms(const onnx::NodeProto& n)
        {
            const auto& x = n.input(0);
            std::vector<std::int64_t> axes;
            for (auto a = nodeInt(n, "axis", -1); a < 0; ++a)
                axes.push_back(a);
            const auto ms = mean("mean_square", node("Mul", "squared", { x, x }), axes);
            const auto eps = scalar("epsilon", nodeFloat(n, "epsilon", 1e-5F));
            const auto inv = node(
                "Reciprocal", "inverse_rms", { node("Sqrt", "rms", { node("Add", "mean_square_eps", { ms, eps }) }) });
            const auto normalized = node("Mul", "normalized", { x, inv });
            nodeTo("Mul", "scaled", { normalized, n.input(1) }, n.output(0));
        }

        int m_opset = 17;
        const std::optional<std::set<std::string>>& m_parameters;
        std::unordered_map<std::string, const onnx::TensorProto*> m_constants;
        std::unordered_map<std::string, const onnx::NodeProto*> m_producers;
        std::unordered_map<std::string, std::vector<const onnx::NodeProto*>> m_readers;
        AttentionLowering m_attention;
    };

} // namespace

int decomposeCompositeOps(onnx::ModelProto& model, int opset, const std::optional<std::set<std::string>>& parameters)
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
