// A cluster to plan for: nodes x devices of one catalog kind, the links between them and to the
// host, and optional bandwidth-over-time traces (a preempted network, as in Ada-Grouper §4.4).
// Editable as JSON and stored in the project. Depends on: cluster/device_catalog.h.
#pragma once

#include "cluster/device_catalog.h"
#include "ids.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ps {

// Piecewise-constant fraction of a link's bandwidth over time, optionally repeating.
struct BandwidthTrace
{
    std::vector<std::pair<double, double>> points; // (time s, fraction of nominal bandwidth), sorted by time
    double periodSeconds = 0; // > 0: the trace repeats with this period

    [[nodiscard]] double fractionAt(double timeSeconds) const;
    // When a transfer of `bytes` started at `start` over a link of `bandwidth` ends. Throws when
    // the trace leaves the link at zero bandwidth forever.
    [[nodiscard]] double transferEnd(double start, double bytes, double bandwidth) const;
    bool operator==(const BandwidthTrace&) const = default;
};

struct Cluster
{
    std::string name = "cluster";
    int nodes = 1;
    int devicesPerNode = 8;
    DeviceSpec device; // every device is of this kind
    LinkSpec intraNode; // between devices of one node (default: the device's peer link)
    LinkSpec interNode { "ethernet-100g", 12.5e9, 5e-6 }; // one NIC
    // NICs per node, each `interNode` wide: device i of a node sends to another node over NIC
    // i mod nicsPerNode (rail-aligned, as NCCL pairs GPUs with their nearest NIC), so up to
    // nicsPerNode transfers leave a node at once at full bandwidth.
    int nicsPerNode = 1;
    std::int64_t hostMemoryBytes = 512LL << 30; // per node
    std::optional<BandwidthTrace> intraTrace;
    std::optional<BandwidthTrace> interTrace;

    [[nodiscard]] int deviceCount() const
    {
        return nodes * devicesPerNode;
    }
    [[nodiscard]] int nodeOf(DeviceId deviceId) const
    {
        return static_cast<int>(deviceId.value) / devicesPerNode;
    }
    // Throws ps::Error naming the field (zero bandwidth, no devices, ...).
    void check() const;
    bool operator==(const Cluster&) const = default;
};

// `devices` devices of catalog kind `deviceId`, filled node by node (8 per node by default).
[[nodiscard]] Cluster makeCluster(const DeviceSpec& device, int devices, int devicesPerNode = 8);

[[nodiscard]] std::string clusterToJson(const Cluster& cluster);
[[nodiscard]] Cluster clusterFromJson(std::string_view json, const std::string& source);

} // namespace ps
