// torch.autocast's tensor types over a graph (cost/autocast.h).
#include "cost/autocast.h"

#include <algorithm>

namespace ps {
namespace {

    using Rule = AutocastRule;

    Rule ruleOf(OpType op)
    {
        switch (op) {
        case OpType::MatMul:
        case OpType::Einsum:
        case OpType::Conv:
        case OpType::Attention: // scaled_dot_product_attention runs in the lower type
            return Rule::Lower;
        case OpType::Softmax:
        case OpType::LayerNorm:
        case OpType::RMSNorm:
        case OpType::GroupNorm:
        case OpType::CrossEntropy:
        case OpType::Exp:
        case OpType::Log:
        case OpType::Pow:
        case OpType::Reciprocal:
        case OpType::Sin:
        case OpType::Cos:
        case OpType::ReduceSum:
        case OpType::CumSum:
            return Rule::Float32;
        case OpType::Add:
        case OpType::BiasAdd:
        case OpType::Sub:
        case OpType::Mul:
        case OpType::Div:
        case OpType::Max:
        case OpType::Min:
        case OpType::Where:
        case OpType::Concat:
        case OpType::ScatterND: // index_put
            return Rule::Promote;
        default:
            return Rule::Follow;
        }
    }

    bool isFp32(const Tensor& t)
    {
        return t.dtype == DType::F32;
    }

    // A 0-d tensor (a Python scalar in the source) takes no part in type promotion against a
    // tensor with dimensions.
    bool isScalar(const Tensor& t)
    {
        return t.shape.empty();
    }

    bool hasParameterInput(const Graph& g, const Node& n)
    {
        return std::any_of(
            n.inputs.begin(), n.inputs.end(), [&g](TensorId t) { return g.tensor(t).kind == TensorKind::Parameter; });
    }

    // x + b with b a parameter vector, x the output of a GEMM or convolution with a weight: the
    // layer's own bias, which nn.Linear, addmm and Conv1D add inside the half-precision GEMM.
    bool isLayerBias(const Graph& g, const Node& n)
    {
        if ((n.op != OpType::BiasAdd && n.op != OpType::Add) || n.inputs.size() != 2)
            return false;
        for (int i = 0; i < 2; ++i) {
            const auto& bias = g.tensor(n.inputs[static_cast<std::size_t>(i)]);
            const auto& x = g.tensor(n.inputs[static_cast<std::size_t>(1 - i)]);
            if (bias.kind != TensorKind::Parameter || bias.shape.size() != 1 || x.kind != TensorKind::Activation
                || !x.producer.valid())
                continue;
            const auto& producer = g.node(x.producer);
            if (autocastRule(g, producer) == Rule::Lower && hasParameterInput(g, producer))
                return true;
        }
        return false;
    }

} // namespace

AutocastRule autocastRule(const Graph& graph, const Node& node)
{
    if (node.op == OpType::Einsum) { // one operand reaches no GEMM
        const auto operands = std::count_if(
            node.inputs.begin(), node.inputs.end(), [&graph](TensorId t) { return isFp32(graph.tensor(t)); });
        return operands >= 2 ? Rule::Lower : Rule::Follow;
    }
    if (node.op == OpType::Div && node.inputs.size() == 2 && isScalar(graph.tensor(node.inputs[0]))
        && !isScalar(graph.tensor(node.inputs[1])))
        return Rule::Float32; // a scalar over a tensor: __rtruediv__, on autocast's fp32 list
    return ruleOf(node.op);
}

bool AutocastPlan::savesOwnHalfCopy(const Graph& graph, const Node& node, TensorId t) const
{
    return mixed && autocastRule(graph, node) == Rule::Lower && graph.tensor(t).dtype == DType::F32 && !half[t.index()];
}

double AutocastPlan::savedBytes(const Graph& graph, const Node& node, const OpCost& cost) const
{
    if (!mixed)
        return static_cast<double>(cost.savedBytes);
    double bytes = static_cast<double>(cost.savedExtraBytes);
    for (const auto t : cost.savedTensors) {
        const auto& tensor = graph.tensor(t);
        const double full = static_cast<double>(numBytes(tensor.shape, tensor.dtype));
        bytes += full * (savesOwnHalfCopy(graph, node, t) ? 0.5 : scale(t));
    }
    return bytes;
}

AutocastPlan planAutocast(const Graph& graph, bool mixed)
{
    AutocastPlan plan;
    const auto nodes = graph.nodeCount();
    plan.half.assign(graph.tensorCount(), false);
    plan.castActivationBytes.assign(nodes, 0);
    plan.castParameterBytes.assign(nodes, 0);
    plan.castKernels.assign(nodes, 0);
    plan.mixed = mixed;
    if (!mixed)
        return plan;
    for (const auto& node : graph.nodes()) {
        const auto i = node.id.index();
        const auto rule = autocastRule(graph, node);
        bool outHalf = false;
        bool anyFloat = false;
        bool allHalf = true;
        bool first = true;
        for (const auto id : node.inputs) {
            const auto& t = graph.tensor(id);
            if (!isFp32(t))
                continue;
            const bool half = plan.half[id.index()];
            // A cast kernel reads 4 and writes 2 bytes per element, or the reverse: 1.5x the fp32 bytes.
            const double castBytes = 1.5 * static_cast<double>(numBytes(t.shape, t.dtype));
            // A Cast node is the cast kernel itself.
            if (node.op != OpType::Cast && ((rule == Rule::Lower && !half) || (rule == Rule::Float32 && half))) {
                (t.kind == TensorKind::Parameter ? plan.castParameterBytes : plan.castActivationBytes)[i] += castBytes;
                ++plan.castKernels[i];
            }
            if (first) {
                outHalf = half;
                first = false;
            }
            if (!isScalar(t)) {
                anyFloat = true;
                allHalf = allHalf && half;
            }
        }
        switch (rule) {
        case Rule::Lower:
            outHalf = true;
            break;
        case Rule::Float32:
            outHalf = false;
            break;
        case Rule::Promote:
            outHalf = isLayerBias(graph, node) || (anyFloat && allHalf);
            break;
        case Rule::Follow:
            outHalf = outHalf && node.op != OpType::Cast; // .float() and friends write fp32
            break;
        }
        for (const auto id : node.outputs)
            plan.half[id.index()] = outHalf && isFp32(graph.tensor(id));
    }
    return plan;
}

} // namespace ps
