#include "onnx/window_lowering.h"

#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::onnximport {
namespace {

    const char* const kAxisName = "ps_window_axis_2"; // the int64 [2] Unsqueeze/Squeeze read

    onnx::AttributeProto* findAttr(onnx::NodeProto& node, const std::string& name)
    {
        for (auto& a : *node.mutable_attribute()) {
            if (a.name() == name)
                return &a;
        }
        return nullptr;
    }

    // A 1-D window attribute's 2-D form: ints prefixed by `lead` (kernel, strides, dilations), or
    // pads [b, e] as [0, b, 0, e]. False when the attribute is not of the 1-D length.
    bool widen(onnx::NodeProto& node, const std::string& name, std::int64_t lead)
    {
        auto* a = findAttr(node, name);
        if (a == nullptr)
            return true;
        std::vector<std::int64_t> v(a->ints().begin(), a->ints().end());
        if (name == "pads") {
            if (v.size() != 2)
                return false;
            v = { 0, v[0], 0, v[1] };
        } else if (name == "output_padding") {
            if (v.size() != 1)
                return false;
            v.insert(v.begin(), 0);
        } else {
            if (v.size() != 1)
                return false;
            v.insert(v.begin(), lead);
        }
        a->clear_ints();
        for (auto x : v)
            a->add_ints(x);
        return true;
    }

    struct WindowLowering
    {
        onnx::ModelProto& model;
        std::unordered_map<std::string, onnx::TensorProto*> initializers;
        std::unordered_map<std::string, int> readers; // value -> how many node inputs read it
        std::set<std::string> widened; // weights already (F, C / group, 1, k)

        explicit WindowLowering(onnx::ModelProto& m)
            : model(m)
        {
            for (auto& t : *m.mutable_graph()->mutable_initializer())
                initializers[t.name()] = &t;
            for (const auto& n : m.graph().node()) {
                for (const auto& in : n.input())
                    ++readers[in];
            }
            for (const auto& out : m.graph().output())
                ++readers[out.name()];
        }

        [[nodiscard]] const onnx::TensorProto* initializer(const std::string& name) const
        {
            const auto it = initializers.find(name);
            return it == initializers.end() ? nullptr : it->second;
        }

        // The node is a 1-D window: a one-element kernel_shape, or (Conv) a rank-3 weight initializer.
        bool oneDimensional(onnx::NodeProto& node)
        {
            if (const auto* k = findAttr(node, "kernel_shape"))
                return k->ints_size() == 1;
            if (!convolution(node))
                return false;
            const auto* w = initializer(node.input(1));
            return w != nullptr && (w->dims_size() == 3 || widened.contains(node.input(1)));
        }

        static bool convolution(const onnx::NodeProto& node)
        {
            return (node.op_type() == "Conv" || node.op_type() == "ConvTranspose") && node.input_size() >= 2;
        }

        bool lowerable(onnx::NodeProto& node)
        {
            const auto& op = node.op_type();
            const bool pool = op == "MaxPool" || op == "AveragePool";
            return (node.domain().empty() || node.domain() == "ai.onnx") && node.output_size() == 1
                && node.input_size() >= 1 && (pool || convolution(node)) && oneDimensional(node);
        }

        void addAxisConstant()
        {
            if (initializers.contains(kAxisName))
                return;
            auto* t = model.mutable_graph()->add_initializer();
            t->set_name(kAxisName);
            t->set_data_type(onnx::TensorProto::INT64);
            t->add_dims(1);
            t->add_int64_data(2);
            initializers[kAxisName] = t;
        }

        static onnx::NodeProto reshape(
            const std::string& op, const std::string& name, const std::string& in, const std::string& out)
        {
            onnx::NodeProto n;
            n.set_op_type(op);
            n.set_name(name);
            n.add_input(in);
            n.add_input(kAxisName);
            n.add_output(out);
            return n;
        }

        // (F, C / group, k) -> (F, C / group, 1, k), in the initializer and where an older IR lists
        // it among the graph's inputs.
        void widenWeight(const std::string& name)
        {
            auto* w = initializers.at(name);
            const auto k = w->dims(2);
            w->mutable_dims()->RemoveLast();
            w->add_dims(1);
            w->add_dims(k);
            for (auto& in : *model.mutable_graph()->mutable_input()) {
                if (in.name() != name || !in.type().tensor_type().has_shape())
                    continue;
                auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
                if (shape->dim_size() != 3)
                    continue;
                const auto last = shape->dim(2);
                shape->mutable_dim(2)->Clear();
                shape->mutable_dim(2)->set_dim_value(1);
                *shape->add_dim() = last;
            }
        }

        // The node's 2-D form between an Unsqueeze and a Squeeze, appended to `out`. The weight is
        // widened in place where this convolution is its only reader (the bytes stay as they are);
        // a shared or computed weight (weight_norm) goes through an Unsqueeze of its own.
        void lower(const onnx::NodeProto& original, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out)
        {
            onnx::NodeProto node = original;
            if (!widen(node, "kernel_shape", 1) || !widen(node, "strides", 1) || !widen(node, "dilations", 1)
                || !widen(node, "pads", 0) || !widen(node, "output_padding", 0) || !widen(node, "output_shape", 1)) {
                *out.Add() = original; // a malformed attribute: shape inference names it
                return;
            }
            const std::string name = node.name().empty() ? node.output(0) : node.name();
            const std::string y = node.output(0); // value names after the output, which is unique
            addAxisConstant();
            if (convolution(node)) {
                const auto& w = node.input(1);
                const auto* t = initializer(w);
                if (widened.contains(w)) {
                    // already (F, C / group, 1, k)
                } else if (t != nullptr && t->dims_size() == 3 && readers[w] == 1) {
                    widenWeight(w);
                    widened.insert(w);
                } else {
                    *out.Add() = reshape("Unsqueeze", name + "/weight2d", w, y + "/weight2d");
                    node.set_input(1, y + "/weight2d");
                }
            }
            *out.Add() = reshape("Unsqueeze", name + "/as2d", node.input(0), y + "/as2d_in");
            node.set_input(0, y + "/as2d_in");
            node.set_output(0, y + "/as2d_out");
            *out.Add() = std::move(node);
            *out.Add() = reshape("Squeeze", name + "/as1d", y + "/as2d_out", y);
        }
    };

} // namespace

int lowerOneDimensionalWindows(onnx::ModelProto& model)
{
    WindowLowering lowering(model);
    bool any = false;
    for (auto& node : *model.mutable_graph()->mutable_node())
        any = any || lowering.lowerable(node);
    if (!any)
        return 0;
    google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
    int lowered = 0;
    for (auto& node : *model.mutable_graph()->mutable_node()) {
        if (lowering.lowerable(node)) {
            lowering.lower(node, nodes);
            ++lowered;
        } else {
            *nodes.Add() = std::move(node);
        }
    }
    model.mutable_graph()->mutable_node()->Swap(&nodes);
    return lowered;
}

} // namespace ps::onnximport
