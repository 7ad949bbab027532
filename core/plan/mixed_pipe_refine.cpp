// Mixed-pipe step 3 (FTPipe §4.1, "Refinement"): the stages un-coarsened into their basic nodes,
// border nodes moved greedily to a neighbouring stage when the move keeps memory and acyclicity
// and improves the pipeline.
#include "plan/mixed_pipe.h"
#include "plan/mixed_pipe_dag.h"

#include <algorithm>
#include <deque>

namespace ps::detail {

Refiner::Refiner(const MixedGraph& graph, const std::vector<double>& weight, const Cluster& cluster,
    double memoryCapBytes, StageAssignment& assignment)
    : m_graph(graph)
    , m_weight(weight)
    , m_cluster(cluster)
    , m_cap(memoryCapBytes)
    , m_a(assignment)
    , m_stages(assignment.deviceOf.size())
    , m_compute(m_stages, 0)
    , m_forwardNs(m_stages, 0)
    , m_backwardNs(m_stages, 0)
    , m_nodes(m_stages, 0)
    , m_edges(m_stages * m_stages, 0)
{
    int devices = 0;
    for (int d : m_a.deviceOf)
        devices = std::max(devices, d + 1);
    m_deviceMemory.assign(static_cast<std::size_t>(devices), 0);
    for (std::size_t v = 0; v < graph.nodeCount(); ++v) {
        const auto s = static_cast<std::size_t>(m_a.stageOf[v]);
        m_compute[s] += weight[v];
        ++m_nodes[s];
        m_deviceMemory[static_cast<std::size_t>(m_a.deviceOf[s])] += graph.memoryBytes[v];
        for (auto r : graph.succ[v]) {
            const auto t = static_cast<std::size_t>(m_a.stageOf[r]);
            if (t != s)
                ++m_edges[s * m_stages + t];
        }
    }
    for (const auto& t : graph.tensors)
        traffic(t, 1);
}

double Refiner::bandwidth(int stageA, int stageB) const
{
    const DeviceId a(static_cast<std::uint32_t>(m_a.deviceOf[static_cast<std::size_t>(stageA)]));
    const DeviceId b(static_cast<std::uint32_t>(m_a.deviceOf[static_cast<std::size_t>(stageB)]));
    return m_cluster.nodeOf(a) == m_cluster.nodeOf(b) ? m_cluster.intraNode.bandwidth : m_cluster.interNode.bandwidth;
}

// A tensor goes once to every other stage reading it (FTPipe sends directly, §4); between stages
// on one device it costs nothing. [gap] Eq. 1's T_comm of a stage counts what it sends: its
// activations forward, and in the backward the gradients it returns to its producers.
void Refiner::traffic(const MixedTensor& tensor, double sign)
{
    const int from = m_a.stageOf[tensor.producer];
    m_seen.clear();
    for (auto r : tensor.readers) {
        const int to = m_a.stageOf[r];
        if (to == from || std::find(m_seen.begin(), m_seen.end(), to) != m_seen.end())
            continue;
        m_seen.push_back(to);
        if (m_a.deviceOf[static_cast<std::size_t>(to)] == m_a.deviceOf[static_cast<std::size_t>(from)])
            continue;
        const double ns = 1e9 * tensor.bytes / bandwidth(from, to);
        m_forwardNs[static_cast<std::size_t>(from)] += sign * ns;
        m_bytes += sign * tensor.bytes;
        if (tensor.needsGrad) {
            m_backwardNs[static_cast<std::size_t>(to)] += sign * ns;
            m_bytes += sign * tensor.bytes;
        }
    }
}

Refiner::Score Refiner::score() const
{
    std::vector<double> period(m_deviceMemory.size(), 0);
    for (std::size_t s = 0; s < m_stages; ++s) {
        period[static_cast<std::size_t>(m_a.deviceOf[s])] +=
            ftpipeStagePeriodNs(m_compute[s], std::max(0.0, m_forwardNs[s]), std::max(0.0, m_backwardNs[s]));
    }
    Score out;
    out.bytes = m_bytes;
    for (double p : period) {
        out.slowestNs = std::max(out.slowestNs, p);
        out.squares += p * p;
    }
    return out;
}

double Refiner::periodNs() const
{
    return score().slowestNs;
}

// [gap] The paper accepts a move that improves throughput, communication or load balance; here
// in that order of priority, each compared with a relative tolerance so rounding never counts.
bool Refiner::better(const Score& a, const Score& b)
{
    const auto less = [](double x, double y) { return x < y - 1e-9 * std::abs(y); };
    if (less(a.slowestNs, b.slowestNs) || less(b.slowestNs, a.slowestNs))
        return less(a.slowestNs, b.slowestNs);
    if (less(a.squares, b.squares) || less(b.squares, a.squares))
        return less(a.squares, b.squares);
    return less(a.bytes, b.bytes);
}

void Refiner::move(std::uint32_t node, int to)
{
    const int from = m_a.stageOf[node];
    const auto touched = [&](double sign) {
        for (auto t : m_graph.produced[node])
            traffic(m_graph.tensors[t], sign);
        for (auto t : m_graph.read[node])
            traffic(m_graph.tensors[t], sign);
    };
    touched(-1);
    const auto edge = [&](int a, int b, int delta) {
        if (a != b)
            m_edges[static_cast<std::size_t>(a) * m_stages + static_cast<std::size_t>(b)] += delta;
    };
    for (auto p : m_graph.pred[node]) {
        edge(m_a.stageOf[p], from, -1);
        edge(m_a.stageOf[p], to, 1);
    }
    for (auto r : m_graph.succ[node]) {
        edge(from, m_a.stageOf[r], -1);
        edge(to, m_a.stageOf[r], 1);
    }
    m_a.stageOf[node] = to;
    m_compute[static_cast<std::size_t>(from)] -= m_weight[node];
    m_compute[static_cast<std::size_t>(to)] += m_weight[node];
    --m_nodes[static_cast<std::size_t>(from)];
    ++m_nodes[static_cast<std::size_t>(to)];
    m_deviceMemory[static_cast<std::size_t>(m_a.deviceOf[static_cast<std::size_t>(from)])] -= m_graph.memoryBytes[node];
    m_deviceMemory[static_cast<std::size_t>(m_a.deviceOf[static_cast<std::size_t>(to)])] += m_graph.memoryBytes[node];
    touched(1);
}

// Kahn's algorithm on the stage graph.
bool Refiner::acyclic() const
{
    std::vector<int> in(m_stages, 0);
    for (std::size_t a = 0; a < m_stages; ++a) {
        for (std::size_t b = 0; b < m_stages; ++b)
            in[b] += m_edges[a * m_stages + b] > 0 ? 1 : 0;
    }
    std::deque<std::size_t> ready;
    for (std::size_t s = 0; s < m_stages; ++s) {
        if (in[s] == 0)
            ready.push_back(s);
    }
    std::size_t done = 0;
    for (; !ready.empty(); ++done) {
        const auto a = ready.front();
        ready.pop_front();
        for (std::size_t b = 0; b < m_stages; ++b) {
            if (m_edges[a * m_stages + b] > 0 && --in[b] == 0)
                ready.push_back(b);
        }
    }
    return done == m_stages;
}

bool Refiner::tryMove(std::uint32_t node, int to, Score& current)
{
    const int from = m_a.stageOf[node];
    const auto toDevice = static_cast<std::size_t>(m_a.deviceOf[static_cast<std::size_t>(to)]);
    if (m_nodes[static_cast<std::size_t>(from)] <= 1) // [gap] refinement never empties a stage
        return false;
    if (toDevice != static_cast<std::size_t>(m_a.deviceOf[static_cast<std::size_t>(from)])
        && m_deviceMemory[toDevice] + m_graph.memoryBytes[node] > m_cap)
        return false;
    move(node, to);
    if (acyclic()) {
        const auto next = score();
        if (better(next, current)) {
            current = next;
            return true;
        }
    }
    move(node, from);
    return false;
}

// [gap] A border node may move to the stage of any node it exchanges a tensor with (graph
// neighbours, not pipeline-index neighbours); nodes are visited in graph order, the first
// improving move is taken, and passes repeat until one moves nothing or `passes` ran.
void Refiner::run(int passes, const std::function<void()>& checkCancel)
{
    auto current = score();
    for (int pass = 0; pass < passes; ++pass) {
        checkCancel();
        bool moved = false;
        for (std::uint32_t v = 0; v < m_graph.nodeCount(); ++v) {
            std::vector<int> targets;
            for (const auto* list : { &m_graph.pred[v], &m_graph.succ[v] }) {
                for (auto n : *list) {
                    if (m_a.stageOf[n] != m_a.stageOf[v])
                        targets.push_back(m_a.stageOf[n]);
                }
            }
            std::sort(targets.begin(), targets.end());
            targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
            for (int to : targets) {
                if (tryMove(v, to, current)) {
                    moved = true;
                    break;
                }
            }
        }
        if (!moved)
            break;
    }
}

} // namespace ps::detail
