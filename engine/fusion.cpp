#include "fusion.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace ps::engine {

bool fusionEnabled()
{
    const char* env = std::getenv("PS_FUSION");
    return env == nullptr || std::string_view(env) != "0";
}

FusionPlan::FusionPlan(const Graph& graph, std::size_t begin, std::size_t end, const Backend& backend,
    std::span<const TensorId> recomputed, bool enabled)
    : m_begin(begin)
    , m_chainOf(end > begin ? end - begin : 0, 0)
    , m_gemmChainOf(m_chainOf.size(), 0)
{
    if (!enabled || !fusionEnabled())
        return;
    if (backend.kernels().gemmBias() != nullptr)
        planGemmChains(graph, end, recomputed);
    if (backend.kernels().maskedSoftmax().forward == nullptr)
        return;
    const auto consumers = graph.consumers();
    const auto& outputs = graph.outputs();
    const auto inRange = [&](NodeId n) { return n.valid() && n.index() >= begin && n.index() < end; };
    // The producer of `t` when `t` is read by `reader` alone, is no graph output and is made in range.
    const auto soleFeeder = [&](TensorId t, NodeId reader) -> const Node* {
        const auto producer = graph.tensor(t).producer;
        if (!inRange(producer) || std::find(outputs.begin(), outputs.end(), t) != outputs.end())
            return nullptr;
        const auto& readers = consumers[t.index()];
        return readers.size() == 1 && readers.front() == reader ? &graph.node(producer) : nullptr;
    };
    const auto excluded = [&](TensorId t) {
        return std::find(recomputed.begin(), recomputed.end(), t) != recomputed.end();
    };
    for (std::size_t n = begin; n < end; ++n) {
        const auto& softmax = graph.nodes()[n];
        if (softmax.op != OpType::Softmax || softmax.inputs.size() != 1 || softmax.outputs.size() != 1)
            continue;
        SoftmaxChain chain;
        chain.softmax = n;
        chain.head = n;
        const Node* feeder = soleFeeder(softmax.inputs[0], softmax.id);
        if (feeder != nullptr && feeder->op == OpType::Mask && feeder->outputs.size() == 1
            && (feeder->inputs.size() == 1 || feeder->inputs.size() == 2)) {
            chain.mask = static_cast<std::ptrdiff_t>(feeder->id.index());
            chain.head = feeder->id.index();
            feeder = soleFeeder(feeder->inputs[0], feeder->id);
        }
        if (feeder != nullptr && feeder->op == OpType::Scale && feeder->inputs.size() == 1
            && feeder->outputs.size() == 1) {
            chain.scale = static_cast<std::ptrdiff_t>(feeder->id.index());
            chain.head = feeder->id.index();
        }
        if (chain.head == n)
            continue; // a Softmax alone: its own kernel
        const std::ptrdiff_t members[] { chain.scale, chain.mask, static_cast<std::ptrdiff_t>(n) };
        bool ok = true;
        for (const auto i : members) {
            if (i < 0)
                continue;
            const auto& node = graph.nodes()[static_cast<std::size_t>(i)];
            ok = ok && graph.tensor(node.inputs[0]).dtype == DType::F32
                && graph.tensor(node.outputs[0]).dtype == DType::F32 && !excluded(node.outputs[0])
                && m_chainOf[static_cast<std::size_t>(i) - begin] == 0;
        }
        // A parameter read by the chain belongs to its first node's chunk access and weight-gradient
        // pass (zero-bubble's W), which a chain run at other nodes would bypass: such chains stay apart.
        const auto x = graph.nodes()[chain.head].inputs[0];
        ok = ok && graph.tensor(x).kind != TensorKind::Parameter;
        const auto padding = paddingOf(graph, chain);
        if (padding.valid()) {
            const auto producer = graph.tensor(padding).producer;
            ok = ok && (!producer.valid() || producer.index() < chain.head)
                && graph.tensor(padding).kind != TensorKind::Parameter;
        }
        if (chain.mask >= 0)
            ok = ok && graph.tensor(graph.nodes()[chain.head].inputs[0]).shape.size() >= 2;
        if (!ok)
            continue;
        m_chains.push_back(chain);
        const auto id = static_cast<int>(m_chains.size());
        for (const auto i : members) {
            if (i >= 0)
                m_chainOf[static_cast<std::size_t>(i) - begin] = id;
        }
    }
}

