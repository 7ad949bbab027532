#include "executor.h"

#include "graph/op_cost.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>

namespace ps::engine {
namespace {

    enum class Init { Normal, Ones, Zeros };

    // How a parameter without values starts, from the first node that reads it.
    Init initFor(const Graph& g, TensorId id, const std::vector<std::vector<NodeId>>& consumers)
    {
        for (auto n : consumers[id.index()]) {
            const auto& node = g.node(n);
            const auto slot =
                static_cast<std::size_t>(std::find(node.inputs.begin(), node.inputs.end(), id) - node.inputs.begin());
            switch (node.op) {
            case OpType::LayerNorm:
            case OpType::RMSNorm:
            case OpType::BatchNorm:
            case OpType::GroupNorm:
                return slot == 1 ? Init::Ones : Init::Zeros;
            case OpType::BiasAdd:
                return Init::Zeros;
            case OpType::MatMul:
            case OpType::Conv:
                return slot == 2 ? Init::Zeros : Init::Normal;
            default:
                return Init::Normal;
            }
        }
        return Init::Normal;
    }

    // Brackets one node's work for an observer, if there is one.
    class ObservedSpan
    {
    public:
        ObservedSpan(NodeObserver* observer, NodeId node, bool backward)
            : m_observer(observer)
        {
            if (m_observer != nullptr)
                m_observer->nodeBegin(node, backward);
        }
        ~ObservedSpan()
        {
            if (m_observer != nullptr)
                m_observer->nodeEnd();
        }
        ObservedSpan(const ObservedSpan&) = delete;
        ObservedSpan& operator=(const ObservedSpan&) = delete;

