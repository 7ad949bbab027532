#include "sim/tied_exchange.h"

namespace ps::sim {
namespace {

    // Streaming `traffic` bytes over arrays of `footprint` bytes: at the cache's rate where they fit.
    double streamNs(const DeviceSpec& d, double traffic, double footprint)
    {
        const bool cached = d.cacheBytes > 0 && d.cacheBandwidth > 0 && footprint <= static_cast<double>(d.cacheBytes);
        const double rate = cached ? d.cacheBandwidth : d.memoryBandwidth;
        return rate > 0 ? 1e9 * traffic / rate : 0;
    }

} // namespace

bool memoryIsHosts(const DeviceSpec& device)
{
    return device.hostLink.kind == "memory";
}

double tiedLinkNs(const DeviceSpec& device, const LinkSpec& link, double gradientBytes)
{
    if (memoryIsHosts(device) || link.bandwidth <= 0)
        return 0;
    return 1e9 * (2 * link.latencySeconds + 2 * gradientBytes / link.bandwidth);
}

double tiedHandInNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied)
{
    if (!memoryIsHosts(device))
        return 0;
    double ns = 0;
    for (const auto& t : tied)
        ns += streamNs(device, 2 * t.gradientBytes, 2 * t.gradientBytes);
    return ns;
}

double tiedSumNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied,
    const std::map<std::uint32_t, std::vector<std::size_t>>& holders)
{
    if (!memoryIsHosts(device))
        return 0;
    double ns = 0;
    for (const auto& t : tied) {
        const auto it = holders.find(t.tensor);
        if (it == holders.end() || it->second.size() < 2)
            continue;
        const double others = static_cast<double>(it->second.size() - 1);
        ns += others * streamNs(device, 3 * t.gradientBytes, 2 * t.gradientBytes);
    }
    return ns;
}

} // namespace ps::sim
