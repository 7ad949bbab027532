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
    // Walk the piecewise-constant segments from `start` until `bytes` have moved.
    double t = start;
    double remaining = bytes;
    for (int guard = 0; guard < 1'000'000; ++guard) {
        const double rate = fractionAt(t) * bandwidth;
        // End of the current segment: the next breakpoint after t (mod period).
        double next = std::numeric_limits<double>::infinity();
        const double base = periodSeconds > 0 ? std::floor(t / periodSeconds) * periodSeconds : 0.0;
        const double local = t - base;
        for (const auto& [time, f] : points) {
            if (time > local + 1e-15) {
                next = base + time;
                break;
            }
        }
        if (!std::isfinite(next) && periodSeconds > 0)
            next = base + periodSeconds + (points.front().first > 0 ? points.front().first : 0.0);
        if (rate > 0 && (remaining / rate <= next - t || !std::isfinite(next)))
            return t + remaining / rate;
        if (!std::isfinite(next))
            throw Error("bandwidth trace drops to zero forever: a transfer could never finish");
        remaining -= rate * (next - t);
        t = next;
    }
    throw Error("bandwidth trace: transfer did not finish (trace too fine-grained or near zero)");
}

void Cluster::check() const
{
    if (nodes < 1 || devicesPerNode < 1)
        throw Error("cluster: needs at least one node with one device");
    if (device.memoryBytes <= 0 || device.flopsFp32 <= 0 || device.memoryBandwidth <= 0)
        throw Error("cluster: device '" + device.id + "' has no memory, FLOP/s or bandwidth (not measured yet?)");
    checkLink(device.hostLink, "host");
    if (devicesPerNode > 1)
        checkLink(intraNode, "intra-node");
    if (nodes > 1)
        checkLink(interNode, "inter-node");
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
        { "inter_node", detail::linkToJson(c.interNode) }, { "host_memory_bytes", c.hostMemoryBytes } };
    if (c.intraTrace)
        j["intra_trace"] = detail::traceToJson(*c.intraTrace);
    if (c.interTrace)
        j["inter_trace"] = detail::traceToJson(*c.interTrace);
    return j.dump(2);
}

Cluster clusterFromJson(std::string_view json, const std::string& source)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("device"))
        throw Error(source + ": not a cluster description (expected an object with \"device\")");
    Cluster c;
    c.name = j.value("name", c.name);
    c.nodes = j.value("nodes", 1);
    c.devicesPerNode = j.value("devices_per_node", 8);
    const auto& device = j["device"];
    c.device = device.is_string() ? DeviceCatalog::builtin().find(device.get<std::string>())
                                  : detail::deviceFromJson(device, source);
    c.intraNode = j.contains("intra_node") ? detail::linkFromJson(j["intra_node"], source) : c.device.peerLink;
    if (j.contains("inter_node"))
        c.interNode = detail::linkFromJson(j["inter_node"], source);
    c.hostMemoryBytes = j.value("host_memory_bytes", c.hostMemoryBytes);
    if (j.contains("intra_trace"))
        c.intraTrace = detail::traceFromJson(j["intra_trace"], source + ": intra_trace");
    if (j.contains("inter_trace"))
        c.interTrace = detail::traceFromJson(j["inter_trace"], source + ": inter_trace");
    c.check();
    return c;
}

} // namespace ps
