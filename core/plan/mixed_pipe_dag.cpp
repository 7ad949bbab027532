#include "plan/mixed_pipe_dag.h"

#include "graph/op_cost.h"
#include "sim/memory_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace ps::detail {
namespace {

    void sortUnique(std::vector<std::uint32_t>& v)
    {
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
    }

    // "encoder.block.3.layer.0" at depth 3: "encoder.block.3".
    std::string scopePrefix(const std::string& scope, int depth)
    {
        std::size_t end = 0;
        for (int d = 0; d < depth; ++d) {
            end = scope.find('.', end == 0 ? 0 : end + 1);
            if (end == std::string::npos)
                return scope;
        }
        return scope.substr(0, end);
    }

    int scopeDepth(const std::string& scope)
    {
        return scope.empty() ? 0 : 1 + static_cast<int>(std::count(scope.begin(), scope.end(), '.'));
    }

    // Merges `c` into its lightest neighbour that stays under the cap without closing a cycle.
    bool mergeIntoLightestNeighbour(ClusterDag& dag, int c, double memoryCapBytes)
    {
        std::vector<int> near;
        for (const auto& [n, bytes] : dag.neighbours(c))
            near.push_back(n);
        std::stable_sort(near.begin(), near.end(), [&](int a, int b) { return dag.weight(a) < dag.weight(b); });
        for (int n : near) {
            if (dag.memory(n) + dag.memory(c) <= memoryCapBytes && dag.canMerge(n, c)) {
                dag.merge(n, c);
                return true;
            }
        }
        return false;
    }

    // Step 1a.2: "typically CPU operations" with no compute join their lightest neighbour.
    void mergeZeroWeight(ClusterDag& dag)
    {
        for (int c : dag.clusters()) {
            if (dag.alive(c) && dag.weight(c) <= 0)
                mergeIntoLightestNeighbour(dag, c, std::numeric_limits<double>::infinity());
        }
    }

