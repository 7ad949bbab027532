#include "graph/loss.h"

#include "graph/shape_inference.h"
#include "util/error.h"

namespace ps {
namespace {

    bool isFloating(DType t)
    {
        return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
    }

    // Appends `node` reading `inputs` with one output named `output`, its shape from the registry.
    TensorId append(
        Graph& g, OpType op, const std::string& name, std::vector<TensorId> inputs, Attributes attrs, DType dtype)
    {
        Node n;
        n.name = name;
        n.op = op;
        n.attrs = std::move(attrs);
        n.inputs = std::move(inputs);
        n.scope = "loss";
        std::vector<const Tensor*> in;
        for (auto t : n.inputs)
            in.push_back(&g.tensor(t));
        const auto shapes = inferOutputShapes(n, in);
        const auto out =
            g.addTensor({ TensorId(), name, shapes->front(), dtype, TensorKind::Activation, NodeId(), nullptr });
        n.outputs = { out };
        g.addNode(std::move(n));
        return out;
    }

} // namespace

std::optional<LossKind> parseLossKind(std::string_view name)
{
    if (name == "cross-entropy")
        return LossKind::CrossEntropy;
    if (name == "mse")
        return LossKind::MeanSquaredError;
    return std::nullopt;
}

Graph attachLoss(Graph graph, const LossSpec& spec)
{
    const auto& model = graph.info().name;
    if (graph.outputs().empty())
        throw Error("model '" + model + "' has no output to attach a loss to");
    const auto prediction = graph.outputs().front();
    const Tensor out = graph.tensor(prediction); // a copy: adding tensors below moves the graph's
    if (out.shape.empty())
        throw Error("model '" + model + "' already ends in a scalar ('" + out.name + "'): it has a loss");
    for (const auto& n : graph.nodes()) {
        if (n.op == OpType::CrossEntropy)
            throw Error("model '" + model + "' already has a loss node ('" + n.name + "')");
    }
    if (!isFloating(out.dtype))
        throw Error("model '" + model + "' output '" + out.name + "' is " + std::string(toString(out.dtype))
            + ", not a floating tensor a loss can train");
    const bool crossEntropy = spec.kind == LossKind::CrossEntropy;
    if (crossEntropy && out.shape.size() < 2)
        throw Error("model '" + model + "' output '" + out.name + "' " + formatShape(out.shape)
            + " has no class dimension for cross-entropy (it needs (..., classes))");
    Shape labelsShape = out.shape;
    if (crossEntropy)
        labelsShape.pop_back();
    if (spec.labelsShape && *spec.labelsShape != labelsShape)
        throw Error("labels shape " + formatShape(*spec.labelsShape) + " does not fit model '" + model + "' output '"
            + out.name + "' " + formatShape(out.shape) + ": " + (crossEntropy ? "cross-entropy" : "mse")
            + " needs labels " + formatShape(labelsShape));
    std::string labelsName = "labels";
    for (const auto& t : graph.tensors()) {
        if (t.name == labelsName)
            labelsName = "loss.labels";
    }
    const auto labels = graph.addTensor({ TensorId(), labelsName, labelsShape, crossEntropy ? DType::I64 : out.dtype,
        TensorKind::Input, NodeId(), nullptr });
    TensorId loss;
    if (crossEntropy) {
        loss = append(graph, OpType::CrossEntropy, "loss.cross_entropy", { prediction, labels }, {}, out.dtype);
    } else {
        const auto diff = append(graph, OpType::Sub, "loss.diff", { prediction, labels }, {}, out.dtype);
        const auto square = append(graph, OpType::Pow, "loss.square", { diff }, { { "exponent", 2.0 } }, out.dtype);
        loss = append(graph, OpType::ReduceMean, "loss.mse", { square },
            { { "axes", std::vector<std::int64_t> {} }, { "keepdims", std::int64_t { 0 } } }, out.dtype);
    }
    graph.setOutputs({ loss });
    return graph;
}

} // namespace ps
