#include "onnx/safe_inference.h"

#include "onnx/opset_lowering.h"

#include <algorithm>
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

} // namespace

// ONNX shape inference. libonnx 1.12's data propagation dereferences the type of each input it
// reads and crashes (SIGSEGV, in Python's onnx too) on an input without one: the output of an
// op it has no schema for, or of a node whose inference failed (found by tests/fuzz). So a
// first pass runs without propagation, and propagation only when every input got a type.
// Operators newer than libonnx's schemas that keep their input's shape (Gelu, opset 20) are
// inferred as an opset-17 operator of that kind (onnx/opset_lowering.h), in a copy.
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
    onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, false));
    if (everyInputTyped(model))
        onnx::shape_inference::InferShapes(model, registry, onnx::ShapeInferenceOptions(false, 0, true));
}

} // namespace ps::onnximport
