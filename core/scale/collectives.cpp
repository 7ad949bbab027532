#include "scale/collectives.h"

#include "util/error.h"

#include <algorithm>
#include <cmath>

namespace ps {

const std::vector<NodeSpec>& builtinNodes()
{
    static const std::vector<NodeSpec> nodes {
        { "dgx-a100-80gb", "NVIDIA DGX A100 80GB", "a100-80gb", 8, { "nvswitch-nvlink3", 300e9, 5e-6 }, 8,
            { "infiniband-hdr-200g", 25e9, 5e-6 } },
        { "dgx-h100", "NVIDIA DGX H100", "h100-80gb", 8, { "nvswitch-nvlink4", 450e9, 5e-6 }, 8,
            { "infiniband-ndr-400g", 50e9, 5e-6 } },
        { "pcie-workstation", "Workstation, 4 x RTX 4090 on PCIe 4.0", "rtx4090", 4, { "pcie4x16", 31.5e9, 10e-6 }, 1,
            { "ethernet-100g", 12.5e9, 10e-6 } },
    };
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
