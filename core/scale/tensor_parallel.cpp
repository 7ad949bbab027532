#include "scale/tensor_parallel.h"

#include "util/error.h"

#include <algorithm>

namespace ps {

std::string_view toString(Shard shard)
{
    switch (shard) {
    case Shard::Replicated:
        return "replicated";
    case Shard::Column:
        return "column";
    case Shard::Row:
        return "row";
    case Shard::Vocabulary:
        return "vocabulary";
    case Shard::Split:
        return "split";
    }
    return "replicated";
}

int TensorParallelPlan::count(Shard shard) const
{
    return static_cast<int>(std::count(nodes.begin(), nodes.end(), shard));
}

std::string TensorParallelPlan::text() const
{
    std::string out = "tensor parallel " + std::to_string(size) + ":";
    const char* sep = " ";
    for (auto s : { Shard::Column, Shard::Row, Shard::Vocabulary, Shard::Split, Shard::Replicated }) {
        out += sep + std::to_string(count(s)) + " " + std::string(toString(s));
        sep = ", ";
    }
    return out;
}

namespace {

    // The 2-D weight a node multiplies by (a parameter input), or nullptr.
    const Tensor* weightOf(const Graph& g, const Node& n)
    {
        for (const auto id : n.inputs) {
            const auto& t = g.tensor(id);
            if (t.kind == TensorKind::Parameter && t.shape.size() == 2)
                return &t;
        }
        return nullptr;
    }

    std::string nodeName(const Node& n)
    {
        return "node '" + n.name + "'";
    }

    void requireDivides(std::int64_t size, int t, const Node& n, const std::string& what)
    {
        if (size % t != 0)
            throw Error("tensor parallel " + std::to_string(t) + ": " + nodeName(n) + " has " + std::to_string(size)
                + " " + what + ", not divisible by " + std::to_string(t));
    }

    // The largest Embedding table: the word embedding (position and type tables are smaller).
    const Tensor* wordTable(const Graph& g)
    {
        const Tensor* words = nullptr;
        for (const auto& n : g.nodes()) {
            const auto* table = n.op == OpType::Embedding ? weightOf(g, n) : nullptr;
            if (table != nullptr && (words == nullptr || table->shape[0] > words->shape[0]))
                words = table;
        }
        return words;
    }

