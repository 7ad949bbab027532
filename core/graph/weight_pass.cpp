// Zero-bubble's W pass in the memory model: the output gradients a split B holds for it, and what
// it holds beyond them as it runs (op_cost.h).

#include "graph/op_cost.h"
#include "graph/tensor_scratch.h"

#include <algorithm>

namespace ps {

using detail::TensorScratch;

namespace {

    // The storage of t's gradient in a backward over [begin, end): follow single readers that pass
    // their output gradient through (Reshape's view; Add, BiasAdd and Sub's first operand of the
    // output's shape).
    TensorId gradientRoot(const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end, TensorId t)
    {
        while (
            flow.readers[t.index()] == 1 && flow.lastReader[t.index()] > begin && flow.lastReader[t.index()] <= end) {
            const auto& reader = graph.nodes()[flow.lastReader[t.index()] - 1];
            const bool passes = reader.op == OpType::Reshape
                || ((reader.op == OpType::Add || reader.op == OpType::BiasAdd
                        || (reader.op == OpType::Sub && reader.inputs[0] == t))
                    && graph.tensor(t).shape == graph.tensor(reader.outputs[0]).shape);
            if (!passes)
                break;
            t = reader.outputs[0];
        }
        return t;
    }

    // Keeps the points of `points`, in W's order (what was freed never decreasing), that no
    // earlier point outdoes: one with as little freed and as many fixed bytes.
    std::vector<WorkingProfile::Point> frontier(const std::vector<WorkingProfile::Point>& points)
    {
        std::vector<WorkingProfile::Point> kept;
        for (const auto& p : points) {
            if (kept.empty() || p.fixed > kept.back().fixed)
                kept.push_back(p);
        }
        return kept;
    }

} // namespace

std::int64_t weightGradHeldBytes(const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end)
{
    TensorScratch held(0, graph.tensorCount());
    std::int64_t bytes = 0;
    for (std::size_t n = begin; n < end; ++n) {
        if (flow.trains[n] == 0)
            continue;
        for (auto out : graph.nodes()[n].outputs) {
            const auto root = gradientRoot(graph, flow, begin, end, out);
            if (held.insert(root, 1))
                bytes += flow.bytes[root.index()];
        }
    }
    return bytes;
}

std::int64_t weightPassWorkingBytes(const GradientFlow& flow, std::size_t begin, std::size_t end, bool scratch)
{
    std::int64_t most = 0;
    for (std::size_t n = begin; n < end; ++n)
        most = std::max(most, flow.weightPassBytes[n] + (scratch ? flow.weightPassScratch[n] : 0));
    return most;
}

WorkingProfile weightPassProfile(const Graph& graph, const GradientFlow& flow, std::size_t begin, std::size_t end)
{
    // W runs the range's training nodes last first; a storage it keeps (a weight-gradient input, a
    // held output gradient) goes once the last of them that reads it is done: its lowest-indexed reader.
    TensorScratch lastReader(0, graph.tensorCount());
    const auto rootsOf = [&](std::size_t n, auto&& visit) {
        for (auto root : flow.weightGradRoots[n])
            visit(root);
        for (auto out : graph.nodes()[n].outputs)
            visit(gradientRoot(graph, flow, begin, end, out));
    };
    for (std::size_t n = begin; n < end; ++n) {
        if (flow.trains[n] != 0)
            rootsOf(n, [&](TensorId root) { lastReader.insert(root, n); });
    }
    TensorScratch freedRoots(1, graph.tensorCount());
    std::int64_t freed = 0;
    std::vector<WorkingProfile::Point> withoutScratch;
    std::vector<WorkingProfile::Point> withScratch;
    for (std::size_t n = end; n-- > begin;) {
        if (flow.trains[n] == 0)
            continue;
        withoutScratch.push_back({ -freed, flow.weightPassBytes[n] });
        withScratch.push_back({ -freed, flow.weightPassBytes[n] + flow.weightPassScratch[n] });
        freed += flow.savedExtraBytes[n];
        rootsOf(n, [&](TensorId root) {
            if (lastReader.at(root) == n && freedRoots.insert(root, 1))
                freed += flow.bytes[root.index()];
        });
    }
    WorkingProfile profile;
    profile.withoutScratch = frontier(withoutScratch);
    profile.withScratch = frontier(withScratch);
    return profile;
}

} // namespace ps