    private:
        NodeObserver* m_observer;
    };

} // namespace

GraphExecutor::GraphExecutor(Graph graph, ExecutorOptions options, const Backend& backend)
    : m_graph(std::move(graph))
    , m_options(options)
    , m_backend(backend)
    , m_allocator(std::string(backend.name()), options.capacityBytes, backend.memory())
    , m_rng(options.seed)
{
    for (const auto& n : m_graph.nodes()) {
        if (!m_backend.supports(n.op))
            throw Error("node '" + n.name + "' ("
                + (n.op == OpType::Opaque ? n.opaqueType : std::string(toString(n.op))) + ") has no "
                + std::string(m_backend.name()) + " kernel: the engine cannot train this graph");
    }
    m_requiresGrad = tensorsRequiringGrad(m_graph);
    m_values.resize(m_graph.tensorCount());
    m_grads.resize(m_graph.tensorCount());
    m_nodeValues.resize(m_graph.nodeCount());
    m_fusion = FusionPlan(m_graph, 0, m_graph.nodeCount(), m_backend, {}, options.fuse);
    m_fusedForward.assign(m_graph.nodeCount(), 0);
    initialize();
}

NdArray GraphExecutor::fromGraphData(const Tensor& t)
{
    // Converted on the host to the engine's f32 / i64, then one copy to the device.
    DType dtype = DType::F32;
    const auto host = engineHostValues(t, dtype);
    return m_backend.fromHost(m_allocator, t.shape, dtype, host);
}

void GraphExecutor::initialize()
{
    const auto consumers = m_graph.consumers();
    std::normal_distribution<float> normal(0.0F, 0.02F);
    std::int32_t layers = 0;
    for (const auto& n : m_graph.nodes())
        layers = std::max(layers, n.layer + 1);
    m_allocator.setOwner("parameters");
    for (const auto& t : m_graph.tensors()) {
        if (t.kind == TensorKind::Parameter) {
            if (t.data) {
                m_values[t.id.index()] = fromGraphData(t);
                continue;
            }
            const auto init = initFor(m_graph, t.id, consumers);
            // GPT-2 scales the residual projections' init by 1/sqrt(2 * layers) (Radford et al. 2019, 2.3).
            const bool residual = t.name.ends_with("c_proj.weight") && layers > 0;
            const float scale = residual ? 1.0F / std::sqrt(2.0F * static_cast<float>(layers)) : 1.0F;
            std::vector<float> host(static_cast<std::size_t>(numElements(t.shape)));
            for (auto& x : host) // one draw per element in order: the values do not depend on the backend
                x = init == Init::Normal ? scale * normal(m_rng) : init == Init::Ones ? 1.0F : 0.0F;
            m_values[t.id.index()] =
                m_backend.fromHost(m_allocator, t.shape, DType::F32, std::as_bytes(std::span(host)));
        } else if (t.kind == TensorKind::Constant) {
            if (!t.data)
                throw Error("constant '" + t.name
                    + "' has no values in the project (imported without weights, or a "
                      "zoo project from an older PipeStudio: create it again)");
            m_values[t.id.index()] = fromGraphData(t);
        }
    }
    m_allocator.setOwner("");
}

void GraphExecutor::setInput(const std::string& name, NdArray value)
{
    for (const auto& t : m_graph.tensors()) {
        if (t.kind != TensorKind::Input || t.name != name)
            continue;
        const bool isFloat = t.dtype == DType::F32 || t.dtype == DType::F64;
        if (value.shape() != t.shape || (value.dtype() == DType::F32) != isFloat)
            throw Error("input '" + name + "' expects " + formatShape(t.shape) + " " + std::string(toString(t.dtype))
                + ", got " + formatShape(value.shape()) + " " + std::string(toString(value.dtype())));
        m_values[t.id.index()] = std::move(value);
        return;
    }
    throw Error("the graph has no input named '" + name + "'");
}

std::vector<std::string> GraphExecutor::inputNames() const
{
    std::vector<std::string> names;
    for (const auto& t : m_graph.tensors()) {
        if (t.kind == TensorKind::Input)
            names.push_back(t.name);
    }
    return names;
}

float GraphExecutor::forward()
{
    KernelContext ctx { m_allocator, m_rng, m_options.training, m_options.gemm };
    std::fill(m_fusedForward.begin(), m_fusedForward.end(), 0);
    for (const auto& node : m_graph.nodes()) {
        if (const auto* gemm = m_fuse ? m_fusion.gemmChainOf(node.id.index()) : nullptr) {
            if (node.id.index() == gemm->matmul)
                forwardGemmChain(*gemm, ctx);
            continue; // the add (and a Gelu after it) ran with its MatMul
        }
        if (const auto* chain = m_fuse ? m_fusion.chainOf(node.id.index()) : nullptr) {
            if (node.id.index() == chain->head)
                forwardChain(*chain, ctx);
            continue; // the chain's later nodes ran with its head
        }
        const ObservedSpan span(m_observer, node.id, false);
        auto& nv = m_nodeValues[node.id.index()];
        nv.in.clear();
        for (auto in : node.inputs) {
            const auto& value = m_values[in.index()];
            if (!value.defined())
                throw Error("node '" + node.name + "' reads '" + m_graph.tensor(in).name
                    + "', which has no value (an input not fed?)");
            nv.in.push_back(value);
        }
        m_backend.forward(node, nv, ctx);
        for (std::size_t i = 0; i < node.outputs.size(); ++i)
            m_values[node.outputs[i].index()] = nv.out[i];
    }
    const auto& out = m_values[m_graph.outputs().front().index()];
    if (out.numel() == 0)
        return 0.0F;
    const auto bytes = m_backend.toHost(out);
    if (out.dtype() == DType::I64) {
        std::int64_t first = 0;
        std::memcpy(&first, bytes.data(), sizeof first);
        return static_cast<float>(first);
    }
    float first = 0;
    std::memcpy(&first, bytes.data(), sizeof first);
    return first;
}

void GraphExecutor::backward()
{
    KernelContext ctx { m_allocator, m_rng, m_options.training, m_options.gemm };
    std::vector<NdArray> grads(m_graph.tensorCount()); // activation gradients of this pass
    const auto loss = m_graph.outputs().front();
    m_allocator.setOwner("loss gradient");
    grads[loss.index()] = m_backend.zeros(m_allocator, m_graph.tensor(loss).shape);
    m_backend.fill(grads[loss.index()], 1.0F);
    const auto nodes = m_graph.nodes();
    for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
        const auto& node = *it;
        if (m_fusedForward[node.id.index()] != 0) {
            const auto* chain = m_fusion.chainOf(node.id.index());
            if (node.id.index() == chain->softmax)
                backwardChain(*chain, grads, ctx);
            continue; // its inner nodes have no output gradient: the chain's backward passed them
        }
        std::vector<NdArray> gradOut;
        bool any = false;
        for (auto out : node.outputs) {
            gradOut.push_back(grads[out.index()]);
            any = any || grads[out.index()].defined();
            grads[out.index()] = NdArray(); // consumed: free as we go
        }
        if (!any)
            continue;
        std::vector<bool> need;
        bool anyNeed = false;
        for (auto in : node.inputs) {
            need.push_back(m_requiresGrad[in.index()]);
            anyNeed = anyNeed || need.back();
        }
        const ObservedSpan span(anyNeed ? m_observer : nullptr, node.id, true);
        auto gradIn = m_backend.backward(node, m_nodeValues[node.id.index()], gradOut, need, ctx);
        m_nodeValues[node.id.index()] = NodeValues();
        for (std::size_t i = 0; i < node.inputs.size(); ++i) {
            if (need[i] && gradIn[i].defined())
                addGradient(node.inputs[i], gradIn[i], grads);
        }
    }
    m_allocator.setOwner("");
}

