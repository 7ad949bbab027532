#include "cupti/activity.h"

#include "util/error.h"

#include <algorithm>
#include <tuple>
#include <unordered_map>

namespace ps::profiler::cupti {

double unionLength(std::vector<std::pair<std::uint64_t, std::uint64_t>> intervals)
{
    std::sort(intervals.begin(), intervals.end());
    double total = 0;
    std::uint64_t start = 0;
    std::uint64_t end = 0;
    bool open = false;
    for (const auto& [s, e] : intervals) {
        if (e <= s)
            continue; // a record with no duration (or a corrupt one) adds nothing
        if (open && s <= end) {
            end = std::max(end, e);
            continue;
        }
        if (open)
            total += static_cast<double>(end - start);
        start = s;
        end = e;
        open = true;
    }
    if (open)
        total += static_cast<double>(end - start);
    return total;
}

Attribution attribute(std::size_t nodeCount, const ActivityBatch& batch, const std::vector<NodeLaunch>& launches)
{
    std::unordered_map<std::uint64_t, const NodeLaunch*> byExternal;
    for (const auto& l : launches) {
        if (l.node >= nodeCount)
            throw Error("CUPTI attribution: external id " + std::to_string(l.externalId) + " names node "
                + std::to_string(l.node) + " of a graph with " + std::to_string(nodeCount) + " nodes");
        if (!byExternal.emplace(l.externalId, &l).second)
            throw Error("CUPTI attribution: external id " + std::to_string(l.externalId) + " pushed twice");
    }
    std::unordered_map<std::uint32_t, std::uint64_t> external;
    for (const auto& c : batch.correlations)
        external[c.correlationId] = c.externalId;

    // (node, pass, repeat) -> intervals; memcpys by (node, repeat).
    using Intervals = std::vector<std::pair<std::uint64_t, std::uint64_t>>;
    std::map<std::tuple<std::size_t, int, int>, Intervals> compute;
    std::map<std::pair<std::size_t, int>, Intervals> copies;
    Attribution a;
    a.nodes.resize(nodeCount);
    a.droppedRecords = batch.droppedRecords;
    for (const auto& r : batch.activities) {
        const auto c = external.find(r.correlationId);
        const auto l = c == external.end() ? byExternal.end() : byExternal.find(c->second);
        if (l == byExternal.end()) {
            ++a.unattributedRecords;
            a.unattributedNs += r.endNs > r.startNs ? static_cast<double>(r.endNs - r.startNs) : 0.0;
            continue;
        }
        const auto& launch = *l->second;
        if (r.kind == ActivityKind::Memcpy) {
            copies[{ launch.node, launch.repeat }].emplace_back(r.startNs, r.endNs);
            continue;
        }
        if (r.kind == ActivityKind::Kernel)
            ++a.nodes[launch.node].kernels;
        compute[{ launch.node, static_cast<int>(launch.pass), launch.repeat }].emplace_back(r.startNs, r.endNs);
    }
    for (auto& [key, intervals] : compute) {
        const auto [node, pass, repeat] = key;
        auto& samples = pass == static_cast<int>(Pass::Forward) ? a.nodes[node].forwardNs : a.nodes[node].backwardNs;
        samples.push_back(unionLength(std::move(intervals)));
    }
    for (auto& [key, intervals] : copies)
        a.nodes[key.first].copyNs.push_back(unionLength(std::move(intervals)));
    if (batch.droppedRecords > 0)
        a.warnings.push_back("CUPTI dropped " + std::to_string(batch.droppedRecords)
            + " activity records (buffers full): node times are incomplete; profile again with fewer repeats");
    if (a.unattributedRecords > 0)
        a.warnings.push_back(std::to_string(a.unattributedRecords) + " device activities ("
            + std::to_string(a.unattributedNs / 1e6) + " ms) belong to no node launch");
    return a;
}

ClockMap alignClocks(const std::vector<std::pair<std::uint64_t, double>>& pairs)
{
    if (pairs.empty())
        throw Error("CUPTI clock alignment needs at least one (GPU, host) timestamp pair");
    ClockMap map;
    map.gpuOrigin = pairs.front().first;
    const auto x = [&map](std::uint64_t g) {
        return g >= map.gpuOrigin ? static_cast<double>(g - map.gpuOrigin) : -static_cast<double>(map.gpuOrigin - g);
    };
    const double n = static_cast<double>(pairs.size());
    double mx = 0;
    double my = 0;
    for (const auto& [g, h] : pairs) {
        mx += x(g) / n;
        my += h / n;
    }
    double sxx = 0;
    double sxy = 0;
    for (const auto& [g, h] : pairs) {
        sxx += (x(g) - mx) * (x(g) - mx);
        sxy += (x(g) - mx) * (h - my);
    }
    map.scale = sxx > 0 ? sxy / sxx : 1.0;
    map.hostAtOrigin = my - map.scale * mx;
    return map;
}

CpuProfileRun toProfileRun(
    const Attribution& attribution, std::int64_t microBatch, const std::vector<NodeMeasurement>& memory)
{
    CpuProfileRun run;
    run.microBatch = microBatch;
    run.nodes.resize(attribution.nodes.size());
    for (std::size_t i = 0; i < attribution.nodes.size(); ++i) {
        const auto& t = attribution.nodes[i];
        auto& m = run.nodes[i];
        if (i < memory.size())
            m = memory[i];
        m.forwardNs = t.forwardNs.empty() ? SampleStats {} : summarizeSamples(t.forwardNs);
        m.backwardNs = t.backwardNs.empty() ? SampleStats {} : summarizeSamples(t.backwardNs);
        run.nodeSumNs += m.forwardNs.median + (m.backwardNs.count > 0 ? m.backwardNs.median : 0.0);
    }
    return run;
}

Profile toCudaProfile(
    const Graph& graph, const CpuProfileRun& a, const CpuProfileRun& b, const std::string& deviceKind, Precision gemm)
{
    auto p = toProfile(graph, a, b);
    p.deviceKind = deviceKind;
    p.source = measuredCudaSource(gemm);
    return p;
}

} // namespace ps::profiler::cupti
