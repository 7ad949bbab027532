#include "sim/shared_compute.h"

#include <algorithm>
#include <map>
#include <utility>

namespace ps::sim {

std::vector<int> coreGroups(int devices, int devicesPerNode, int cores)
{
    const int perNode = std::max(1, std::min(devices, devicesPerNode));
    if (cores <= 0 || perNode <= cores)
        return {};
    std::vector<int> groups;
    for (int d = 0; d < devices; ++d)
        groups.push_back((d / perNode) * cores + (d % perNode) % cores);
    return groups;
}

std::vector<double> sharingSlowdowns(const std::vector<ComputeSpan>& spans, const std::vector<int>& groups)
{
    const auto groupOf = [&](std::size_t device) { return device < groups.size() ? groups[device] : -1; };
    std::map<int, std::vector<std::size_t>> byGroup;
    for (std::size_t i = 0; i < spans.size(); ++i) {
        if (groupOf(spans[i].device) >= 0)
            byGroup[groupOf(spans[i].device)].push_back(i);
    }
    std::vector<double> slowdown(spans.size(), 1.0);
    for (const auto& [group, members] : byGroup) {
        // Concurrency changes only at span ends: sweep the group's boundaries once.
        std::vector<std::pair<double, int>> edges;
        for (const auto i : members) {
            if (spans[i].endNs > spans[i].startNs) {
                edges.emplace_back(spans[i].startNs, +1);
                edges.emplace_back(spans[i].endNs, -1);
            }
        }
        std::sort(edges.begin(), edges.end()); // at equal times ends (-1) come first
        std::vector<double> times; // segment k is [times[k], times[k + 1]) with `running[k]` spans
        std::vector<int> running;
        int n = 0;
        for (std::size_t e = 0; e < edges.size(); ++e) {
            n += edges[e].second;
            if (e + 1 < edges.size() && edges[e + 1].first == edges[e].first)
                continue;
            times.push_back(edges[e].first);
            running.push_back(n);
        }
        for (const auto i : members) {
            const auto& s = spans[i];
            const double length = s.endNs - s.startNs;
            if (length <= 0)
                continue;
            auto k = static_cast<std::size_t>(std::upper_bound(times.begin(), times.end(), s.startNs) - times.begin());
            k = k > 0 ? k - 1 : 0;
            double work = 0; // integral of 1/n over the span: the span's own work at full speed
            for (; k + 1 < times.size() && times[k] < s.endNs; ++k) {
                const double from = std::max(times[k], s.startNs);
                const double to = std::min(times[k + 1], s.endNs);
                if (to > from)
                    work += (to - from) / std::max(1, running[k]);
            }
            slowdown[i] = work > 0 ? std::max(1.0, length / work) : 1.0;
        }
    }
    return slowdown;
}

} // namespace ps::sim
