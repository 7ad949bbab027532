#include "onnx/composite_lowering.h"

#include "onnx/opset_lowering.h"

#include <cstring>
#include <limits>
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

    bool hasAttr(const onnx::NodeProto& n, const std::string& name)
    {
        for (const auto& a : n.attribute()) {
            if (a.name() == name)
                return true;
        }
        return false;
    }

    std::int64_t intAttr(const onnx::NodeProto& n, const std::string& name, std::int64_t fallback)
    {
        for (const auto& a : n.attribute()) {
            if (a.name() == name)
                return a.i();
        }
        return fallback;
    }

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
            for (const auto* list : { &model.graph().value_info(), &model.graph().input(), &model.graph().output() }) {
                for (const auto& v : *list)
                    m_types[v.name()] = &v.type();
            }
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
            for (int i = 1; i < n.output_size(); ++i) { // present key/value, qk output: not read
                if (!n.output(i).empty())
                    return false;
            }
            const auto& op = n.op_type();
            if (op == "Attention")
                return attentionForm(n);
            if (op == "RMSNormalization")
                return intAttr(n, "axis", -1) < 0 && n.input_size() >= 2;
            return (op == "InstanceNormalization" && n.input_size() == 3)
                || (op == "GroupNormalization" && n.input_size() == 3);
        }

        void decompose(const onnx::NodeProto& n, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
        {
            m_out = &out;
            m_prefix = n.output(0) + "/"; // values, initializers and nodes after the output: unique
            if (n.op_type() == "Attention")
                attention(n);
            else if (n.op_type() == "RMSNormalization")
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
            auto* back = m_out->Add();
            back->set_op_type("Reshape");
            back->set_name(m_prefix + "restored");
            back->add_input(y);
            back->add_input(shape);
            back->add_output(n.output(0));
        }

        // Element type and (static) dims of a value, where value_info or an initializer says.
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
            }
            return out;
        }

        [[nodiscard]] bool attentionForm(const onnx::NodeProto& n) const
        {
            if (n.input_size() < 3 || intAttr(n, "q_num_heads", 0) != 0 || intAttr(n, "kv_num_heads", 0) != 0
                || floatAttr(n, "softcap", 0.0F) != 0.0F)
                return false; // 3-D inputs with head counts, or a softcap: left to be refused
            for (int i = 0; i < 3; ++i) { // (B, heads, S, D), as value_info says (torch writes it)
                if (dims(n.input(i)).size() != 4)
                    return false;
            }
            for (int i = 4; i < n.input_size(); ++i) { // past key/value, nonpad lengths
                if (!n.input(i).empty())
                    return false;
            }
            if (n.input_size() > 3 && !n.input(3).empty()) {
                const auto t = elemType(n.input(3));
                if (t != onnx::TensorProto::BOOL && t != onnx::TensorProto::FLOAT)
                    return false; // a mask of unknown type
            }
            return true;
        }

        std::string floatScalar(const std::string& name, float value)
        {
            return scalar(name, value);
        }

        std::string shapeSlice(const std::string& name, const std::string& x, std::int64_t start, std::int64_t end)
        {
            const auto out = node("Shape", name, { x });
            setInt(last(), "start", start);
            setInt(last(), "end", end);
            return out;
        }

        // K or V (B, Hkv, L, D) repeated to Q's heads (B, Hq, L, D): each kv head serves Hq / Hkv
        // query heads in turn (repeat_interleave, as grouped-query attention does).
        std::string repeatHeads(const std::string& name, const std::string& kv, const std::string& q)
        {
            const auto groups = node("Div", name + "_groups",
                { shapeSlice(name + "_q_heads", q, 1, 2), shapeSlice(name + "_kv_heads", kv, 1, 2) });
            const auto wide = node("Unsqueeze", name + "_5d", { kv, constant(name + "_axis", { 2 }) });
            const auto to = node("Concat", name + "_expanded_shape",
                { shapeSlice(name + "_lead", kv, 0, 2), groups, shapeSlice(name + "_tail", kv, 2, 4) });
            setInt(last(), "axis", 0);
            const auto expanded = node("Expand", name + "_expanded", { wide, to });
            const auto shape = node("Concat", name + "_shape",
                { shapeSlice(name + "_q_lead", q, 0, 2), shapeSlice(name + "_kv_tail", kv, 2, 4) });
            setInt(last(), "axis", 0);
            return node("Reshape", name + "_repeated", { expanded, shape });
        }

        void attention(const onnx::NodeProto& n)
        {
            const auto& q = n.input(0);
            auto k = n.input(1);
            auto v = n.input(2);
            const auto qd = dims(q);
            const auto kd = dims(k);
            const bool sameHeads = qd.size() == 4 && kd.size() == 4 && qd[1] > 0 && qd[1] == kd[1];
            if (!sameHeads) { // fewer (or unknown) kv heads: repeat them over the query groups
                k = repeatHeads("key", k, q);
                v = repeatHeads("value", v, q);
            }
            std::string scale;
            if (hasAttr(n, "scale")) {
                scale = floatScalar("scale", floatAttr(n, "scale", 1.0F));
            } else { // 1 / sqrt(D), folded at import from the static shape
                const auto d = node("Cast", "head_dim", { shapeSlice("head_dim_shape", q, -1, 4) });
                setInt(last(), "to", onnx::TensorProto::FLOAT);
                scale = node("Reciprocal", "scale", { node("Sqrt", "sqrt_head_dim", { d }) });
            }
            const auto kt = node("Transpose", "key_t", { k });
            auto* perm = last().add_attribute();
            perm->set_name("perm");
            perm->set_type(onnx::AttributeProto::INTS);
            for (std::int64_t p : { 0, 1, 3, 2 })
                perm->add_ints(p);
            auto scores = node("Mul", "scores", { node("MatMul", "qk", { q, kt }), scale });
            const auto minusInf = floatScalar("minus_inf", -std::numeric_limits<float>::infinity());
            if (n.input_size() > 3 && !n.input(3).empty()) {
                const auto& mask = n.input(3);
                scores = elemType(mask) == onnx::TensorProto::BOOL ? node("Where", "masked", { mask, scores, minusInf })
                                                                   : node("Add", "masked", { scores, mask });
            }
            if (intAttr(n, "is_causal", 0) != 0) { // the lower triangle of (S, L), top-left aligned
                const auto ones = node("ConstantOfShape", "ones", { shapeSlice("scores_shape", scores, -2, 4) });
                auto* value = last().add_attribute();
                value->set_name("value");
                value->set_type(onnx::AttributeProto::TENSOR);
                value->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
                value->mutable_t()->add_dims(1);
                value->mutable_t()->add_float_data(1.0F);
                const auto triangle = node("Trilu", "lower", { ones });
                setInt(last(), "upper", 0);
                const auto lower = node("Cast", "causal", { triangle });
                setInt(last(), "to", onnx::TensorProto::BOOL);
                scores = node("Where", "causal_scores", { lower, scores, minusInf });
            }
            const auto probs = node("Softmax", "probs", { scores });
            setInt(last(), "axis", -1);
            auto* out = m_out->Add();
            out->set_op_type("MatMul");
            out->set_name(m_prefix + "context");
            out->add_input(probs);
            out->add_input(v);
            out->add_output(n.output(0));
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
        std::unordered_map<std::string, const onnx::NodeProto*> m_producers;
        std::unordered_map<std::string, const onnx::TypeProto*> m_types; // value_info, inputs, outputs
        std::unordered_map<std::string, std::vector<const onnx::NodeProto*>> m_readers;
        google::protobuf::RepeatedPtrField<onnx::NodeProto>* m_out = nullptr;
        std::string m_prefix;
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
