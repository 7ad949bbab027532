#include "cluster/cluster.h"

#include "cluster/json_detail.h"
#include "util/error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ps {
namespace detail {

    nlohmann::ordered_json traceToJson(const BandwidthTrace& trace)
    {
        return { { "points", trace.points }, { "period", trace.periodSeconds } };
    }

    BandwidthTrace traceFromJson(const nlohmann::json& j, const std::string& where)
    {
        BandwidthTrace t;
        t.periodSeconds = j.value("period", 0.0);
        t.points = j.value("points", std::vector<std::pair<double, double>> {});
        if (t.points.empty())
            throw Error(where + ": a bandwidth trace needs at least one [time, fraction] point");
        if (!std::is_sorted(t.points.begin(), t.points.end()))
            throw Error(where + ": bandwidth trace points must be sorted by time");
        return t;
    }

} // namespace detail
namespace {

    void checkLink(const LinkSpec& link, const std::string& what)
    {
        if (!(link.bandwidth > 0) || !std::isfinite(link.bandwidth))
            throw Error("cluster: " + what + " link '" + link.kind + "' has zero or invalid bandwidth");
        if (link.latencySeconds < 0)
            throw Error("cluster: " + what + " link has a negative latency");
    }

} // namespace

double BandwidthTrace::fractionAt(double t) const
{
    if (points.empty())
        return 1.0;
    if (periodSeconds > 0)
        t = std::fmod(t, periodSeconds);
    double fraction = points.front().second;
    for (const auto& [time, f] : points) {
        if (time > t)
            break;
        fraction = f;
    }
    return fraction;
}

double BandwidthTrace::transferEnd(double start, double bytes, double bandwidth) const
{
    if (points.empty())
        return start + bytes / bandwidth;
    // Time is kept as (period index, offset inside the period) so that far into a periodic trace
    // the offset keeps its precision; a non-periodic trace is one endless "period". Segment i runs
    // from points[i] (from 0 for the first) to points[i + 1] (the period's end for the last).
    const bool periodic = periodSeconds > 0;
    double k = periodic ? std::floor(start / periodSeconds) : 0;
    double local = periodic ? start - k * periodSeconds : start;
    if (periodic && local >= periodSeconds) {
        k += 1;
        local -= periodSeconds;
    }
    local = std::max(local, 0.0);
    const double periodEnd = periodic ? periodSeconds : std::numeric_limits<double>::infinity();
    double perPeriodBytes = 0; // what one whole period moves
    for (std::size_t i = 0; periodic && i < points.size(); ++i) {
        const double end = i + 1 < points.size() ? points[i + 1].first : periodSeconds;
        perPeriodBytes += points[i].second * bandwidth * std::max(0.0, end - (i == 0 ? 0.0 : points[i].first));
    }
    if (periodic && !(perPeriodBytes > 0))
        throw Error("bandwidth trace drops to zero forever: a transfer could never finish");
    double remaining = bytes;
    for (;;) {
        if (periodic && local == 0 && remaining > 2 * perPeriodBytes) { // skip whole periods at once
            const double whole = std::floor(remaining / perPeriodBytes) - 1;
            k += whole;
            remaining -= whole * perPeriodBytes;
        }
        std::size_t segment = 0;
        while (segment + 1 < points.size() && points[segment + 1].first <= local)
            ++segment;
        const double end = segment + 1 < points.size() ? points[segment + 1].first : periodEnd;
        const double rate = points[segment].second * bandwidth;
        if (rate > 0 && remaining <= rate * (end - local))
            return k * periodSeconds + local + remaining / rate;
        if (!std::isfinite(end))
            throw Error("bandwidth trace drops to zero forever: a transfer could never finish");
        remaining -= rate * (end - local);
        local = end;
        if (periodic && local >= periodSeconds) {
            k += 1;
            local = 0;
        }
    }
}

