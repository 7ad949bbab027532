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
{
    if (!enabled || !fusionEnabled() || backend.kernels().maskedSoftmax().forward == nullptr)
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
