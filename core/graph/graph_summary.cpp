#include "graph/graph_summary.h"

#include "graph/op_cost.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

namespace ps {
namespace {

    std::string scaled(double value, double base, const std::array<const char*, 5>& units, const char* sep)
    {
        std::size_t i = 0;
        while (i + 1 < units.size() && std::abs(value) >= base) {
            value /= base;
            ++i;
        }
        std::array<char, 64> buf {};
        std::snprintf(buf.data(), buf.size(), i == 0 ? "%.0f%s%s" : "%.2f%s%s", value, sep, units[i]);
        return buf.data();
    }

} // namespace

GraphSummary summarizeGraph(const Graph& graph)
{
    GraphSummary s;
    s.name = graph.info().name;
    s.family = graph.info().family;
    s.microBatch = std::max<std::int64_t>(1, graph.info().microBatch);
    s.nodeCount = graph.nodeCount();
    s.tensorCount = graph.tensorCount();
    s.parameterCount = graph.parameterCount();

    const auto costs = computeOpCosts(graph);
    std::map<std::string, std::int64_t> histogram;
    std::set<std::int32_t> layers;
    double fwd = 0;
    double bwd = 0;
    std::int64_t outputBytes = 0;
    for (const auto& n : graph.nodes()) {
        const auto& c = costs[n.id.index()];
        fwd += c.forwardFlops;
        bwd += c.backwardFlops;
        outputBytes += c.outputBytes;
        s.parameterBytes += c.parameterBytes;
        ++histogram[n.op == OpType::Opaque && !n.opaqueType.empty() ? n.opaqueType : std::string(toString(n.op))];
        if (n.layer != kNoLayer)
            layers.insert(n.layer);
    }
    const auto batch = static_cast<double>(s.microBatch);
    s.layerCount = static_cast<std::int32_t>(layers.size());
    s.forwardFlopsPerSample = fwd / batch;
    s.backwardFlopsPerSample = bwd / batch;
    s.activationBytesPerSample = savedActivationBytes(graph, costs) / s.microBatch;
    s.outputBytesPerSample = outputBytes / s.microBatch;
    s.opHistogram.assign(histogram.begin(), histogram.end());
    std::stable_sort(
        s.opHistogram.begin(), s.opHistogram.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return s;
}

std::string summaryToJson(const GraphSummary& s)
{
    nlohmann::ordered_json histogram = nlohmann::ordered_json::object();
    for (const auto& [op, count] : s.opHistogram)
        histogram[op] = count;
    const nlohmann::ordered_json j = {
        { "name", s.name },
        { "family", s.family },
        { "micro_batch", s.microBatch },
        { "nodes", s.nodeCount },
        { "tensors", s.tensorCount },
        { "layers", s.layerCount },
        { "parameters", s.parameterCount },
        { "parameter_bytes", s.parameterBytes },
        { "forward_flops_per_sample", s.forwardFlopsPerSample },
        { "backward_flops_per_sample", s.backwardFlopsPerSample },
        { "training_flops_per_sample", s.forwardFlopsPerSample + s.backwardFlopsPerSample },
        { "activation_bytes_per_sample", s.activationBytesPerSample },
        { "output_bytes_per_sample", s.outputBytesPerSample },
        { "op_histogram", histogram },
    };
    return j.dump(2);
}

std::string formatCount(double value)
{
    return scaled(value, 1000, { "", "K", "M", "B", "T" }, "");
}

std::string formatBytes(double bytes)
{
    return scaled(bytes, 1024, { "B", "KiB", "MiB", "GiB", "TiB" }, " ");
}

std::string formatFlops(double flops)
{
    return scaled(flops, 1000, { "FLOP", "KFLOP", "MFLOP", "GFLOP", "TFLOP" }, " ");
}

} // namespace ps
