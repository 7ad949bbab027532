#include "onnx/safe_inference.h"

#include "graph/op_registry.h"
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
            std::vector<Shape> operandShapes;
            for (const auto& t : operands)
                operandShapes.push_back(t.shape);
            for (const auto& a : n.attribute()) {
                if (a.name() == "equation") {
                    try {
                        einsum.attrs["equation"] = explicitEinsumEquation(a.s(), operandShapes);
                    } catch (const std::exception&) {
                        einsum.attrs["equation"] = a.s(); // the shape rule names what is wrong
                    }
                }
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

    // The convolutions whose kernel size libonnx 1.12 reads from the weight's dims, with the
    // weight's input index. Its inference indexes the input's dims by the weight's rank (and
    // ConvTranspose reads the weight's dim 1) unchecked: a weight of another rank than the input,
    // or of rank below 3, crashes it (SIGSEGV, found by tests/fuzz).
    int convolutionWeightInput(const std::string& op)
    {
        if (op == "Conv" || op == "ConvTranspose" || op == "ConvInteger")
            return 1;
        return op == "QLinearConv" ? 3 : -1;
    }

    bool hasAttribute(const onnx::NodeProto& n, const std::string& name)
    {
        return std::any_of(n.attribute().begin(), n.attribute().end(),
            [&](const onnx::AttributeProto& a) { return a.name() == name; });
    }

    // A copy of `model` that libonnx 1.12 infers without crashing on a convolution: each one whose
    // weight has a static shape of rank 3 or more states its kernel_shape (the weight's spatial
    // dims, which the ONNX spec says it defaults to), so libonnx checks its size against the
    // input's rank and fails cleanly; the others (weight of lower or unknown rank) are left out,
    // their outputs untyped, and counted in `withheld`.
    onnx::ModelProto guardConvolutions(const onnx::ModelProto& model, int& withheld)
    {
        const auto known = staticShapes(model.graph());
        onnx::ModelProto work = model;
        auto* nodes = work.mutable_graph()->mutable_node();
        withheld = 0;
        for (int i = 0; i < nodes->size();) {
            auto& n = *nodes->Mutable(i);
            const int w = convolutionWeightInput(n.op_type());
            if (w < 0) {
                ++i;
                continue;
            }
            const auto it = w < n.input_size() ? known.find(n.input(w)) : known.end();
            if (it == known.end() || it->second.first.size() < 3) {
                nodes->DeleteSubrange(i, 1);
                ++withheld;
                continue;
            }
            if (!hasAttribute(n, "kernel_shape")) {
                auto* k = n.add_attribute();
                k->set_name("kernel_shape");
                k->set_type(onnx::AttributeProto::INTS);
                for (std::size_t d = 2; d < it->second.first.size(); ++d)
                    k->add_ints(it->second.first[d]);
            }
            ++i;
        }
        return work;
    }

    // libonnx's two passes (the second, with data propagation, only when every input got a type).
    void inferTwice(onnx::ModelProto& model)
    {
        const auto* registry = onnx::OpSchemaRegistry::Instance();
        onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, false));
        if (everyInputTyped(model))
            onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, true));
    }

    // inferTwice on guarded copies (guardConvolutions): a convolution withheld because its
    // weight's shape was not yet known joins the next pass once inference has found it.
    void inferGuarded(onnx::ModelProto& model)
    {
        int withheld = 0;
        for (int pass = 0; pass <= model.graph().node_size(); ++pass) {
            auto work = guardConvolutions(model, withheld);
            const int before = withheld;
            inferTwice(work);
            *model.mutable_graph()->mutable_value_info() = work.graph().value_info();
            *model.mutable_graph()->mutable_output() = work.graph().output();
            if (before == 0)
                return;
            (void)guardConvolutions(model, withheld);
            if (withheld == before)
                return;
        }
    }

} // namespace

// ONNX shape inference. libonnx 1.12's data propagation dereferences the type of each input it
// reads and crashes (SIGSEGV, in Python's onnx too) on an input without one: the output of an
// op it has no schema for, or of a node whose inference failed (found by tests/fuzz). So a
// first pass runs without propagation, and propagation only when every input got a type.
// Operators newer than libonnx's schemas that keep their input's shape (Gelu, opset 20) are
// inferred as an opset-17 operator of that kind (onnx/opset_lowering.h), in a copy. Convolutions
// are guarded against the weight shapes that crash libonnx (guardConvolutions). Einsum outputs
// whose dims it leaves unknown are completed by the IR's rule, and inference runs again.
void inferShapesSafely(onnx::ModelProto& model)
{
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
    inferGuarded(model);
    // Each pass completes the Einsums whose operands are now known (one after another in a chain).
    for (int pass = 0; pass < model.graph().node_size() && completeEinsumShapes(model) > 0; ++pass)
        inferGuarded(model);
}

} // namespace ps::onnximport