void FusionPlan::planGemmChains(const Graph& graph, std::size_t end, std::span<const TensorId> recomputed)
{
    const auto consumers = graph.consumers();
    const auto& outputs = graph.outputs();
    const auto excluded = [&](TensorId t) {
        return std::find(recomputed.begin(), recomputed.end(), t) != recomputed.end()
            || std::find(outputs.begin(), outputs.end(), t) != outputs.end();
    };
    const auto f32 = [&](TensorId t) { return graph.tensor(t).dtype == DType::F32; };
    for (std::size_t n = m_begin; n < end; ++n) {
        const auto& add = graph.nodes()[n];
        if ((add.op != OpType::BiasAdd && add.op != OpType::Add) || add.inputs.size() != 2 || add.outputs.size() != 1
            || !f32(add.outputs[0]) || excluded(add.outputs[0]))
            continue;
        for (std::size_t p = 0; p < 2; ++p) {
            if (add.op == OpType::BiasAdd && p != 0)
                break; // BiasAdd's bias is its second input
            const auto product = add.inputs[p];
            const auto bias = add.inputs[1 - p];
            const auto producer = graph.tensor(product).producer;
            if (!producer.valid() || producer.index() < m_begin || producer.index() >= n)
                continue;
            const auto& matmul = graph.node(producer);
            const auto& shape = graph.tensor(product).shape;
            const auto& readers = consumers[product.index()];
            const auto biasProducer = graph.tensor(bias).producer;
            const bool ok = matmul.op == OpType::MatMul && matmul.inputs.size() == 2 && matmul.outputs.size() == 1
                && readers.size() == 1 && readers.front() == add.id && !excluded(product) && f32(product) && f32(bias)
                && f32(matmul.inputs[0]) && f32(matmul.inputs[1]) && !shape.empty()
                && graph.tensor(bias).shape == Shape { shape.back() } && graph.tensor(add.outputs[0]).shape == shape
                && (!biasProducer.valid() || biasProducer.index() < producer.index())
                && m_gemmChainOf[producer.index() - m_begin] == 0;
            if (!ok)
                continue;
            GemmBiasChain chain { producer.index(), n, p };
            // A Gelu reading the sum alone joins where it is the add's next node (so its output is
            // made no earlier than apart), its output a plain f32 value of the range.
            const auto& sumReaders = consumers[add.outputs[0].index()];
            if (sumReaders.size() == 1 && sumReaders.front().index() == n + 1 && n + 1 < end) {
                const auto& gelu = graph.node(sumReaders.front());
                if (gelu.op == OpType::Gelu && gelu.inputs.size() == 1 && gelu.outputs.size() == 1
                    && f32(gelu.outputs[0]) && !excluded(gelu.outputs[0]))
                    chain.gelu = static_cast<std::ptrdiff_t>(gelu.id.index());
            }
            m_gemmChains.push_back(chain);
            markGemmChain(m_gemmChains.size() - 1);
            break;
        }
    }
}

Backend::GemmBiasGeluValues FusionPlan::runGemmChain(const Backend& backend, const Graph& graph,
    const GemmBiasChain& chain, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx)
{
    const auto& matmul = graph.nodes()[chain.matmul];
    if (chain.gelu >= 0)
        return backend.forwardGemmBiasGelu(
            matmul, graph.nodes()[static_cast<std::size_t>(chain.gelu)], x, w, bias, ctx);
    return { backend.forwardGemmBias(matmul, x, w, bias, ctx), NdArray() };
}

const GemmBiasChain* FusionPlan::gemmChainOf(std::size_t index) const
{
    if (index < m_begin || index - m_begin >= m_gemmChainOf.size() || m_gemmChainOf[index - m_begin] == 0)
        return nullptr;
    return &m_gemmChains[static_cast<std::size_t>(m_gemmChainOf[index - m_begin] - 1)];
}

void FusionPlan::dropGemmChain(std::size_t matmul)
{
    const auto* chain = gemmChainOf(matmul);
    if (chain == nullptr || chain->matmul != matmul)
        return;
    m_gemmChains.erase(m_gemmChains.begin() + (m_gemmChainOf[matmul - m_begin] - 1));
    std::fill(m_gemmChainOf.begin(), m_gemmChainOf.end(), 0);
    for (std::size_t i = 0; i < m_gemmChains.size(); ++i)
        markGemmChain(i);
}

void FusionPlan::markGemmChain(std::size_t position)
{
    const auto& chain = m_gemmChains[position];
    const auto id = static_cast<int>(position + 1);
    m_gemmChainOf[chain.matmul - m_begin] = id;
    m_gemmChainOf[chain.add - m_begin] = id;
    if (chain.gelu >= 0)
        m_gemmChainOf[static_cast<std::size_t>(chain.gelu) - m_begin] = id;
}

const SoftmaxChain* FusionPlan::chainOf(std::size_t index) const
{
    if (index < m_begin || index - m_begin >= m_chainOf.size() || m_chainOf[index - m_begin] == 0)
        return nullptr;
    return &m_chains[static_cast<std::size_t>(m_chainOf[index - m_begin] - 1)];
}

TensorId FusionPlan::paddingOf(const Graph& graph, const SoftmaxChain& chain)
{
    if (chain.mask < 0)
        return TensorId();
    const auto& mask = graph.nodes()[static_cast<std::size_t>(chain.mask)];
    return mask.inputs.size() > 1 ? mask.inputs[1] : TensorId();
}

MaskedSoftmaxArgs FusionPlan::argsOf(const Graph& graph, const SoftmaxChain& chain, NdArray padding)
{
    MaskedSoftmaxArgs a;
    if (chain.scale >= 0)
        a.scale = static_cast<float>(graph.nodes()[static_cast<std::size_t>(chain.scale)].floatAttr("scale", 1.0));
    if (chain.mask >= 0)
        a.causal = graph.nodes()[static_cast<std::size_t>(chain.mask)].intAttr("causal", 0) != 0;
    a.padding = std::move(padding);
    return a;
}

} // namespace ps::engine
