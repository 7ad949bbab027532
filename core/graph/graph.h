// The graph IR: nodes in topological order over typed tensors.
//
// Owns: Tensor, Node, Attributes and Graph, plus structural queries (producers, consumers,
// parameter ownership). A Graph is a value: copyable, comparable, storable in a project file.
// Depends on: the standard library only (no Qt, no CUDA).
#pragma once

#include "graph/types.h"
#include "ids.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace ps {

using AttrValue = std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>>;
using Attributes = std::map<std::string, AttrValue, std::less<>>;

struct Tensor
{
    TensorId id;
    std::string name;
    Shape shape; // outermost first; activations carry the micro-batch as dim 0
    DType dtype = DType::F32;
    TensorKind kind = TensorKind::Activation;
    NodeId producer; // invalid unless kind == Activation
    // Values of parameters and constants imported with the model (ONNX initializers), raw
    // little-endian elements of `dtype`; null when the model came without weights (zoo).
    std::shared_ptr<const std::vector<std::byte>> data;

    bool operator==(const Tensor& o) const
    {
        const bool sameData = (!data && !o.data) || (data && o.data && *data == *o.data);
        return id == o.id && name == o.name && shape == o.shape && dtype == o.dtype && kind == o.kind
            && producer == o.producer && sameData;
    }
};

inline constexpr std::int32_t kNoLayer = -1;

struct Node
{
    NodeId id;
    std::string name; // unique, e.g. "h.3.attn.c_attn.matmul"
    OpType op = OpType::Opaque;
    std::string opaqueType; // original op name when op == Opaque (e.g. "NonMaxSuppression")
    Attributes attrs;
    std::vector<TensorId> inputs;
    std::vector<TensorId> outputs;
    std::string scope; // module path, e.g. "h.3.attn"
    std::int32_t layer = kNoLayer; // transformer block index, kNoLayer for embeddings and heads

    bool operator==(const Node&) const = default;

    [[nodiscard]] std::int64_t intAttr(std::string_view key, std::int64_t fallback) const;
    [[nodiscard]] double floatAttr(std::string_view key, double fallback) const;
    [[nodiscard]] std::vector<std::int64_t> intsAttr(std::string_view key) const;
};

// Where a model came from and how it was configured; shown by `info` and kept in the project.
struct ModelInfo
{
    std::string name; // "gpt2-medium"
    std::string family; // "gpt2", "bert", "t5", "mlp", "onnx"
    std::string configJson; // the full configuration the graph was built from
    std::int64_t microBatch = 1; // size of dim 0 of every activation

    bool operator==(const ModelInfo&) const = default;
};

class Graph
{
public:
    Graph() = default;
    explicit Graph(ModelInfo info);

    // The content this graph has now: a new number at construction and at every change through the
    // calls below; a copy keeps it (same content). Caches of what a graph's structure implies
    // (core/plan/range_facts.h) are keyed by it. Two graphs built apart compare equal (==) whatever
    // their revisions.
    [[nodiscard]] std::uint64_t revision() const
    {
        return m_revision.value;
    }

    // Appends; ids are dense and equal to the position. Nodes must be added in topological order.
    TensorId addTensor(Tensor tensor);
    NodeId addNode(Node node);
    void setOutputs(std::vector<TensorId> outputs);
    // Gives a parameter fp32 values (a checkpoint's); throws ps::Error naming the tensor when it is
    // not a parameter or the byte count does not fit its shape.
    void setParameterValues(TensorId id, std::shared_ptr<const std::vector<std::byte>> fp32);

    void setInfo(ModelInfo info)
    {
        m_info = std::move(info);
        m_revision = Revision::next();
    }
    [[nodiscard]] const ModelInfo& info() const
    {
        return m_info;
    }
    [[nodiscard]] std::span<const Node> nodes() const
    {
        return m_nodes;
    }
    [[nodiscard]] std::span<const Tensor> tensors() const
    {
        return m_tensors;
    }
    [[nodiscard]] const std::vector<TensorId>& outputs() const
    {
        return m_outputs;
    }
    [[nodiscard]] const Node& node(NodeId id) const;
    [[nodiscard]] const Tensor& tensor(TensorId id) const;
    [[nodiscard]] std::size_t nodeCount() const
    {
        return m_nodes.size();
    }
    [[nodiscard]] std::size_t tensorCount() const
    {
        return m_tensors.size();
    }

    // Nodes reading each tensor, indexed by tensor id.
    [[nodiscard]] std::vector<std::vector<NodeId>> consumers() const;
    // The node that owns (allocates, updates) each parameter: its first consumer in node order.
    // Shared weights (tied embeddings) are owned once. Invalid for non-parameters.
    [[nodiscard]] std::vector<NodeId> parameterOwners() const;
    [[nodiscard]] std::int64_t parameterCount() const;

    bool operator==(const Graph&) const = default;

private:
    struct Revision
    {
        std::uint64_t value = next().value;
        static Revision next();
        Revision() = default;
        explicit Revision(std::uint64_t v)
            : value(v)
        {
        }
        Revision(const Revision&) = default;
        Revision& operator=(const Revision&) = default;
        // A moved-from graph's content changed: it gets a revision of its own.
        Revision(Revision&& other) noexcept
            : value(other.value)
        {
            other.value = next().value;
        }
        Revision& operator=(Revision&& other) noexcept
        {
            value = other.value;
            other.value = next().value;
            return *this;
        }
        ~Revision() = default;
        bool operator==(const Revision&) const
        {
            return true; // not content: equal graphs stay equal
        }
    };
    Revision m_revision;
    ModelInfo m_info;
    std::vector<Tensor> m_tensors;
    std::vector<Node> m_nodes;
    std::vector<TensorId> m_outputs;
};

// A value each micro-batch has its own of: an activation, or data the loader feeds (an image
// batch, token ids, labels). What a backward reads of these is kept per micro-batch in flight.
inline bool isPerMicroBatch(const Graph& g, TensorId id)
{
    const auto kind = g.tensor(id).kind;
    return kind == TensorKind::Activation || kind == TensorKind::Input;
}

} // namespace ps
