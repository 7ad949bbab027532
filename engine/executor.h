// Runs a graph on a device backend (the CPU one by default) for training: forward over the node
// order keeping each node's values for the micro-batch, then backward in reverse, accumulating
// parameter gradients across micro-batches until zeroGrad.
//
// Parameters come from the graph's values when it carries them (ONNX initializers, checkpoints)
// and from a seeded initialisation otherwise: N(0, 0.02) for weights and tables, ones for norm
// scales, zeros for biases and norm shifts (GPT-2's scheme).
// Values live on the backend's device and are read and written only through the backend.
// Depends on: core (Graph, op_cost's requires-grad analysis), backend.h; no Qt, no CUDA.
#pragma once

#include "backend.h"
#include "fusion.h"
#include "graph/graph.h"

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace ps::engine {

struct ExecutorOptions
{
    std::uint64_t seed = 0; // parameter initialisation and dropout masks
    std::int64_t capacityBytes = 0; // device memory budget; 0: unlimited
    bool training = true; // dropout and batch statistics on
    GemmPrecision gemm = GemmPrecision::Fp32; // where the backend has the choice (CUDA)
    bool fuse = true; // fused chains (engine/fusion.h) where the backend has kernels for them
};

// Told where each node's work starts and ends inside real steps (a profiler times nodes in place,
// with the caches and gradient sums a step has, rather than one node repeated alone). A node's
// backward span covers its kernel and the sums of the gradients it returns.
class NodeObserver
{
public:
    virtual ~NodeObserver() = default;
    virtual void nodeBegin(NodeId node, bool backward) = 0;
    virtual void nodeEnd() = 0;
};

class GraphExecutor
{
public:
    // Throws ps::Error naming the first node the backend has no kernel for.
    explicit GraphExecutor(Graph graph, ExecutorOptions options = {}, const Backend& backend = cpuBackend());

    [[nodiscard]] const Graph& graph() const
    {
        return m_graph;
    }
    [[nodiscard]] Allocator& allocator()
    {
        return m_allocator;
    }
    [[nodiscard]] const Backend& backend() const
    {
        return m_backend;
    }

    // Feeds an Input tensor of the graph (by its name); shape and dtype must match.
    void setInput(const std::string& name, NdArray value);
    [[nodiscard]] std::vector<std::string> inputNames() const;

    // Runs every node; returns the first graph output's value as a float (the loss).
    float forward();
    // Backpropagates from the first graph output (a scalar loss) and adds into the gradients.
    void backward();
    // Drops the micro-batch's activations (after backward, or to evaluate without one).
    void releaseActivations();
    void zeroGrad();
    // Every later forward and backward reports its nodes to `observer` (nullptr: none). Not owned.
    void setObserver(NodeObserver* observer)
    {
        m_observer = observer;
    }

    [[nodiscard]] std::vector<TensorId> parameterIds() const;
    [[nodiscard]] NdArray& parameter(TensorId id);
    [[nodiscard]] NdArray& gradient(TensorId id);
    // The value of any tensor after forward (activations until releaseActivations); undefined for
    // a fused chain's inner tensors (engine/fusion.h), which a fused forward never makes.
    [[nodiscard]] const NdArray& value(TensorId id) const;
    // Later forwards run every node apart (false) or fused chains as one (true, where planned):
    // the profiler takes each node's inputs from an unfused forward.
    void setFusion(bool on)
    {
        m_fuse = on;
    }

private:
    void initialize();
    [[nodiscard]] NdArray fromGraphData(const Tensor& t);
    void forwardChain(const SoftmaxChain& chain, KernelContext& ctx);
    void backwardChain(const SoftmaxChain& chain, std::vector<NdArray>& grads, KernelContext& ctx);
    void forwardGemmChain(const GemmBiasChain& chain, KernelContext& ctx);
    void addGradient(TensorId id, const NdArray& grad, std::vector<NdArray>& grads);

    Graph m_graph;
    ExecutorOptions m_options;
    const Backend& m_backend;
    Allocator m_allocator;
    std::mt19937_64 m_rng;
    std::vector<bool> m_requiresGrad;
    std::vector<NdArray> m_values; // by tensor id: parameters, constants, inputs, activations
    std::vector<NdArray> m_grads; // by tensor id: parameter gradients (accumulated)
    std::vector<NodeValues> m_nodeValues; // by node id, for backward
    NodeObserver* m_observer = nullptr;
    FusionPlan m_fusion;
    bool m_fuse = true;
    std::vector<char> m_fusedForward; // by node: its chain ran fused in the last forward
};

} // namespace ps::engine
