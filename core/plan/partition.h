// A pipeline partition: contiguous ranges of the node order, one per stage, and what each stage
// costs (time, activation memory, parameters, bytes crossing its boundaries) under a profile.
//
// The node order is the graph's own unless the partition records one. FTPipe's Mixed-pipe
// (§4.1) assigns any node to any stage as long as the stages form an acyclic graph; such a
// partition is contiguous in a topological order that puts each stage's nodes together, so it is
// recorded as that order plus the usual ranges, and its stages send to every consumer stage
// directly instead of relaying through the stages in between (FTPipe §4 "dataflow").
// Depends on: graph/, cost/profile.h.
#pragma once

#include "cost/profile.h"
#include "graph/graph.h"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

struct Partition
{
    std::vector<std::size_t> stageStarts; // first position in the node order of each stage; [0] == 0
    // Mixed-pipe: the topological order the ranges cut (a permutation of the graph's nodes).
    // Empty: the graph's node order, stages relay tensors along the chain.
    std::vector<NodeId> nodeOrder {};

    // A dataflow partition: cut over its own order, stages send to their consumers directly.
    [[nodiscard]] bool dataflow() const
    {
        return !nodeOrder.empty();
    }

    [[nodiscard]] int stageCount() const
    {
        return static_cast<int>(stageStarts.size());
    }
    [[nodiscard]] std::size_t stageBegin(StageId s) const
    {
        return stageStarts[s.index()];
    }
    [[nodiscard]] std::size_t stageEnd(StageId s, std::size_t nodeCount) const
    {
        return s.index() + 1 < stageStarts.size() ? stageStarts[s.index() + 1] : nodeCount;
    }
    // The cut list as a user writes it: "12,24,36" (first node of stages 1..S-1).
    [[nodiscard]] std::string cutsText() const;
    bool operator==(const Partition&) const = default;
};

// Parses "12,24,36" for `stages` stages over `nodeCount` nodes; throws ps::Error explaining why a
// cut list is impossible (wrong count, not increasing, an empty stage, out of range).
[[nodiscard]] Partition partitionFromCuts(std::string_view cuts, std::size_t nodeCount, int stages);
void checkPartition(const Partition& partition, std::size_t nodeCount);
// Contiguous stages with forward+backward time as equal as a greedy prefix split gets.
[[nodiscard]] Partition computeBalancedPartition(const std::vector<double>& nodeCost, int stages);
// By node id (through the partition's node order when it has one).
[[nodiscard]] std::vector<StageId> stageOfNodes(const Partition& partition, std::size_t nodeCount);
// The graph with its nodes renumbered in `order` (a topological permutation; tensor ids kept),
// and a profile to match: a dataflow partition is a plain contiguous one over these. Throws
// ps::Error naming the node when `order` is not a permutation or puts a node before its input.
[[nodiscard]] Graph graphInNodeOrder(const Graph& graph, const std::vector<NodeId>& order);
[[nodiscard]] Profile profileInNodeOrder(const Profile& profile, const std::vector<NodeId>& order);

// A parameter that several stages read (GPT-2's wte: the embedding and the lm_head): each holds a
// copy, and synchronous schedules sum its gradient across those stages before every update.
struct TiedParameter
{
    std::uint32_t tensor = 0; // the parameter's tensor id, shared by the stages holding it
    double gradientBytes = 0;
};

// Bytes one stage sends another directly, one micro-batch (dataflow partitions).
struct StageSend
{
    StageId stage; // the receiver
    double bytes = 0;
    bool operator==(const StageSend&) const = default;
};

struct StageCost
{
    double forwardNs = 0; // one micro-batch
    double backwardNs = 0; // input + weight gradients
    double weightGradNs = 0; // part of backwardNs that zero-bubble schedules run as W
    double activationBytes = 0; // kept from forward to backward, one micro-batch
    double weightGradOnlyBytes = 0; // part of activationBytes only W reads (freed after W)
    double weightGradHeldBytes = 0; // output gradients a split B keeps for its W, one micro-batch
    double workspaceBytes = 0; // largest transient: one node's scratch, or the backward's working set
    double splitWorkspaceBytes = 0; // the same when zero-bubble splits the backward into B and W
    // What the first full backward after an optimizer step holds beyond workspaceBytes: the
    // parameter gradients it allocates node by node (they count from its end otherwise).
    double firstBackwardExtraBytes = 0;
    // What zero-bubble's B and W each hold above the stage's largest node scratch (B: its working
    // set; W: one node's new parameter gradients, with its columns on the CPU): the simulator counts
    // each while its pass runs, not beside the activations other micro-batches keep meanwhile.
    // splitWorkspaceBytes is that scratch plus the larger of the two.
    double inputPassExtraBytes = 0;
    double weightPassExtraBytes = 0;
    std::int64_t parameterCount = 0; // parameters the stage reads (tied weights count in each stage)
    double sendForwardBytes = 0; // activations to the next stage (dataflow: to all), 1 micro-batch
    double sendBackwardBytes = 0; // gradients to the previous stage (dataflow: to all), 1 micro-batch
    // Dataflow partitions only (empty otherwise): activations to each consumer stage and gradients
    // back to each producer stage, sent directly; the two totals above are their sums.
    std::vector<StageSend> forwardSends;
    std::vector<StageSend> backwardSends;
    std::vector<TiedParameter> tiedParameters; // held by other stages too
};

[[nodiscard]] std::vector<StageCost> computeStageCosts(
    const Graph& graph, const Profile& profile, const Partition& partition, double microBatch);

} // namespace ps
