#include "attention_kernel.h"

#include "util/error.h"

#include <utility>

namespace ps::engine {
namespace {

    // The chain's two MatMuls, named after the Attention node for errors.
    Node matmulOf(const Node& attention, const char* part, bool transB)
    {
        Node n;
        n.id = attention.id;
        n.name = attention.name + " (" + part + ")";
        n.op = OpType::MatMul;
        if (transB)
            n.attrs["trans_b"] = std::int64_t { 1 };
        n.scope = attention.scope;
        n.layer = attention.layer;
        return n;
    }

    // The chain's Dropout on the probabilities (attribute dropout: its p).
    Node dropoutOf(const Node& attention)
    {
        Node n;
        n.id = attention.id;
        n.name = attention.name + " (dropout)";
        n.op = OpType::Dropout;
        n.attrs["p"] = attention.floatAttr("dropout", 0.0);
        n.scope = attention.scope;
        n.layer = attention.layer;
        return n;
    }

    const OpKernel& dropoutKernel(const KernelTable& kernels, const Node& node)
    {
        const auto* k = kernels.find(OpType::Dropout);
        if (k == nullptr)
            throw Error("node '" + node.name + "' (Attention): the backend has no Dropout to run its dropout");
        return *k;
    }

    // The probabilities with the forward's keep mask applied again (Dropout's backward is that
    // product), or as they are where the forward dropped nothing.
    NdArray droppedAgain(
        const KernelTable& kernels, const Node& node, const NodeValues& v, const NdArray& p, KernelContext& ctx)
    {
        if (v.saved.empty())
            return p;
        const NodeValues dropout { { p }, {}, { v.saved[0] } };
        const std::vector<NdArray> gradOut { p };
        const std::vector<bool> need { true };
        std::vector<NdArray> out(1);
        BackwardArgs args { gradOut, need, out };
        dropoutKernel(kernels, node).backward(dropoutOf(node), dropout, args, ctx);
        return out[0];
    }

    const OpKernel& matmulKernel(const KernelTable& kernels, const Node& node)
    {
        const auto* mm = kernels.find(OpType::MatMul);
        if (mm == nullptr || kernels.maskedSoftmax().forward == nullptr || kernels.maskedSoftmax().backward == nullptr)
            throw Error("node '" + node.name + "' (Attention): the backend has no MatMul or fused softmax to run it");
        return *mm;
    }

    MaskedSoftmaxArgs argsOf(const Node& node, const NodeValues& v)
    {
        MaskedSoftmaxArgs a;
        a.scale = static_cast<float>(node.floatAttr("scale", 1.0));
        a.causal = node.intAttr("causal", 0) != 0;
        if (v.in.size() > 3)
            a.padding = v.in[3];
        return a;
    }

    // softmax(scale q k^T, masked): the scores go as soon as the probabilities are made.
    NdArray probabilities(const KernelTable& kernels, const Node& node, const NodeValues& v, KernelContext& ctx)
    {
        NodeValues scores { { v.in[0], v.in[1] }, {}, {} };
        matmulKernel(kernels, node).forward(matmulOf(node, "scores", true), scores, ctx);
        return kernels.maskedSoftmax().forward(scores.out.at(0), argsOf(node, v), ctx);
    }

} // namespace

void attentionForward(const KernelTable& kernels, const Node& node, NodeValues& values, KernelContext& ctx)
{
    if (values.in.size() < 3)
        throw Error("node '" + node.name + "' (Attention) needs q, k and v");
    auto p = probabilities(kernels, node, values, ctx);
    values.saved.clear();
    if (node.floatAttr("dropout", 0.0) > 0 && ctx.training) { // its keep mask is the node's saved state
        NodeValues dropout { { std::move(p) }, {}, {} };
        dropoutKernel(kernels, node).forward(dropoutOf(node), dropout, ctx);
        p = std::move(dropout.out.at(0));
        values.saved = std::move(dropout.saved);
    }
    NodeValues context { { std::move(p), values.in[2] }, {}, {} };
    matmulKernel(kernels, node).forward(matmulOf(node, "context", false), context, ctx);
    values.out = { std::move(context.out.at(0)) };
}

void attentionBackward(
    const KernelTable& kernels, const Node& node, const NodeValues& values, BackwardArgs& args, KernelContext& ctx)
{
    const auto& dOut = args.gradOut.at(0);
    if (!dOut.defined())
        return;
    const auto& mm = matmulKernel(kernels, node);
    const bool needQk = args.needGrad[0] || args.needGrad[1];
    NdArray dScores;
    {
        const auto& q = values.in[0];
        auto outShape = q.shape();
        outShape.back() = values.in[2].shape().back();
        const auto p = probabilities(kernels, node, values, ctx);
        NodeValues context { { droppedAgain(kernels, node, values, p, ctx), values.in[2] },
            { NdArray::shapeOnly(outShape, DType::F32) }, {} };
        const std::vector<NdArray> gradOut { dOut };
        const std::vector<bool> need { needQk, args.needGrad[2] };
        std::vector<NdArray> grads(2);
        BackwardArgs inner { gradOut, need, grads };
        mm.backward(matmulOf(node, "context", false), context, inner, ctx); // dP (of the dropped), dV
        context.in.clear(); // the dropped probabilities
        if (args.needGrad[2])
            args.gradIn[2] = std::move(grads[1]);
        if (needQk) {
            const auto dP = droppedAgain(kernels, node, values, grads[0], ctx); // through the dropout
            grads[0] = NdArray();
            dScores = kernels.maskedSoftmax().backward(p, dP, argsOf(node, values), ctx);
        }
    } // the probabilities and their gradient go here
    if (!needQk)
        return;
    const auto& q = values.in[0];
    auto scoresShape = q.shape();
    scoresShape.back() = values.in[1].shape()[values.in[1].shape().size() - 2];
    const NodeValues scores { { q, values.in[1] }, { NdArray::shapeOnly(scoresShape, DType::F32) }, {} };
    const std::vector<NdArray> gradOut { std::move(dScores) };
    const std::vector<bool> need { args.needGrad[0], args.needGrad[1] };
    std::vector<NdArray> grads(2);
    BackwardArgs inner { gradOut, need, grads };
    mm.backward(matmulOf(node, "scores", true), scores, inner, ctx);
    args.gradIn[0] = std::move(grads[0]);
    args.gradIn[1] = std::move(grads[1]);
}

} // namespace ps::engine
