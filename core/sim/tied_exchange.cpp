#include "sim/tied_exchange.h"

namespace ps::sim {
namespace {

    bool memoryIsHosts(const DeviceSpec& d)
    {
        return d.hostLink.kind == "memory";
    }

    // Streaming `traffic` bytes over arrays of `footprint` bytes: at the cache's rate where they fit.
    double streamNs(const DeviceSpec& d, double traffic, double footprint)
    {
        const bool cached = d.cacheBytes > 0 && d.cacheBandwidth > 0 && footprint <= static_cast<double>(d.cacheBytes);
        const double rate = cached ? d.cacheBandwidth : d.memoryBandwidth;
        return rate > 0 ? 1e9 * traffic / rate : 0;
    }

} // namespace

double hostCopyNs(const DeviceSpec& device, double bytes)
{
    if (memoryIsHosts(device))
        return streamNs(device, 2 * bytes, 2 * bytes);
    return device.hostLink.bandwidth > 0
        ? 1e9 * bytes / device.hostLink.bandwidth + 1e9 * device.hostLink.latencySeconds
        : 0;
}

double tiedHandInNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied)
{
    double ns = 0;
    for (const auto& t : tied)
        ns += hostCopyNs(device, t.gradientBytes);
    return ns;
}

double tiedSumNs(const DeviceSpec& device, const std::vector<TiedParameter>& tied,
    const std::map<std::uint32_t, std::vector<std::size_t>>& holders)
{
    double ns = 0;
    for (const auto& t : tied) {
        const auto it = holders.find(t.tensor);
        if (it == holders.end() || it->second.size() < 2)
            continue;
        const double others = static_cast<double>(it->second.size() - 1);
        const double upload = memoryIsHosts(device) ? 0 : hostCopyNs(device, t.gradientBytes);
        ns += others * (upload + streamNs(device, 3 * t.gradientBytes, 2 * t.gradientBytes));
    }
    return ns;
}

} // namespace ps::sim
