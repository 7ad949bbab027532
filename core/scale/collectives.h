// Collective communication costs on a cluster of nodes (issue P17, deliverable 1): nodes of G GPUs
// joined inside by one switched link (NVSwitch, or PCIe on a workstation) and to each other by the
// node's NICs. Each formula is the bandwidth term of NCCL's algorithm plus a latency per step:
//   ring all-reduce over n GPUs: 2(n-1) steps, each moving bytes/n: 2(n-1)/n x bytes / bandwidth;
//   reduce-scatter and all-gather: half of that, (n-1)/n x bytes / bandwidth;
//   tree all-reduce (NCCL's double binary tree): 2 log2(n) steps, 2 x bytes / bandwidth (each tree
//   carries half the data up and down);
//   point-to-point: bytes / bandwidth.
// A group spanning several nodes all-reduces hierarchically (NCCL's and Megatron's layout): a
// reduce-scatter inside each node, an all-reduce of each GPU's 1/g shard across the nodes over the
// node's NICs, an all-gather inside each node.
// Depends on: cluster/device_catalog.h (LinkSpec).
#pragma once

#include "cluster/device_catalog.h"

#include <string>
#include <string_view>
#include <vector>

namespace ps {

// A node kind: its GPUs and links. Values are the vendors' datasheets (one direction per GPU).
struct NodeSpec
{
    std::string id; // "dgx-a100-80gb"
    std::string name;
    std::string deviceId; // catalog device of its GPUs
    int gpus = 8;
    LinkSpec intra; // per GPU into the node's switch (NVSwitch) or bus
    int nics = 1; // inter-node NICs per node
    LinkSpec nic; // one NIC
};

// The catalog's node kinds (resources/catalog/devices.json, "nodes", each with its source): DGX A100
// 80GB (8 x A100, NVSwitch at 300 GB/s per GPU each way, 8 x 200 Gb/s HDR InfiniBand), DGX H100
// (8 x H100, 450 GB/s, 8 x 400 Gb/s NDR) and a PCIe workstation (4 x RTX 4090 on PCIe 4.0 x16,
// one 100 GbE NIC).
[[nodiscard]] const std::vector<NodeSpec>& builtinNodes();
// Node kinds from a catalog's JSON ({"nodes": [{"id", "name", "device", "gpus", "intra": {"kind",
// "bandwidth", "latency"}, "nics", "nic": {...}}]}), each GPU a device of `devices`. Throws ps::Error
// naming `source` and the node for a missing field, an unknown device, a non-positive bandwidth or
// no GPU or NIC.
[[nodiscard]] std::vector<NodeSpec> nodesFromJson(
    std::string_view json, const std::string& source, const DeviceCatalog& devices);
// Throws ps::Error listing the known ids.
[[nodiscard]] const NodeSpec& findNode(std::string_view id);

// Which GPUs a collective spans: `perNode` of them in each of `nodes` nodes.
struct CommGroup
{
    int perNode = 1;
    int nodes = 1;
    [[nodiscard]] int size() const
    {
        return perNode * nodes;
    }
};

// Seconds for the collective over one link kind (n GPUs, `bytes` per GPU's buffer).
[[nodiscard]] double ringAllReduceSeconds(int n, double bytes, const LinkSpec& link);
[[nodiscard]] double reduceScatterSeconds(int n, double bytes, const LinkSpec& link);
[[nodiscard]] double allGatherSeconds(int n, double bytes, const LinkSpec& link);
[[nodiscard]] double treeAllReduceSeconds(int n, double bytes, const LinkSpec& link);
[[nodiscard]] double pointToPointSeconds(double bytes, const LinkSpec& link);

// The link a GPU's share of its node's NICs gives it when `sharing` GPUs of the node send at once.
[[nodiscard]] LinkSpec nicShare(const NodeSpec& node, int sharing);
// All-reduce over `group` on `node`s: a ring inside one node, hierarchical across nodes (the
// cross-node part the faster of ring and tree, over 1/gpus of the node's NICs: every GPU of a node
// all-reduces at the same time in data-parallel training).
[[nodiscard]] double allReduceSeconds(const CommGroup& group, double bytes, const NodeSpec& node);

} // namespace ps
