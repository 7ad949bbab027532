#include "onnx/safe_inference.h"

#include "graph/shape_inference.h"
#include "onnx/opset_lowering.h"

#include <algorithm>
#include <map>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>
#include <set>
#include <string>

namespace ps::onnximport {
namespace {

    // Whether every node input of the top-level graph has a type (graph input, initializer, or
    // value_info/output filled by shape inference).
    bool everyInputTyped(const onnx::ModelProto& model)
    {
        const auto& g = model.graph();
        std::set<std::string> typed;
        for (const auto& init : g.initializer())
            typed.insert(init.name());
        for (const auto* list : { &g.input(), &g.value_info(), &g.output() }) {
            for (const auto& v : *list) {
                if (v.type().value_case() != onnx::TypeProto::VALUE_NOT_SET)
                    typed.insert(v.name());
            }
        }
        for (const auto& n : g.node()) {
            for (const auto& in : n.input()) {
                if (!in.empty() && !typed.contains(in))
                    return false;
            }
        }
        return true;
    }

    // Every value's static dims (and element type) where value_info, the graph's inputs and
    // outputs or an initializer give them all.
    std::map<std::string, std::pair<Shape, int>> staticShapes(const onnx::GraphProto& g)
    {
        std::map<std::string, std::pair<Shape, int>> out;
        const auto add = [&out](const onnx::ValueInfoProto& v) {
            if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape())
                return;
            Shape dims;
            for (const auto& d : v.type().tensor_type().shape().dim()) {
                if (!d.has_dim_value())
                    return;
                dims.push_back(d.dim_value());
            }
            out[v.name()] = { dims, v.type().tensor_type().elem_type() };
        };
        for (const auto* list : { &g.input(), &g.value_info(), &g.output() }) {
            for (const auto& v : *list)
                add(v);
        }
        for (const auto& t : g.initializer())
            out[t.name()] = { Shape(t.dims().begin(), t.dims().end()), t.data_type() };
        return out;
    }

    // Einsum outputs libonnx 1.12 leaves without dims (it infers their rank only, as for
    // "btd,edf->btef"): computed from the equation and the operands' static shapes by the IR's own
    // rule and written to value_info. Returns how many.
    int completeEinsumShapes(onnx::ModelProto& model)
    {
        const auto known = staticShapes(model.graph());
        int added = 0;
        for (const auto& n : model.graph().node()) {
            if (n.op_type() != "Einsum" || n.output_size() != 1 || n.input_size() < 1 || known.contains(n.output(0)))
                continue;
            std::vector<Tensor> operands;
            for (const auto& in : n.input()) {
                const auto it = known.find(in);
                if (it == known.end())
                    break;
                operands.push_back(
                    { TensorId(), in, it->second.first, DType::F32, TensorKind::Activation, NodeId(), nullptr });
            }
            if (operands.size() != static_cast<std::size_t>(n.input_size()))
                continue;
            Node einsum;
            einsum.op = OpType::Einsum;
            for (const auto& a : n.attribute()) {
                if (a.name() == "equation")
                    einsum.attrs["equation"] = a.s();
            }
            std::vector<const Tensor*> in;
            for (const auto& t : operands)
                in.push_back(&t);
            std::optional<std::vector<Shape>> shapes;
            try {
                shapes = inferOutputShapes(einsum, in);
            } catch (const std::exception&) { // an equation the IR does not read: left unknown
                continue;
            }
            if (!shapes || shapes->size() != 1)
                continue;
            onnx::ValueInfoProto* v = nullptr; // the rank-only entry inference left, or a new one
            for (auto& existing : *model.mutable_graph()->mutable_value_info()) {
                if (existing.name() == n.output(0))
                    v = &existing;
            }
            if (v == nullptr) {
                v = model.mutable_graph()->add_value_info();
                v->set_name(n.output(0));
            }
            v->clear_type();
            auto* type = v->mutable_type()->mutable_tensor_type();
            type->set_elem_type(known.at(n.input(0)).second);
            for (auto d : shapes->front())
                type->mutable_shape()->add_dim()->set_dim_value(d);
            ++added;
        }
        return added;
    }

} // namespace

// ONNX shape inference. libonnx 1.12's data propagation dereferences the type of each input it
// reads and crashes (SIGSEGV, in Python's onnx too) on an input without one: the output of an
// op it has no schema for, or of a node whose inference failed (found by tests/fuzz). So a
// first pass runs without propagation, and propagation only when every input got a type.
// Operators newer than libonnx's schemas that keep their input's shape (Gelu, opset 20) are
// inferred as an opset-17 operator of that kind (onnx/opset_lowering.h), in a copy. Einsum outputs
// whose dims it leaves unknown are completed by the IR's rule, and inference runs again.
void inferShapesSafely(onnx::ModelProto& model)
{
    const auto* registry = onnx::OpSchemaRegistry::Instance();
    const bool standIns = std::any_of(model.graph().node().begin(), model.graph().node().end(),
        [](const onnx::NodeProto& n) { return !onnximport::shapeStandIn(n.op_type()).empty(); });
    if (standIns) {
        auto work = model;
        for (auto& n : *work.mutable_graph()->mutable_node()) {
            if (const auto op = onnximport::shapeStandIn(n.op_type()); !op.empty()) {
                n.set_op_type(op);
                n.clear_attribute();
            }
        }
        inferShapesSafely(work);
        *model.mutable_graph()->mutable_value_info() = work.graph().value_info();
        *model.mutable_graph()->mutable_output() = work.graph().output();
        return;
    }
    const auto infer = [&] {
        onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, false));
        if (everyInputTyped(model))
            onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, true));
    };
    infer();
    // Each pass completes the Einsums whose operands are now known (one after another in a chain).
    for (int pass = 0; pass < model.graph().node_size() && completeEinsumShapes(model) > 0; ++pass)
        infer();
}

} // namespace ps::onnximport