    // Something was split, and nothing split reaches a graph output.
    void requireWholeEnds(const Graph& g, int t, bool anyWeight, const std::vector<char>& split)
    {
        if (!anyWeight)
            throw Error("tensor parallel " + std::to_string(t)
                + ": the model has no MatMul or Embedding with a weight to split");
        for (const auto id : g.outputs()) {
            if (split[id.index()] != 0)
                throw Error("tensor parallel " + std::to_string(t) + ": graph output '" + g.tensor(id).name
                    + "' stays split over the tensor group (the model does not end in a row-parallel MatMul or a "
                      "cross-entropy)");
        }
    }

} // namespace

TensorParallelPlan shardTensorParallel(const Graph& g, int t)
{
    if (t < 1)
        throw Error("tensor parallel size must be at least 1, got " + std::to_string(t));
    TensorParallelPlan plan;
    plan.size = t;
    plan.nodes.assign(g.nodeCount(), Shard::Replicated);
    // Vocabularies (an Embedding table's rows) are padded to a multiple of t, as Megatron-LM pads
    // them; every other split dimension must divide.
    // The word embedding is the largest table; position and type embeddings stay whole (Megatron-LM).
    const Tensor* words = wordTable(g);
    const auto isVocabulary = [&](std::int64_t size) { return words != nullptr && size == words->shape[0]; };
    // One pass in node order. A normalization over the hidden (LayerNorm, RMSNorm, a decomposed
    // one's ReduceMean) cannot read a split tensor: the column-parallel MatMul that split it stays
    // whole instead (`whole`), and the pass runs again (BERT's MLM head transform, say).
    std::vector<char> split(g.tensorCount(), 0);
    std::vector<char> whole(g.nodeCount(), 0);
    bool anyWeight = false;
    const auto pass = [&]() -> std::int64_t { // a column MatMul to keep whole, or -1
        std::fill(split.begin(), split.end(), 0);
        std::vector<std::int64_t> origin(g.tensorCount(), -1); // the column MatMul a split tensor comes from
        plan.nodes.assign(g.nodeCount(), Shard::Replicated);
        for (const auto& n : g.nodes()) {
            std::int64_t from = -1;
            for (const auto id : n.inputs) {
                if (g.tensor(id).kind != TensorKind::Parameter && split[id.index()] != 0 && from < 0)
                    from = origin[id.index()];
            }
            const bool splitInput = std::any_of(n.inputs.begin(), n.inputs.end(),
                [&](TensorId id) { return g.tensor(id).kind != TensorKind::Parameter && split[id.index()] != 0; });
            if (splitInput && (n.op == OpType::LayerNorm || n.op == OpType::RMSNorm || n.op == OpType::ReduceMean)
                && from >= 0 && whole[static_cast<std::size_t>(from)] == 0)
                return from;
            const auto* weight = weightOf(g, n);
            auto& shard = plan.nodes[n.id.index()];
            bool splitOutput = splitInput;
            if (weight != nullptr && n.op == OpType::MatMul && !(whole[n.id.index()] != 0 && !splitInput)) {
                anyWeight = true;
                const bool transB = n.intAttr("trans_b", 0) != 0;
                const auto rows = weight->shape[transB ? 1 : 0];
                const auto columns = weight->shape[transB ? 0 : 1];
                shard = splitInput ? Shard::Row : Shard::Column;
                if (splitInput || !isVocabulary(columns))
                    requireDivides(splitInput ? rows : columns, t, n, splitInput ? "weight rows" : "weight columns");
                splitOutput = !splitInput;
                from = splitInput ? -1 : static_cast<std::int64_t>(n.id.index());
            } else if (weight != nullptr && n.op == OpType::Embedding && weight == words) {
                anyWeight = true;
                shard = Shard::Vocabulary;
                splitOutput = false;
            } else if (splitInput) {
                shard = Shard::Split;
                // Attention splits by whole heads: the Reshape of a split tensor into (heads, head
                // size), or a fused Attention's heads dimension.
                const auto& in = g.tensor(n.inputs.front()).shape;
                const auto& out = g.tensor(n.outputs.front()).shape;
                if (n.op == OpType::Reshape && out.size() == in.size() + 1 && out.size() >= 2
                    && out[out.size() - 2] * out.back() == in.back())
                    requireDivides(out[out.size() - 2], t, n, "attention heads");
                if (n.op == OpType::Attention && in.size() >= 4)
                    requireDivides(in[in.size() - 3], t, n, "attention heads");
                // The vocabulary-parallel cross-entropy reduces its split logits to a whole loss.
                splitOutput = n.op != OpType::CrossEntropy;
            }
            for (const auto id : n.outputs) {
                split[id.index()] = splitOutput ? 1 : 0;
                origin[id.index()] = splitOutput ? from : -1;
            }
        }
        return -1;
    };
    for (auto keep = pass(); keep >= 0; keep = pass())
        whole[static_cast<std::size_t>(keep)] = 1;
    requireWholeEnds(g, t, anyWeight, split);
    return plan;
}

Graph tensorParallelGraph(const Graph& g, const TensorParallelPlan& plan)
{
    if (plan.nodes.size() != g.nodeCount())
        throw Error("tensor parallel: the plan and the model disagree on the node count");
    std::vector<char> split(g.tensorCount(), 0);
    std::vector<int> splitDim(g.tensorCount(), -1);
    for (const auto& n : g.nodes()) {
        const auto shard = plan.nodes[n.id.index()];
        if (shard == Shard::Column || (shard == Shard::Split && n.op != OpType::CrossEntropy)) {
            for (const auto id : n.outputs) {
                split[id.index()] = 1;
                splitDim[id.index()] = static_cast<int>(g.tensor(id).shape.size()) - 1;
            }
        }
        if (shard == Shard::Split || shard == Shard::Column) { // a column-parallel bias, split with its output
            for (const auto id : n.inputs) {
                const auto& t = g.tensor(id);
                if (t.kind == TensorKind::Parameter && t.shape.size() == 1) {
                    split[id.index()] = 1;
                    splitDim[id.index()] = 0;
                }
            }
        }
        if (shard == Shard::Column || shard == Shard::Row || shard == Shard::Vocabulary) {
            if (const auto* w = weightOf(g, n)) {
                const bool transB = n.intAttr("trans_b", 0) != 0;
                split[w->id.index()] = 1;
                // (K, N), or (N, K) with trans_b; a table (V, C): columns N, rows K, rows V.
                splitDim[w->id.index()] = shard == Shard::Vocabulary ? 0
                    : shard == Shard::Column                         ? (transB ? 0 : 1)
                                                                     : (transB ? 1 : 0);
            }
        }
    }
    Graph out(g.info());
    for (const auto& t : g.tensors()) {
        auto copy = t;
        copy.data.reset();
        // Activations and biases split along their last dimension; weights along the dimension the
        // rule splits (splitDim), a vocabulary rounded up.
        const int dim = split[t.id.index()] == 0 ? -1 : splitDim[t.id.index()];
        if (dim >= 0 && static_cast<std::size_t>(dim) < copy.shape.size() && plan.size > 1) {
            auto& size = copy.shape[static_cast<std::size_t>(dim)];
            size = (size + plan.size - 1) / plan.size;
        }
        out.addTensor(std::move(copy));
    }
    for (const auto& n : g.nodes())
        out.addNode(n);
    out.setOutputs(g.outputs());
    return out;
}

namespace {

