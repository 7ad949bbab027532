#include "graph/graph_builder.h"

#include "graph/shape_inference.h"
#include "graph/validate.h"
#include "util/error.h"

#include <cstring>
#include <utility>

namespace ps {

GraphBuilder::GraphBuilder(ModelInfo info, DType activationType)
    : m_graph(std::move(info))
    , m_activationType(activationType)
{
}

TensorId GraphBuilder::input(const std::string& name, Shape shape, DType dtype)
{
    return m_graph.addTensor({ TensorId(), qualified(name), std::move(shape), dtype, TensorKind::Input, NodeId(), {} });
}

TensorId GraphBuilder::constant(const std::string& name, Shape shape, DType dtype)
{
    return m_graph.addTensor(
        { TensorId(), qualified(name), std::move(shape), dtype, TensorKind::Constant, NodeId(), {} });
}

template <typename T>
TensorId GraphBuilder::valuedConstant(const std::string& name, Shape shape, const std::vector<T>& values, DType dtype)
{
    if (numElements(shape) != static_cast<std::int64_t>(values.size()))
        throw Error("constant '" + qualified(name) + "' of shape " + formatShape(shape) + " given "
            + std::to_string(values.size()) + " values");
    auto bytes = std::make_shared<std::vector<std::byte>>(values.size() * sizeof(T));
    std::memcpy(bytes->data(), values.data(), bytes->size());
    return m_graph.addTensor(
        { TensorId(), qualified(name), std::move(shape), dtype, TensorKind::Constant, NodeId(), std::move(bytes) });
}

TensorId GraphBuilder::constant(const std::string& name, Shape shape, const std::vector<std::int64_t>& values)
{
    return valuedConstant(name, std::move(shape), values, DType::I64);
}

TensorId GraphBuilder::constant(const std::string& name, Shape shape, const std::vector<float>& values)
{
    return valuedConstant(name, std::move(shape), values, DType::F32);
}

TensorId GraphBuilder::parameter(const std::string& name, Shape shape)
{
    return m_graph.addTensor(
        { TensorId(), qualified(name), std::move(shape), m_activationType, TensorKind::Parameter, NodeId(), {} });
}

TensorId GraphBuilder::op(OpType op, const std::string& name, std::vector<TensorId> inputs, Attributes attrs)
{
    auto outs = opMulti(op, name, std::move(inputs), std::move(attrs));
    if (outs.size() != 1)
        throw Error("node '" + qualified(name) + "' has " + std::to_string(outs.size()) + " outputs, expected one");
    return outs.front();
}

std::vector<TensorId> GraphBuilder::opMulti(
    OpType op, const std::string& name, std::vector<TensorId> inputs, Attributes attrs)
{
    Node node;
    node.name = qualified(name);
    node.op = op;
    node.attrs = std::move(attrs);
    node.inputs = std::move(inputs);
    node.layer = m_layer;
    for (std::size_t i = 0; i < m_scope.size(); ++i)
        node.scope += (i ? "." : "") + m_scope[i];

    std::vector<const Tensor*> in;
    for (auto id : node.inputs)
        in.push_back(&m_graph.tensor(id));
    std::optional<std::vector<Shape>> shapes;
    try {
        shapes = inferOutputShapes(node, in);
    } catch (const Error& e) {
        throw Error("node '" + node.name + "': " + e.what());
    }
    if (!shapes)
        throw Error("node '" + node.name + "': the builder needs ops with known output shapes");
    // Losses are reported in fp32 whatever the activation type.
    const auto dtype = op == OpType::CrossEntropy ? DType::F32 : m_activationType;
    for (std::size_t i = 0; i < shapes->size(); ++i) {
        const auto suffix = shapes->size() == 1 ? std::string() : ":" + std::to_string(i);
        node.outputs.push_back(m_graph.addTensor(
            { TensorId(), node.name + suffix, (*shapes)[i], dtype, TensorKind::Activation, NodeId(), {} }));
    }
    auto outputs = node.outputs;
    m_graph.addNode(std::move(node));
    return outputs;
}

void GraphBuilder::pushScope(const std::string& part)
{
    m_scope.push_back(part);
}

void GraphBuilder::popScope()
{
    if (!m_scope.empty())
        m_scope.pop_back();
}

std::string GraphBuilder::qualified(const std::string& name) const
{
    std::string out;
    for (const auto& s : m_scope)
        out += s + ".";
    return out + name;
}

Graph GraphBuilder::finish(std::vector<TensorId> outputs)
{
    m_graph.setOutputs(std::move(outputs));
    validateGraphOrThrow(m_graph);
    return std::exchange(m_graph, Graph());
}

} // namespace ps