    // Step 1a.3: a node sending more than the 99th percentile is a bad border. [gap] A node's
    // communication volume is the bytes of the tensors it produces (what a cut after it sends),
    // and it merges with the nodes reading them, as long as no cycle appears.
    void mergeHeavySenders(ClusterDag& dag, const MixedGraph& g)
    {
        std::vector<double> volume(g.nodeCount(), 0);
        for (std::size_t v = 0; v < g.nodeCount(); ++v) {
            for (auto t : g.produced[v])
                volume[v] += g.tensors[t].bytes;
        }
        if (volume.empty())
            return;
        auto sorted = volume;
        std::sort(sorted.begin(), sorted.end());
        const auto rank = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(sorted.size())));
        const double q99 = sorted[std::max<std::size_t>(rank, 1) - 1];
        for (std::size_t v = 0; v < g.nodeCount(); ++v) {
            if (volume[v] <= q99)
                continue;
            for (auto t : g.produced[v]) {
                for (auto r : g.tensors[t].readers) {
                    const int a = dag.clusterOf(static_cast<std::uint32_t>(v));
                    const int b = dag.clusterOf(r);
                    if (a != b && dag.canMerge(a, b))
                        dag.merge(a, b);
                }
            }
        }
    }

    // COARSEN_BY_TYPE: nodes of one module (a scope prefix) merge in topological order when no
    // cycle appears. [gap] The nesting level is the coarsest giving at least `blocks` groups
    // ("encoder.block.3" for T5, "h.3" for GPT-2); a group that cannot merge whole continues
    // from the cluster that broke it.
    void groupByScope(ClusterDag& dag, const MixedGraph& g, int blocks, double memoryCapBytes)
    {
        int maxDepth = 0;
        for (const auto& s : g.scope)
            maxDepth = std::max(maxDepth, scopeDepth(s));
        int depth = maxDepth;
        for (int d = 1; d < maxDepth; ++d) {
            std::vector<std::string> keys;
            for (int c : dag.clusters())
                keys.push_back(scopePrefix(g.scope[dag.members(c).front()], d));
            std::sort(keys.begin(), keys.end());
            if (std::unique(keys.begin(), keys.end()) - keys.begin() >= blocks) {
                depth = d;
                break;
            }
        }
        std::map<std::string, int> open; // group -> the cluster its next member joins
        for (int c : dag.clusters()) {
            const auto key = scopePrefix(g.scope[dag.members(c).front()], depth);
            const auto it = open.find(key);
            if (it == open.end()) {
                open.emplace(key, c);
            } else if (dag.memory(it->second) + dag.memory(c) <= memoryCapBytes && dag.canMerge(it->second, c)) {
                dag.merge(it->second, c);
            } else {
                it->second = c;
            }
        }
    }

    // [gap] Centers: the `blocks` heaviest clusters, or the clusters holding the compute quantiles
    // (k + 1/2) / blocks along the topological order ("spread").
    std::vector<int> chooseCenters(const ClusterDag& dag, int blocks, Coarsening how)
    {
        auto all = dag.clusters();
        if (all.size() <= static_cast<std::size_t>(blocks))
            return all;
        if (how == Coarsening::CentersHeaviest) {
            std::stable_sort(all.begin(), all.end(), [&](int a, int b) { return dag.weight(a) > dag.weight(b); });
            all.resize(static_cast<std::size_t>(blocks));
            return all;
        }
        double total = 0;
        for (int c : all)
            total += dag.weight(c);
        std::vector<char> chosen(all.size(), 0);
        std::vector<int> centers;
        std::size_t i = 0;
        double cumulative = dag.weight(all[0]);
        for (int k = 0; k < blocks; ++k) {
            const double target = (k + 0.5) / blocks * total;
            while (i + 1 < all.size() && cumulative < target)
                cumulative += dag.weight(all[++i]);
            std::size_t pick = i;
            while (chosen[pick] != 0) // taken by the quantile before: the next free cluster
                pick = (pick + 1) % all.size();
            chosen[pick] = 1;
            centers.push_back(all[pick]);
        }
        return centers;
    }

    // COARSEN_AROUND_CENTERS: each center in turn takes one neighbour that fits the memory cap
    // and keeps the graph acyclic. [gap] The lightest center goes first in every round (the
    // paper's round robin, ordered so blocks stay comparable for LPT) and takes the neighbour it
    // exchanges the most bytes with (adjacent blocks joined keep their CCO property, §4.1).
    void growAroundCenters(
        ClusterDag& dag, std::vector<int> centers, double memoryCapBytes, const std::function<void()>& checkCancel)
    {
        std::vector<char> isCenter(dag.idLimit(), 0);
        for (int c : centers)
            isCenter[static_cast<std::size_t>(c)] = 1;
        const auto center = [&](int c) { return isCenter[static_cast<std::size_t>(c)] != 0; };
        for (bool any = true; any && dag.size() > centers.size();) {
            checkCancel();
            any = false;
            std::stable_sort(
                centers.begin(), centers.end(), [&](int a, int b) { return dag.weight(a) < dag.weight(b); });
            for (int c : centers) {
                std::vector<std::pair<int, double>> near;
                for (const auto& [n, bytes] : dag.neighbours(c)) {
                    if (!center(n))
                        near.emplace_back(n, bytes);
                }
                std::stable_sort(near.begin(), near.end(), [&](const auto& a, const auto& b) {
                    return a.second != b.second ? a.second > b.second : dag.weight(a.first) < dag.weight(b.first);
                });
                for (const auto& [n, bytes] : near) {
                    if (dag.memory(c) + dag.memory(n) <= memoryCapBytes && dag.canMerge(c, n)) {
                        dag.merge(c, n);
                        any = true;
                        break;
                    }
                }
            }
        }
        // [gap] What no center could take joins its lightest neighbour that fits, else stays a
        // block.
        for (int c : dag.clusters()) {
            if (dag.alive(c) && !center(c))
                mergeIntoLightestNeighbour(dag, c, memoryCapBytes);
        }
    }

} // namespace

