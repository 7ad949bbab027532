#include "scale/collectives.h"

#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace ps {

namespace detail {
    extern const std::string_view kBuiltinDeviceCatalog;
} // namespace detail

namespace {

    LinkSpec nodeLink(const nlohmann::json& j, const std::string& at)
    {
        LinkSpec link { j.at("kind").get<std::string>(), j.at("bandwidth").get<double>(), j.value("latency", 0.0) };
        if (!(link.bandwidth > 0) || !std::isfinite(link.bandwidth) || !(link.latencySeconds >= 0)
            || !std::isfinite(link.latencySeconds))
            throw Error(at + ": a link needs a positive, finite bandwidth and a latency >= 0");
        return link;
    }

} // namespace

std::vector<NodeSpec> nodesFromJson(std::string_view json, const std::string& source, const DeviceCatalog& devices)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("nodes") || !j["nodes"].is_array())
        throw Error(source + ": no node kinds (expected {\"nodes\": [...]})");
    std::vector<NodeSpec> nodes;
    for (const auto& n : j["nodes"]) {
        const auto at = source + ": node '"
            + (n.is_object() && n.contains("id") && n["id"].is_string() ? n["id"].get<std::string>() : "?") + "'";
        // A count in JSON: a whole number in 1..limit, not a float cast into an int.
        const auto count = [&](const char* key, int limit) {
            const auto& v = n.at(key);
            if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > limit)
                throw Error(at + ": " + key + " must be a whole number from 1 to " + std::to_string(limit));
            return static_cast<int>(v.get<std::int64_t>());
        };
        try {
            NodeSpec spec;
            spec.id = n.at("id").get<std::string>();
            spec.name = n.value("name", spec.id);
            spec.deviceId = n.at("device").get<std::string>();
            try {
                (void)devices.find(spec.deviceId);
            } catch (const Error& e) {
                throw Error(at + ": " + e.what());
            }
            spec.gpus = count("gpus", 1 << 16);
            spec.intra = nodeLink(n.at("intra"), at);
            spec.nics = count("nics", 1 << 10);
            spec.nic = nodeLink(n.at("nic"), at);
            nodes.push_back(std::move(spec));
        } catch (const nlohmann::json::exception& e) { // a missing field, or one of the wrong type
            throw Error(at + ": " + e.what());
        }
    }
    return nodes;
}

const std::vector<NodeSpec>& builtinNodes()
{
    static const auto nodes =
        nodesFromJson(detail::kBuiltinDeviceCatalog, "built-in device catalog", DeviceCatalog::builtin());
    return nodes;
}

const NodeSpec& findNode(std::string_view id)
{
    std::string known;
    for (const auto& n : builtinNodes()) {
        if (n.id == id)
            return n;
        known += (known.empty() ? "" : ", ") + n.id;
    }
    throw Error("unknown node kind '" + std::string(id) + "' (known: " + known + ")");
}

double ringAllReduceSeconds(int n, double bytes, const LinkSpec& link)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return 2.0 * (n - 1) * link.latencySeconds + 2.0 * (n - 1) / n * bytes / link.bandwidth;
}

double reduceScatterSeconds(int n, double bytes, const LinkSpec& link)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return (n - 1) * link.latencySeconds + static_cast<double>(n - 1) / n * bytes / link.bandwidth;
}

double allGatherSeconds(int n, double bytes, const LinkSpec& link)
{
    return reduceScatterSeconds(n, bytes, link);
}

double treeAllReduceSeconds(int n, double bytes, const LinkSpec& link)
{
    if (n <= 1 || bytes <= 0)
        return 0;
    return 2.0 * std::ceil(std::log2(n)) * link.latencySeconds + 2.0 * bytes / link.bandwidth;
}

double pointToPointSeconds(double bytes, const LinkSpec& link)
{
    return bytes <= 0 ? 0 : link.latencySeconds + bytes / link.bandwidth;
}

LinkSpec nicShare(const NodeSpec& node, int sharing)
{
    auto link = node.nic;
    link.bandwidth = node.nic.bandwidth * node.nics / std::max(1, sharing);
    return link;
}

double allReduceSeconds(const CommGroup& group, double bytes, const NodeSpec& node)
{
    if (group.nodes <= 1)
        return ringAllReduceSeconds(group.perNode, bytes, node.intra);
    // Every GPU of a node all-reduces at once in data-parallel training (its own group's shard, or
    // the other tensor-parallel ranks' groups), so each gets 1/gpus of the node's NICs.
    const double shard = bytes / group.perNode;
    const auto nic = nicShare(node, node.gpus);
    return reduceScatterSeconds(group.perNode, bytes, node.intra)
        + std::min(ringAllReduceSeconds(group.nodes, shard, nic), treeAllReduceSeconds(group.nodes, shard, nic))
        + allGatherSeconds(group.perNode, bytes, node.intra);
}

} // namespace ps