void GraphExecutor::addGradient(TensorId id, const NdArray& grad, std::vector<NdArray>& grads)
{
    auto& slot = m_graph.tensor(id).kind == TensorKind::Parameter ? m_grads[id.index()] : grads[id.index()];
    if (!slot.defined()) // a parameter's gradient outlives the pass: its own buffer
        slot = m_graph.tensor(id).kind == TensorKind::Parameter ? m_backend.copyTo(grad, m_backend, m_allocator) : grad;
    else // a second consumer (residual branch, tied weight): out of place, views share storage
        slot = m_backend.add(slot, grad, m_allocator);
}

// A fused chain (engine/fusion.h) in one kernel, observed and its allocations owned as its Softmax
// node; its inner tensors get no value.
void GraphExecutor::forwardChain(const SoftmaxChain& chain, KernelContext& ctx)
{
    const auto& head = m_graph.nodes()[chain.head];
    const auto& softmax = m_graph.nodes()[chain.softmax];
    const auto& x = m_values[head.inputs[0].index()];
    const auto padding = FusionPlan::paddingOf(m_graph, chain);
    if (!x.defined() || (padding.valid() && !m_values[padding.index()].defined()))
        throw Error("node '" + head.name + "' reads a tensor that has no value (an input not fed?)");
    const ObservedSpan span(m_observer, softmax.id, false);
    m_allocator.setOwner(softmax.name);
    auto y = m_backend.kernels().maskedSoftmax().forward(
        x, FusionPlan::argsOf(m_graph, chain, padding.valid() ? m_values[padding.index()] : NdArray()), ctx);
    m_allocator.setOwner("");
    // The inner nodes' values of an earlier unfused forward go: nothing reads them now.
    for (const auto i : { static_cast<std::ptrdiff_t>(chain.head), chain.mask }) {
        if (i < 0)
            continue;
        const auto& inner = m_graph.nodes()[static_cast<std::size_t>(i)];
        m_nodeValues[static_cast<std::size_t>(i)] = NodeValues();
        m_values[inner.outputs[0].index()] = NdArray();
    }
    m_nodeValues[chain.softmax] = NodeValues();
    m_nodeValues[chain.softmax].out = { y };
    m_values[softmax.outputs[0].index()] = std::move(y);
    for (const auto i :
        { static_cast<std::ptrdiff_t>(chain.head), chain.mask, static_cast<std::ptrdiff_t>(chain.softmax) }) {
        if (i >= 0)
            m_fusedForward[static_cast<std::size_t>(i)] = 1;
    }
}