MixedGraph buildMixedGraph(const StageModel& model, bool checkpointing)
{
    const auto& graph = model.graph();
    const auto n = graph.nodeCount();
    const int last = model.stages() - 1; // one weight version, as FTPipe keeps (no stashing)
    const double inFlight = checkpointing ? 1.0 : inFlightMicroBatches(model.schedule(), 0);
    MixedGraph m;
    for (std::size_t v = 0; v < n; ++v) {
        m.forwardNs.push_back(model.nodeForwardNs(v));
        m.backwardNs.push_back(model.nodeBackwardNs(v));
        // [gap] A block's memory: its parameter states plus its saved activations (one micro-batch
        // when checkpointing: the recompute peak). Border inputs depend on the cut and are left to
        // the plan's evaluation, which checks every device.
        m.memoryBytes.push_back(model.parameterStateBytes(v, v + 1, last) + inFlight * model.savedBytes(v, v + 1));
        m.scope.push_back(graph.nodes()[v].scope);
    }
    m.produced.resize(n);
    m.read.resize(n);
    m.succ.resize(n);
    m.pred.resize(n);
    const auto consumers = graph.consumers();
    const auto needsGrad = tensorsRequiringGrad(graph);
    for (const auto& t : graph.tensors()) {
        if (t.kind != TensorKind::Activation || !t.producer.valid())
            continue;
        MixedTensor mt { t.producer.value, {}, model.tensorBytes(t.id), needsGrad[t.id.index()] };
        for (auto c : consumers[t.id.index()]) {
            if (c != t.producer)
                mt.readers.push_back(c.value);
        }
        sortUnique(mt.readers);
        if (mt.readers.empty())
            continue;
        const auto index = static_cast<std::uint32_t>(m.tensors.size());
        m.produced[mt.producer].push_back(index);
        for (auto r : mt.readers) {
            m.read[r].push_back(index);
            m.succ[mt.producer].push_back(r);
            m.pred[r].push_back(mt.producer);
        }
        m.tensors.push_back(std::move(mt));
    }
    for (std::size_t v = 0; v < n; ++v) {
        sortUnique(m.succ[v]);
        sortUnique(m.pred[v]);
    }
    return m;
}

ClusterDag::ClusterDag(const MixedGraph& graph, const std::vector<double>& weight)
    : m_alive(graph.nodeCount(), 1)
    , m_weight(weight)
    , m_memory(graph.memoryBytes)
    , m_members(graph.nodeCount())
    , m_succ(graph.nodeCount())
    , m_pred(graph.nodeCount())
    , m_count(graph.nodeCount())
    , m_stamp(graph.nodeCount(), 0)
{
    for (std::size_t v = 0; v < graph.nodeCount(); ++v) {
        m_clusterOf.push_back(static_cast<int>(v));
        m_members[v].push_back(static_cast<std::uint32_t>(v));
        m_order.push_back(static_cast<long>(v)); // the graph's node order is topological
    }
    for (const auto& t : graph.tensors) {
        for (auto r : t.readers) {
            m_succ[t.producer][static_cast<int>(r)] += t.bytes;
            m_pred[r][static_cast<int>(t.producer)] += t.bytes;
        }
    }
}

std::map<int, double> ClusterDag::neighbours(int c) const
{
    auto out = m_succ[static_cast<std::size_t>(c)];
    for (const auto& [n, bytes] : m_pred[static_cast<std::size_t>(c)])
        out[n] += bytes;
    return out;
}

std::vector<int> ClusterDag::clusters() const
{
    std::vector<int> out;
    for (std::size_t c = 0; c < m_alive.size(); ++c) {
        if (m_alive[c] != 0)
            out.push_back(static_cast<int>(c));
    }
    std::sort(out.begin(), out.end(), [&](int a, int b) { return m_order[a] < m_order[b]; });
    return out;
}

