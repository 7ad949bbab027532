// Internal to Mixed-pipe (plan/mixed_pipe.h is the API): the graph as the partitioner weighs it,
// and its contraction into blocks that keeps it acyclic (FTPipe §4.1 steps 1a and 1b).
//
// ClusterDag merges clusters of nodes only when no cycle appears, and keeps a topological order
// of the clusters up to date as it merges (Pearce & Kelly's dynamic topological order, which the
// paper cites for this check), so every cycle check searches only the clusters between the two.
// Depends on: plan/stage_model.h.
#pragma once

#include "cluster/cluster.h"
#include "plan/stage_model.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace ps::detail {

// One activation tensor that crosses from its producer to other nodes.
struct MixedTensor
{
    std::uint32_t producer = 0; // node index
    std::vector<std::uint32_t> readers; // node indices, distinct
    double bytes = 0; // one micro-batch at the planned size and precision
    bool needsGrad = false; // its gradient flows back in the backward
};

// The graph at the planned micro-batch: per node its times, memory and module path, and the
// tensors between nodes. Inputs and constants are tensors, not nodes, in PipeStudio's graph: they
// are never transfers, which is what FTPipe's step 1a.1 (remove and duplicate them) achieves.
struct MixedGraph
{
    std::vector<double> forwardNs, backwardNs;
    std::vector<double> memoryBytes; // parameter states + saved activations (see buildMixedGraph)
    std::vector<std::string> scope;
    std::vector<MixedTensor> tensors;
    std::vector<std::vector<std::uint32_t>> produced, read; // by node: indices into tensors
    std::vector<std::vector<std::uint32_t>> succ, pred; // by node, distinct

    [[nodiscard]] std::size_t nodeCount() const
    {
        return forwardNs.size();
    }
};

// `checkpointing`: stages keep only their border inputs (FTPipe §4.2.1), so a node's activations
// count once (the recompute peak); otherwise once per micro-batch in flight at the first stage.
[[nodiscard]] MixedGraph buildMixedGraph(const StageModel& model, bool checkpointing);

class ClusterDag
{
public:
    // One cluster per node; `weight` is each node's compute (ns), in the graph's topological order.
    ClusterDag(const MixedGraph& graph, const std::vector<double>& weight);

    [[nodiscard]] bool alive(int c) const
    {
        return m_alive[static_cast<std::size_t>(c)] != 0;
    }
    [[nodiscard]] int clusterOf(std::uint32_t node) const
    {
        return m_clusterOf[node];
    }
    [[nodiscard]] double weight(int c) const
    {
        return m_weight[static_cast<std::size_t>(c)];
    }
    [[nodiscard]] double memory(int c) const
    {
        return m_memory[static_cast<std::size_t>(c)];
    }
    [[nodiscard]] const std::vector<std::uint32_t>& members(int c) const
    {
        return m_members[static_cast<std::size_t>(c)];
    }
    // Neighbours with the bytes on the edges to (succ) or from (pred) them.
    [[nodiscard]] const std::map<int, double>& succ(int c) const
    {
        return m_succ[static_cast<std::size_t>(c)];
    }
    [[nodiscard]] const std::map<int, double>& pred(int c) const
    {
        return m_pred[static_cast<std::size_t>(c)];
    }
    // Both directions, bytes summed.
    [[nodiscard]] std::map<int, double> neighbours(int c) const;
    // Alive clusters in topological order.
    [[nodiscard]] std::vector<int> clusters() const;
    [[nodiscard]] std::size_t size() const
    {
        return m_count;
    }
    [[nodiscard]] std::size_t idLimit() const // cluster ids are below this
    {
        return m_alive.size();
    }
    // Whether merging `a` and `b` leaves the graph acyclic: no path between them through others.
    [[nodiscard]] bool canMerge(int a, int b) const;
    // Merges `b` into `a` (canMerge must hold); `a` survives.
    void merge(int a, int b);

private:
    // The clusters between `from` and `other` in the order that `from` reaches (forward: along
    // successors) or that reach it (backward), not through `other`; true when one of them has an
    // edge to (from) `other`, i.e. a path of two or more edges joins the pair.
    bool window(int from, int other, bool forward, std::vector<int>* found) const;

    std::vector<char> m_alive;
    std::vector<int> m_clusterOf;
    std::vector<double> m_weight, m_memory;
    std::vector<std::vector<std::uint32_t>> m_members;
    std::vector<std::map<int, double>> m_succ, m_pred;
    std::vector<long> m_order; // topological position, distinct
    std::size_t m_count = 0;
    mutable std::vector<std::uint32_t> m_stamp;
    mutable std::uint32_t m_generation = 0;
};

enum class Coarsening { ByScope, CentersSpread, CentersHeaviest };

[[nodiscard]] std::string_view toString(Coarsening how);

// A node-level partition: the stage of every node and the device of every stage.
struct StageAssignment
{
    std::vector<int> stageOf; // by node
    std::vector<int> deviceOf; // by stage
};

// Step 3 of §4.1 on basic nodes: moves border nodes to a neighbouring stage while Eq. 1's period
// improves; see mixed_pipe_refine.cpp.
class Refiner
{
public:
    Refiner(const MixedGraph& graph, const std::vector<double>& weight, const Cluster& cluster, double memoryCapBytes,
        StageAssignment& assignment);
    void run(int passes, const std::function<void()>& checkCancel);
    // Eq. 1 summed over each device's stages, the slowest device.
    [[nodiscard]] double periodNs() const;

private:
    struct Score
    {
        double slowestNs = 0;
        double squares = 0; // sum of squared device periods: lower is better balanced
        double bytes = 0; // bytes between devices
    };
    [[nodiscard]] Score score() const;
    [[nodiscard]] static bool better(const Score& a, const Score& b);
    [[nodiscard]] double bandwidth(int stageA, int stageB) const;
    void traffic(const MixedTensor& tensor, double sign);
    void move(std::uint32_t node, int to);
    bool tryMove(std::uint32_t node, int to, Score& current);
    [[nodiscard]] bool acyclic() const;

    const MixedGraph& m_graph;
    const std::vector<double>& m_weight;
    const Cluster& m_cluster;
    double m_cap;
    StageAssignment& m_a;
    std::size_t m_stages;
    std::vector<double> m_compute, m_forwardNs, m_backwardNs; // by stage
    std::vector<double> m_deviceMemory;
    std::vector<int> m_nodes; // by stage
    std::vector<int> m_edges; // stage x stage: node edges between them
    double m_bytes = 0;
    std::vector<int> m_seen; // scratch: reader stages of one tensor
};

// Step 1a: zero-weight nodes into their lightest neighbour; nodes sending more than the 99th
// percentile merged with their readers. Acyclic throughout.
void preprocess(ClusterDag& dag, const MixedGraph& graph);
// Step 1b: about `blocks` blocks of at most `memoryCapBytes` each (when the graph allows).
void coarsen(ClusterDag& dag, const MixedGraph& graph, int blocks, Coarsening how, double memoryCapBytes,
    const std::function<void()>& checkCancel);

} // namespace ps::detail
