#include "export/scope_mapping.h"

#include "util/error.h"

#include <algorithm>
#include <map>

namespace ps {
namespace {

    std::vector<std::string> splitDots(std::string_view text)
    {
        std::vector<std::string> parts;
        std::size_t start = 0;
        while (start <= text.size()) {
            const auto dot = std::min(text.find('.', start), text.size());
            if (dot > start)
                parts.emplace_back(text.substr(start, dot - start));
            start = dot + 1;
        }
        return parts;
    }

    bool isNumber(const std::string& text)
    {
        return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
    }

    // A scope run: consecutive data-dependent nodes (in node order) with one canonical scope.
    struct ScopeRun
    {
        std::string scope;
        int occurrence = 0;
        std::size_t first = 0; // position of its first node
        std::size_t count = 0; // data-dependent nodes in it
    };

    // The runs, and for every position the run of the first data-dependent node at or after it.
    struct RunIndex
    {
        std::vector<ScopeRun> runs;
        std::vector<std::size_t> runOfPosition; // runs.size(): none follows
        std::vector<std::size_t> rankInRun; // that node's index inside its run
    };

    RunIndex indexRuns(const Graph& graph)
    {
        const auto dynamic = dataDependentNodes(graph);
        RunIndex index;
        std::map<std::string, int> seen;
        std::vector<std::size_t> runOfNode(graph.nodeCount(), 0);
        std::vector<std::size_t> rank(graph.nodeCount(), 0);
        for (const auto& node : graph.nodes()) {
            if (!dynamic[node.id.index()])
                continue;
            auto scope = canonicalScope(node.scope);
            if (index.runs.empty() || index.runs.back().scope != scope)
                index.runs.push_back({ scope, seen[scope]++, node.id.index(), 0 });
            runOfNode[node.id.index()] = index.runs.size() - 1;
            rank[node.id.index()] = index.runs.back().count++;
        }
        index.runOfPosition.assign(graph.nodeCount(), index.runs.size());
        index.rankInRun.assign(graph.nodeCount(), 0);
        std::size_t next = index.runs.size();
        std::size_t nextRank = 0;
        for (std::size_t i = graph.nodeCount(); i-- > 0;) {
            if (dynamic[i]) {
                next = runOfNode[i];
                nextRank = rank[i];
            }
            index.runOfPosition[i] = next;
            index.rankInRun[i] = nextRank;
        }
        return index;
    }

} // namespace

std::string canonicalScope(std::string_view scope)
{
    auto parts = splitDots(scope);
    for (bool changed = true; changed;) {
        changed = false;
        for (std::size_t i = 1; i + 1 < parts.size(); ++i) {
            if (parts[i] == parts[i - 1] && isNumber(parts[i + 1])) {
                parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(i));
                changed = true;
                break;
            }
        }
    }
    std::string out;
    for (const auto& p : parts)
        out += (out.empty() ? "" : ".") + p;
    return out;
}

std::vector<bool> dataDependentNodes(const Graph& graph)
{
    std::vector<bool> dynamic(graph.nodeCount(), false);
    for (const auto& node : graph.nodes()) {
        for (auto in : node.inputs) {
            const auto& t = graph.tensor(in);
            if (t.kind == TensorKind::Input
                || (t.kind == TensorKind::Activation && t.producer.valid() && dynamic[t.producer.index()]))
                dynamic[node.id.index()] = true;
        }
    }
    return dynamic;
}

std::vector<ScopeAnchor> cutAnchors(const Graph& graph, std::size_t position, std::size_t fallbacks)
{
    const auto index = indexRuns(graph);
    if (position >= graph.nodeCount() || index.runOfPosition[position] >= index.runs.size())
        return {};
    auto run = index.runOfPosition[position];
    const auto rank = index.rankInRun[position];
    const bool inside = rank > 0;
    // Inside a run: its start when the cut lies in its first half, else the next run's start.
    if (inside && 2 * rank > index.runs[run].count && run + 1 < index.runs.size())
        ++run;
    std::vector<ScopeAnchor> anchors;
    for (auto r = run; r < index.runs.size() && anchors.size() <= fallbacks; ++r)
        anchors.push_back({ index.runs[r].scope, index.runs[r].occurrence, inside && r == run });
    return anchors;
}

LayerLayout layerLayout(const Graph& graph, const Partition& partition)
{
    LayerLayout out;
    for (const auto& node : graph.nodes())
        out.layerCount = std::max(out.layerCount, node.layer + 1);
    if (out.layerCount == 0)
        throw Error("the model has no numbered transformer blocks (node layer indices), so there is no layer "
                    "layout to export; use --format torchrun or pipelining-csv");
    const auto stageOf = stageOfNodes(partition, graph.nodeCount());
    const auto stages = static_cast<std::size_t>(partition.stageCount());
    // votes[layer][stage]: the block's nodes on each stage.
    std::vector<std::vector<std::size_t>> votes(
        static_cast<std::size_t>(out.layerCount), std::vector<std::size_t>(stages, 0));
    for (const auto& node : graph.nodes()) {
        if (node.layer >= 0)
            ++votes[static_cast<std::size_t>(node.layer)][stageOf[node.id.index()].index()];
    }
    out.layersPerStage.assign(stages, 0);
    std::size_t previous = 0;
    for (const auto& v : votes) {
        auto stage = static_cast<std::size_t>(std::max_element(v.begin(), v.end()) - v.begin());
        stage = std::max(stage, previous); // blocks stay in order even when votes are odd
        out.snapped = out.snapped || std::count_if(v.begin(), v.end(), [](std::size_t n) { return n > 0; }) > 1;
        ++out.layersPerStage[stage];
        previous = stage;
    }
    int first = 0;
    for (auto n : out.layersPerStage) {
        out.firstLayer.push_back(first);
        first += n;
    }
    return out;
}

} // namespace ps