bool ClusterDag::window(int from, int other, bool forward, std::vector<int>* found) const
{
    const long bound = m_order[static_cast<std::size_t>(other)];
    const auto& adjacency = forward ? m_succ : m_pred;
    const auto gen = ++m_generation;
    std::vector<int> stack;
    const auto visit = [&](int x) {
        const bool inside = forward ? m_order[x] < bound : m_order[x] > bound;
        if (x != other && inside && m_stamp[x] != gen) {
            m_stamp[x] = gen;
            stack.push_back(x);
        }
    };
    for (const auto& [x, bytes] : adjacency[static_cast<std::size_t>(from)])
        visit(x);
    while (!stack.empty()) {
        const int x = stack.back();
        stack.pop_back();
        if (found)
            found->push_back(x);
        for (const auto& [y, bytes] : adjacency[static_cast<std::size_t>(x)]) {
            if (y == other)
                return true;
            visit(y);
        }
    }
    return false;
}

bool ClusterDag::canMerge(int a, int b) const
{
    if (a == b || !alive(a) || !alive(b))
        return false;
    // In a topological order a path can only run from the earlier cluster to the later one.
    const bool aFirst = m_order[a] < m_order[b];
    return !window(aFirst ? a : b, aFirst ? b : a, true, nullptr);
}

void ClusterDag::merge(int a, int b)
{
    // Pearce & Kelly: what the earlier cluster reaches inside the window moves after the merged
    // cluster, what reaches the later one moves before it, reusing their positions in order.
    const bool aFirst = m_order[a] < m_order[b];
    const int lo = aFirst ? a : b;
    const int hi = aFirst ? b : a;
    std::vector<int> after;
    std::vector<int> before;
    window(lo, hi, true, &after);
    window(hi, lo, false, &before);
    std::vector<long> slots { m_order[lo], m_order[hi] };
    const auto byOrder = [&](int x, int y) { return m_order[x] < m_order[y]; };
    std::sort(after.begin(), after.end(), byOrder);
    std::sort(before.begin(), before.end(), byOrder);
    for (int x : after)
        slots.push_back(m_order[x]);
    for (int x : before)
        slots.push_back(m_order[x]);
    std::sort(slots.begin(), slots.end());
    for (std::size_t i = 0; i < before.size(); ++i)
        m_order[before[i]] = slots[i];
    m_order[a] = slots[before.size()];
    for (std::size_t i = 0; i < after.size(); ++i)
        m_order[after[i]] = slots[slots.size() - after.size() + i];
    for (auto v : m_members[b])
        m_clusterOf[v] = a;
    m_members[a].insert(m_members[a].end(), m_members[b].begin(), m_members[b].end());
    m_weight[a] += m_weight[b];
    m_memory[a] += m_memory[b];
    for (const auto& [x, bytes] : m_succ[b]) {
        m_pred[x].erase(b);
        if (x != a) {
            m_succ[a][x] += bytes;
            m_pred[x][a] += bytes;
        }
    }
    for (const auto& [x, bytes] : m_pred[b]) {
        m_succ[x].erase(b);
        if (x != a) {
            m_pred[a][x] += bytes;
            m_succ[x][a] += bytes;
        }
    }
    m_succ[b].clear();
    m_pred[b].clear();
    m_members[b].clear();
    m_alive[b] = 0;
    --m_count;
}

std::string_view toString(Coarsening how)
{
    switch (how) {
    case Coarsening::ByScope:
        return "by-scope";
    case Coarsening::CentersSpread:
        return "centers-spread";
    case Coarsening::CentersHeaviest:
        return "centers-heaviest";
    }
    return "by-scope";
}

void preprocess(ClusterDag& dag, const MixedGraph& graph)
{
    mergeZeroWeight(dag);
    mergeHeavySenders(dag, graph);
}

void coarsen(ClusterDag& dag, const MixedGraph& graph, int blocks, Coarsening how, double memoryCapBytes,
    const std::function<void()>& checkCancel)
{
    if (how == Coarsening::ByScope)
        groupByScope(dag, graph, blocks, memoryCapBytes);
    checkCancel();
    growAroundCenters(dag, chooseCenters(dag, blocks, how), memoryCapBytes, checkCancel);
}

} // namespace ps::detail