    // A ring all-reduce of `bytes` (a line in the micro-batch) as a line in the micro-batch.
    LinearModel allReduceNs(int t, const LinearModel& bytes, const LinkSpec& link)
    {
        if (t < 2)
            return {};
        // ringAllReduceSeconds's terms (scale/collectives.h): 2(t - 1) steps of latency, and
        // 2(t - 1) / t of the bytes over the link, linear in the micro-batch.
        const double share = 2.0 * (t - 1) / t / link.bandwidth;
        return { 1e9 * (2.0 * (t - 1) * link.latencySeconds + share * bytes.fixed), 1e9 * share * bytes.perSample };
    }

    LinearModel scaled(const LinearModel& m, double by)
    {
        return { m.fixed * by, m.perSample * by };
    }

    LinearModel plus(const LinearModel& a, const LinearModel& b)
    {
        return { a.fixed + b.fixed, a.perSample + b.perSample };
    }

} // namespace

Profile tensorParallelProfile(
    const Graph& g, const Profile& profile, const TensorParallelPlan& plan, const LinkSpec& link)
{
    if (plan.nodes.size() != g.nodeCount() || profile.nodes.size() != g.nodeCount())
        throw Error("tensor parallel: the plan, the profile and the model disagree on the node count");
    Profile out = profile;
    const double t = plan.size;
    if (plan.size < 2)
        return out;
    for (const auto& n : g.nodes()) {
        const auto shard = plan.nodes[n.id.index()];
        if (shard == Shard::Replicated)
            continue;
        const auto& whole = profile.nodes[n.id.index()];
        auto& p = out.nodes[n.id.index()];
        p.forwardNs = scaled(whole.forwardNs, 1 / t);
        p.backwardNs = scaled(whole.backwardNs, 1 / t);
        p.weightGradNs = scaled(whole.weightGradNs, 1 / t);
        p.savedBytes = scaled(whole.savedBytes, 1 / t);
        p.workspaceBytes = scaled(whole.workspaceBytes, 1 / t);
        if (shard == Shard::Column || shard == Shard::Split)
            p.outputBytes = scaled(whole.outputBytes, 1 / t);
        // Split weights, and a split node's bias (a column-parallel bias-add), a t-th (rounded up).
        if (shard != Shard::Replicated)
            p.parameterCount = (whole.parameterCount + plan.size - 1) / plan.size;
        if (shard == Shard::Row || shard == Shard::Vocabulary)
            p.forwardNs = plus(p.forwardNs, allReduceNs(plan.size, whole.outputBytes, link));
        if (shard == Shard::Column) {
            // The input's gradient, summed over the group: the input is the output's size times K / N.
            const auto* weight = weightOf(g, n);
            const bool transB = n.intAttr("trans_b", 0) != 0;
            const double ratio =
                static_cast<double>(weight->shape[transB ? 1 : 0]) / static_cast<double>(weight->shape[transB ? 0 : 1]);
            p.backwardNs = plus(p.backwardNs, allReduceNs(plan.size, scaled(whole.outputBytes, ratio), link));
        }
    }
    const auto note = plan.text() + " over " + link.kind;
    out.note = out.note.empty() ? note : out.note + "; " + note;
    return out;
}

} // namespace ps
