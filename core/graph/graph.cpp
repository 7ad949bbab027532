#include "graph/graph.h"

#include "util/error.h"

#include <atomic>
#include <utility>

namespace ps {

Graph::Revision Graph::Revision::next()
{
    static std::atomic<std::uint64_t> counter { 0 };
    return Revision(++counter);
}

std::int64_t Node::intAttr(std::string_view key, std::int64_t fallback) const
{
    const auto it = attrs.find(key);
    if (it == attrs.end())
        return fallback;
    if (const auto* v = std::get_if<std::int64_t>(&it->second))
        return *v;
    throw Error("node '" + name + "': attribute '" + std::string(key) + "' is not an integer");
}

double Node::floatAttr(std::string_view key, double fallback) const
{
    const auto it = attrs.find(key);
    if (it == attrs.end())
        return fallback;
    if (const auto* v = std::get_if<double>(&it->second))
        return *v;
    if (const auto* i = std::get_if<std::int64_t>(&it->second))
        return static_cast<double>(*i);
    throw Error("node '" + name + "': attribute '" + std::string(key) + "' is not a number");
}

std::vector<std::int64_t> Node::intsAttr(std::string_view key) const
{
    const auto it = attrs.find(key);
    if (it == attrs.end())
        return {};
    if (const auto* v = std::get_if<std::vector<std::int64_t>>(&it->second))
        return *v;
    throw Error("node '" + name + "': attribute '" + std::string(key) + "' is not an integer list");
}

Graph::Graph(ModelInfo info)
    : m_info(std::move(info))
{
}

TensorId Graph::addTensor(Tensor tensor)
{
    m_revision = Revision::next();
    tensor.id = TensorId(static_cast<std::uint32_t>(m_tensors.size()));
    m_tensors.push_back(std::move(tensor));
    return m_tensors.back().id;
}

NodeId Graph::addNode(Node node)
{
    m_revision = Revision::next();
    node.id = NodeId(static_cast<std::uint32_t>(m_nodes.size()));
    for (auto out : node.outputs) {
        if (out.index() < m_tensors.size())
            m_tensors[out.index()].producer = node.id;
    }
    m_nodes.push_back(std::move(node));
    return m_nodes.back().id;
}

void Graph::setParameterValues(TensorId id, std::shared_ptr<const std::vector<std::byte>> fp32)
{
    m_revision = Revision::next();
    auto& t = m_tensors.at(id.index());
    if (t.kind != TensorKind::Parameter)
        throw Error("tensor '" + t.name + "' is not a parameter");
    if (!fp32 || fp32->size() != static_cast<std::size_t>(numBytes(t.shape, DType::F32)))
        throw Error("values for parameter '" + t.name + "' do not fit its shape " + formatShape(t.shape));
    t.dtype = DType::F32;
    t.data = std::move(fp32);
}

void Graph::setOutputs(std::vector<TensorId> outputs)
{
    m_revision = Revision::next();
    m_outputs = std::move(outputs);
}

const Node& Graph::node(NodeId id) const
{
    if (id.index() >= m_nodes.size())
        throw Error("node id " + std::to_string(id.value) + " is out of range");
    return m_nodes[id.index()];
}

const Tensor& Graph::tensor(TensorId id) const
{
    if (id.index() >= m_tensors.size())
        throw Error("tensor id " + std::to_string(id.value) + " is out of range");
    return m_tensors[id.index()];
}

std::vector<std::vector<NodeId>> Graph::consumers() const
{
    std::vector<std::vector<NodeId>> result(m_tensors.size());
    for (const auto& n : m_nodes) {
        for (auto in : n.inputs) {
            if (in.index() < result.size())
                result[in.index()].push_back(n.id);
        }
    }
    return result;
}

std::vector<NodeId> Graph::parameterOwners() const
{
    std::vector<NodeId> owners(m_tensors.size());
    for (const auto& n : m_nodes) {
        for (auto in : n.inputs) {
            if (in.index() < m_tensors.size() && m_tensors[in.index()].kind == TensorKind::Parameter
                && !owners[in.index()].valid())
                owners[in.index()] = n.id;
        }
    }
    return owners;
}

std::int64_t Graph::parameterCount() const
{
    std::int64_t count = 0;
    for (const auto& t : m_tensors) {
        if (t.kind == TensorKind::Parameter)
            count += numElements(t.shape);
    }
    return count;
}

} // namespace ps
