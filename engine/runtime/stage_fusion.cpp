// StageExecutor's fused chains (engine/fusion.h): a chain runs as one kernel when forward reaches
// its first node and when backward reaches its Softmax. Its nodes' values are left as their own
// kernels and the keep sets would leave them (the inner tensors never get storage), so release,
// swap and recompute bookkeeping sees what it sees without fusion.
#include "runtime/stage_micro_batch.h"
#include "util/error.h"

#include <random>
#include <utility>

namespace ps::engine {

void StageExecutor::forwardChain(MicroBatch& s, MicroBatchId mb, const SoftmaxChain& chain)
{
    const auto& head = m_graph.nodes()[chain.head];
    const auto& softmax = m_graph.nodes()[chain.softmax];
    const auto& x = forwardInput(s, head, head.inputs[0]);
    const auto paddingId = FusionPlan::paddingOf(m_graph, chain);
    NdArray padding;
    if (paddingId.valid())
        padding = forwardInput(s, m_graph.nodes()[static_cast<std::size_t>(chain.mask)], paddingId);
    std::mt19937_64 rng(nodeSeed(mb, softmax.id));
    KernelContext ctx { m_device, rng, true, m_gemm };
    NdArray y;
    {
        const NodeAccess access(*this, chain.softmax - m_begin);
        m_device.setOwner(softmax.name);
        y = m_backend.kernels().maskedSoftmax().forward(x, FusionPlan::argsOf(m_graph, chain, padding), ctx);
        m_device.setOwner("");
    }
    const auto valueOf = [&](TensorId t) {
        if (t == head.inputs[0])
            return x;
        if (t == paddingId)
            return padding;
        if (t == softmax.outputs[0])
            return y;
        return NdArray::shapeOnly(m_graph.tensor(t).shape, DType::F32); // inner: never made
    };
    for (const auto i :
        { static_cast<std::ptrdiff_t>(chain.head), chain.mask, static_cast<std::ptrdiff_t>(chain.softmax) }) {
        if (i < 0 || (i == chain.mask && chain.mask == static_cast<std::ptrdiff_t>(chain.head)))
            continue;
        const auto local = static_cast<std::size_t>(i) - m_begin;
        const auto& node = m_graph.nodes()[static_cast<std::size_t>(i)];
        auto& nv = s.nodes[local];
        for (std::size_t j = 0; j < node.inputs.size(); ++j) {
            const auto v = valueOf(node.inputs[j]);
            nv.in.push_back(m_keepIn[local][j] != 0 ? v : NdArray::shapeOnly(v.shape(), v.dtype()));
        }
        for (std::size_t k = 0; k < node.outputs.size(); ++k) {
            const auto v = valueOf(node.outputs[k]);
            nv.out.push_back(m_keepOut[local][k] != 0 ? v : NdArray::shapeOnly(v.shape(), v.dtype()));
        }
    }
    s.values[static_cast<std::size_t>(slotOf(softmax.outputs[0]))] = std::move(y);
}

void StageExecutor::forwardGemmChain(MicroBatch& s, const GemmBiasChain& chain)
{
    const auto& matmul = m_graph.nodes()[chain.matmul];
    const auto& add = m_graph.nodes()[chain.add];
    const auto x = forwardInput(s, matmul, matmul.inputs[0]);
    const auto w = forwardInput(s, matmul, matmul.inputs[1]);
    const auto bias = forwardInput(s, add, add.inputs[1 - chain.productInput]);
    KernelContext ctx { m_device, m_idleRng, true, m_gemm };
    auto both = FusionPlan::runGemmChain(m_backend, m_graph, chain, x, w, bias, ctx);
    auto y = std::move(both.sum);
    auto activated = std::move(both.activated);
    const auto product = NdArray::shapeOnly(y.shape(), DType::F32);
    const auto keep = [](char kept, const NdArray& v) {
        return kept != 0 ? v : NdArray::shapeOnly(v.shape(), v.dtype());
    };
    if (chain.gelu >= 0) { // the Gelu's values as its own forward would leave them
        const auto& gelu = m_graph.nodes()[static_cast<std::size_t>(chain.gelu)];
        const auto g = static_cast<std::size_t>(chain.gelu) - m_begin;
        s.nodes[g].in = { keep(m_keepIn[g][0], y) };
        s.nodes[g].out = { keep(m_keepOut[g][0], activated) };
        s.values[static_cast<std::size_t>(slotOf(gelu.outputs[0]))] = std::move(activated);
    }
    const auto mm = chain.matmul - m_begin;
    s.nodes[mm].in = { keep(m_keepIn[mm][0], x), keep(m_keepIn[mm][1], w) };
    s.nodes[mm].out = { product };
    const auto a = chain.add - m_begin;
    const auto p = chain.productInput;
    s.nodes[a].in = { p == 0 ? product : keep(m_keepIn[a][0], bias), p == 1 ? product : keep(m_keepIn[a][1], bias) };
    s.nodes[a].out = { keep(m_keepOut[a][0], y) };
    s.values[static_cast<std::size_t>(slotOf(add.outputs[0]))] = std::move(y);
}

void StageExecutor::backwardChain(MicroBatch& s, const SoftmaxChain& chain)
{
    const auto local = chain.softmax - m_begin;
    const auto& head = m_graph.nodes()[chain.head];
    const auto& softmax = m_graph.nodes()[chain.softmax];
    auto dy = std::exchange(s.grads[static_cast<std::size_t>(slotOf(softmax.outputs[0]))], NdArray());
    const auto x = head.inputs[0];
    if (dy.defined() && m_requiresGrad[x.index()]) {
        NdArray padding;
        if (FusionPlan::paddingOf(m_graph, chain).valid()) {
            padding = s.nodes[static_cast<std::size_t>(chain.mask) - m_begin].in[1];
            if (!padding.defined())
                throw Error("stage " + std::to_string(m_id.value) + ": the backward of '" + softmax.name
                    + "' lost its padding mask");
        }
        KernelContext ctx { m_device, m_idleRng, true, m_gemm };
        const NodeAccess access(*this, local);
        m_device.setOwner(softmax.name + " (backward)");
        auto dx = m_backend.kernels().maskedSoftmax().backward(
            s.nodes[local].out[0], dy, FusionPlan::argsOf(m_graph, chain, padding), ctx);
        if (const auto p = m_paramIndex[x.index()]; p >= 0) {
            accumulateParameterGradient(p, dx);
        } else {
            auto& slot = s.grads[static_cast<std::size_t>(slotOf(x))];
            slot = slot.defined() ? m_backend.add(slot, dx, m_device) : std::move(dx);
        }
        m_device.setOwner("");
    }
    s.nodes[local] = NodeValues();
}

} // namespace ps::engine