void Cluster::check() const
{
    if (nodes < 1 || devicesPerNode < 1)
        throw Error("cluster: needs at least one node with one device");
    // deviceCount() is an int product; far above any cluster PipeStudio plans for.
    if (static_cast<std::int64_t>(nodes) * devicesPerNode > (1 << 20))
        throw Error("cluster: more than 1048576 devices (nodes x devices_per_node)");
    if (device.memoryBytes <= 0 || device.flopsFp32 <= 0 || device.memoryBandwidth <= 0)
        throw Error("cluster: device '" + device.id + "' has no memory, FLOP/s or bandwidth (not measured yet?)");
    checkLink(device.hostLink, "host");
    if (devicesPerNode > 1)
        checkLink(intraNode, "intra-node");
    if (nodes > 1)
        checkLink(interNode, "inter-node");
    if (nicsPerNode < 1 || nicsPerNode > 1024)
        throw Error("cluster: nics_per_node must be 1 to 1024, got " + std::to_string(nicsPerNode));
}

Cluster makeCluster(const DeviceSpec& device, int devices, int devicesPerNode)
{
    if (devices < 1)
        throw Error("cluster: needs at least one device, got " + std::to_string(devices));
    Cluster c;
    c.device = device;
    c.devicesPerNode = std::min(devices, std::max(1, devicesPerNode));
    c.nodes = (devices + c.devicesPerNode - 1) / c.devicesPerNode;
    c.intraNode = device.peerLink;
    c.name = std::to_string(devices) + " x " + device.id;
    return c;
}

std::string clusterToJson(const Cluster& c)
{
    nlohmann::ordered_json j = { { "name", c.name }, { "nodes", c.nodes }, { "devices_per_node", c.devicesPerNode },
        { "device", detail::deviceToJson(c.device) }, { "intra_node", detail::linkToJson(c.intraNode) },
        { "inter_node", detail::linkToJson(c.interNode) }, { "nics_per_node", c.nicsPerNode },
        { "host_memory_bytes", c.hostMemoryBytes } };
    if (c.intraTrace)
        j["intra_trace"] = detail::traceToJson(*c.intraTrace);
    if (c.interTrace)
        j["inter_trace"] = detail::traceToJson(*c.interTrace);
    return j.dump(2);
}

namespace {

    Cluster clusterFromObject(const nlohmann::json& j, const std::string& source)
    {
        Cluster c;
        c.name = j.value("name", c.name);
        c.nodes = detail::integerValue(j, "nodes", 1, source);
        c.devicesPerNode = detail::integerValue(j, "devices_per_node", 8, source);
        const auto& device = j["device"];
        c.device = device.is_string() ? DeviceCatalog::builtin().find(device.get<std::string>())
                                      : detail::deviceFromJson(device, source);
        c.intraNode = j.contains("intra_node") ? detail::linkFromJson(j["intra_node"], source) : c.device.peerLink;
        if (j.contains("inter_node"))
            c.interNode = detail::linkFromJson(j["inter_node"], source);
        c.nicsPerNode = detail::integerValue(j, "nics_per_node", 1, source);
        c.hostMemoryBytes = detail::integerValue(j, "host_memory_bytes", c.hostMemoryBytes, source);
        if (j.contains("intra_trace"))
            c.intraTrace = detail::traceFromJson(j["intra_trace"], source + ": intra_trace");
        if (j.contains("inter_trace"))
            c.interTrace = detail::traceFromJson(j["inter_trace"], source + ": inter_trace");
        return c;
    }

} // namespace

Cluster clusterFromJson(std::string_view json, const std::string& source)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("device"))
        throw Error(source + ": not a cluster description (expected an object with \"device\")");
    Cluster c;
    try {
        c = clusterFromObject(j, source);
    } catch (const nlohmann::json::exception& e) { // a field of the wrong type ("nodes": "two")
        throw Error(source + ": " + e.what());
    }
    c.check();
    return c;
}

} // namespace ps
