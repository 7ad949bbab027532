// Incremental construction of a Graph with module scopes, as a model's forward pass reads.
//
// Output shapes come from inferOutputShapes, so a builder cannot create a node whose stored shape
// disagrees with the op. Names are "<scope>.<local>", e.g. "h.3.attn.c_attn.matmul".
// Depends on: graph/graph.h, graph/shape_inference.h.
#pragma once

#include "graph/graph.h"

#include <string>
#include <vector>

namespace ps {

class GraphBuilder
{
public:
    explicit GraphBuilder(ModelInfo info, DType activationType = DType::F32);

    TensorId input(const std::string& name, Shape shape, DType dtype);
    TensorId constant(const std::string& name, Shape shape, DType dtype);
    // An int64 constant with its values (position ids, relative-position buckets), row-major.
    TensorId constant(const std::string& name, Shape shape, const std::vector<std::int64_t>& values);
    // A float constant with its values (BatchNorm's running statistics), row-major.
    TensorId constant(const std::string& name, Shape shape, const std::vector<float>& values);
    TensorId parameter(const std::string& name, Shape shape);

    // Adds a node named "<scope>.<name>" and returns its single output.
    TensorId op(OpType op, const std::string& name, std::vector<TensorId> inputs, Attributes attrs = {});
    // Same for ops with several outputs (Split).
    std::vector<TensorId> opMulti(
        OpType op, const std::string& name, std::vector<TensorId> inputs, Attributes attrs = {});

    void pushScope(const std::string& part);
    void popScope();
    void setLayer(std::int32_t layer)
    {
        m_layer = layer;
    }

    [[nodiscard]] const Tensor& tensor(TensorId id) const
    {
        return m_graph.tensor(id);
    }
    [[nodiscard]] const Shape& shape(TensorId id) const
    {
        return m_graph.tensor(id).shape;
    }

    // Validates and hands over the graph; the builder is empty afterwards.
    Graph finish(std::vector<TensorId> outputs);

private:
    [[nodiscard]] std::string qualified(const std::string& name) const;
    template <typename T>
    TensorId valuedConstant(const std::string& name, Shape shape, const std::vector<T>& values, DType dtype);

    Graph m_graph;
    DType m_activationType;
    std::vector<std::string> m_scope;
    std::int32_t m_layer = kNoLayer;
};

// RAII scope: pushes on construction, pops on destruction.
class ScopeGuard
{
public:
    ScopeGuard(GraphBuilder& builder, const std::string& part)
        : m_builder(builder)
    {
        m_builder.pushScope(part);
    }
    ~ScopeGuard()
    {
        m_builder.popScope();
    }
    ScopeGuard(const ScopeGuard&) = delete;
    ScopeGuard& operator=(const ScopeGuard&) = delete;

private:
    GraphBuilder& m_builder;
};

} // namespace ps