// A GEMM + bias chain in one call, observed as its MatMul node. Both nodes get the values their
// backwards read; the product before the bias gets none.
void GraphExecutor::forwardGemmChain(const GemmBiasChain& chain, KernelContext& ctx)
{
    const auto& matmul = m_graph.nodes()[chain.matmul];
    const auto& add = m_graph.nodes()[chain.add];
    const auto valueOf = [&](TensorId t) -> const NdArray& {
        const auto& v = m_values[t.index()];
        if (!v.defined())
            throw Error("node '" + matmul.name + "' reads '" + m_graph.tensor(t).name
                + "', which has no value (an input not fed?)");
        return v;
    };
    const auto& x = valueOf(matmul.inputs[0]);
    const auto& w = valueOf(matmul.inputs[1]);
    const auto& bias = valueOf(add.inputs[1 - chain.productInput]);
    NdArray y;
    NdArray activated;
    {
        const ObservedSpan span(m_observer, matmul.id, false);
        auto both = FusionPlan::runGemmChain(m_backend, m_graph, chain, x, w, bias, ctx);
        y = std::move(both.sum);
        activated = std::move(both.activated);
    }
    if (chain.gelu >= 0) {
        const auto& gelu = m_graph.nodes()[static_cast<std::size_t>(chain.gelu)];
        m_nodeValues[gelu.id.index()] = NodeValues { { y }, { activated }, {} };
        m_values[gelu.outputs[0].index()] = std::move(activated);
    }
    const auto product = NdArray::shapeOnly(y.shape(), DType::F32);
    m_nodeValues[chain.matmul] = NodeValues { { x, w }, { product }, {} };
    m_nodeValues[chain.add] =
        NodeValues { chain.productInput == 0 ? std::vector { product, bias } : std::vector { bias, product }, { y },
            {} };
    m_values[matmul.outputs[0].index()] = NdArray();
    m_values[add.outputs[0].index()] = std::move(y);
}

void GraphExecutor::backwardChain(const SoftmaxChain& chain, std::vector<NdArray>& grads, KernelContext& ctx)
{
    const auto& head = m_graph.nodes()[chain.head];
    const auto& softmax = m_graph.nodes()[chain.softmax];
    auto dy = std::exchange(grads[softmax.outputs[0].index()], NdArray());
    const auto x = head.inputs[0];
    if (dy.defined() && m_requiresGrad[x.index()]) {
        const auto padding = FusionPlan::paddingOf(m_graph, chain);
        const ObservedSpan span(m_observer, softmax.id, true);
        m_allocator.setOwner(softmax.name + " (backward)");
        const auto dx = m_backend.kernels().maskedSoftmax().backward(m_nodeValues[chain.softmax].out[0], dy,
            FusionPlan::argsOf(m_graph, chain, padding.valid() ? m_values[padding.index()] : NdArray()), ctx);
        m_allocator.setOwner("");
        addGradient(x, dx, grads);
    }
    m_nodeValues[chain.softmax] = NodeValues();
}

void GraphExecutor::releaseActivations()
{
    for (const auto& t : m_graph.tensors()) {
        if (t.kind == TensorKind::Activation)
            m_values[t.id.index()] = NdArray();
    }
    for (auto& nv : m_nodeValues)
        nv = NodeValues();
}

void GraphExecutor::zeroGrad()
{
    for (auto& g : m_grads)
        g = NdArray();
}

std::vector<TensorId> GraphExecutor::parameterIds() const
{
    std::vector<TensorId> ids;
    for (const auto& t : m_graph.tensors()) {
        if (t.kind == TensorKind::Parameter)
            ids.push_back(t.id);
    }
    return ids;
}

NdArray& GraphExecutor::parameter(TensorId id)
{
    return m_values[id.index()];
}

NdArray& GraphExecutor::gradient(TensorId id)
{
    if (!m_grads[id.index()].defined()) {
        m_allocator.setOwner("gradients");
        m_grads[id.index()] = m_backend.zeros(m_allocator, m_graph.tensor(id).shape);
        m_allocator.setOwner("");
    }
    return m_grads[id.index()];
}

const NdArray& GraphExecutor::value(TensorId id) const
{
    return m_values[id.index()];
}

} // namespace ps::engine
