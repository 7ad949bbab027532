#include "graph/validate.h"

#include "graph/shape_inference.h"
#include "util/error.h"

#include <algorithm>
#include <unordered_set>

namespace ps {
namespace {

    using Issues = std::vector<GraphIssue>;

    void addError(Issues& issues, std::string message)
    {
        issues.push_back({ GraphIssue::Severity::Error, std::move(message) });
    }

    std::string nodeLabel(const Node& n)
    {
        return "node '" + n.name + "' (" + std::string(toString(n.op)) + ")";
    }

    bool checkReferences(const Graph& g, Issues& issues)
    {
        bool ok = true;
        for (const auto& n : g.nodes()) {
            for (const auto* list : { &n.inputs, &n.outputs }) {
                for (auto t : *list) {
                    if (t.index() >= g.tensorCount()) {
                        addError(issues,
                            nodeLabel(n) + " refers to tensor #" + std::to_string(t.value)
                                + ", which does not exist (dangling reference)");
                        ok = false;
                    }
                }
            }
        }
        for (auto t : g.outputs()) {
            if (t.index() >= g.tensorCount()) {
                addError(issues, "graph output tensor #" + std::to_string(t.value) + " does not exist");
                ok = false;
            }
        }
        return ok;
    }

    // Producer of each tensor according to the node lists (not the stored producer field).
    std::vector<NodeId> producersFromNodes(const Graph& g, Issues& issues)
    {
        std::vector<NodeId> producer(g.tensorCount());
        for (const auto& n : g.nodes()) {
            for (auto out : n.outputs) {
                if (producer[out.index()].valid())
                    addError(issues,
                        "tensor '" + g.tensor(out).name + "' is produced by both '" + g.node(producer[out.index()]).name
                            + "' and '" + n.name + "'");
                producer[out.index()] = n.id;
            }
        }
        return producer;
    }

    // Kahn's algorithm over node dependencies; returns the nodes left on a cycle, if any.
    std::vector<NodeId> nodesOnCycles(const Graph& g, const std::vector<NodeId>& producer)
    {
        const auto count = g.nodeCount();
        std::vector<std::vector<NodeId>> successors(count);
        std::vector<int> indegree(count, 0);
        for (const auto& n : g.nodes()) {
            for (auto in : n.inputs) {
                if (producer[in.index()].valid()) {
                    successors[producer[in.index()].index()].push_back(n.id);
                    ++indegree[n.id.index()];
                }
            }
        }
        std::vector<NodeId> ready;
        for (std::size_t i = 0; i < count; ++i) {
            if (indegree[i] == 0)
                ready.emplace_back(static_cast<std::uint32_t>(i));
        }
        std::size_t visited = 0;
        while (!ready.empty()) {
            const auto id = ready.back();
            ready.pop_back();
            ++visited;
            for (auto s : successors[id.index()]) {
                if (--indegree[s.index()] == 0)
                    ready.push_back(s);
            }
        }
        std::vector<NodeId> stuck;
        if (visited != count) {
            for (std::size_t i = 0; i < count; ++i) {
                if (indegree[i] > 0)
                    stuck.emplace_back(static_cast<std::uint32_t>(i));
            }
        }
        return stuck;
    }

    void checkOrder(const Graph& g, const std::vector<NodeId>& producer, Issues& issues)
    {
        const auto cycle = nodesOnCycles(g, producer);
        if (!cycle.empty()) {
            std::string names;
            for (std::size_t i = 0; i < cycle.size() && i < 6; ++i)
                names += (i ? ", " : "") + g.node(cycle[i]).name;
            addError(issues,
                "the graph has a cycle through " + std::to_string(cycle.size()) + " nodes: " + names
                    + (cycle.size() > 6 ? ", ..." : ""));
            return;
        }
        for (const auto& n : g.nodes()) {
            for (auto in : n.inputs) {
                const auto p = producer[in.index()];
                if (p.valid() && p >= n.id)
                    addError(issues,
                        nodeLabel(n) + " reads '" + g.tensor(in).name + "' before its producer '" + g.node(p).name
                            + "' runs (nodes are not in topological order)");
            }
        }
    }

    void checkTensors(const Graph& g, const std::vector<NodeId>& producer, Issues& issues)
    {
        const auto consumers = g.consumers();
        const std::unordered_set<TensorId> outputs(g.outputs().begin(), g.outputs().end());
        for (const auto& t : g.tensors()) {
            const bool produced = producer[t.id.index()].valid();
            if (t.kind == TensorKind::Activation && !produced)
                addError(issues, "activation '" + t.name + "' has no producing node (dangling tensor)");
            if (t.kind != TensorKind::Activation && produced)
                addError(issues,
                    std::string(toString(t.kind)) + " '" + t.name + "' is written by node '"
                        + g.node(producer[t.id.index()]).name + "'");
            if (t.kind == TensorKind::Activation && produced && consumers[t.id.index()].empty()
                && !outputs.contains(t.id))
                issues.push_back({ GraphIssue::Severity::Warning,
                    "activation '" + t.name + "' is never used (dangling output of '"
                        + g.node(producer[t.id.index()]).name + "')" });
            if (std::any_of(t.shape.begin(), t.shape.end(), [](auto d) { return d <= 0; }))
                addError(issues, "tensor '" + t.name + "' has a non-positive dimension " + formatShape(t.shape));
        }
    }

    void checkShapes(const Graph& g, Issues& issues)
    {
        for (const auto& n : g.nodes()) {
            std::vector<const Tensor*> inputs;
            for (auto in : n.inputs)
                inputs.push_back(&g.tensor(in));
            try {
                const auto inferred = inferOutputShapes(n, inputs);
                if (!inferred)
                    continue;
                if (inferred->size() != n.outputs.size()) {
                    addError(issues,
                        nodeLabel(n) + " has " + std::to_string(n.outputs.size()) + " outputs, the op produces "
                            + std::to_string(inferred->size()));
                    continue;
                }
                for (std::size_t i = 0; i < inferred->size(); ++i) {
                    const auto& t = g.tensor(n.outputs[i]);
                    if (t.shape != (*inferred)[i])
                        addError(issues,
                            nodeLabel(n) + ": output '" + t.name + "' is stored as " + formatShape(t.shape)
                                + " but the op computes " + formatShape((*inferred)[i]));
                }
            } catch (const Error& e) {
                addError(issues, nodeLabel(n) + ": " + e.what());
            }
        }
    }

    void checkNames(const Graph& g, Issues& issues)
    {
        std::unordered_set<std::string_view> seen;
        for (const auto& n : g.nodes()) {
            if (!seen.insert(n.name).second)
                addError(issues, "two nodes are named '" + n.name + "'");
        }
    }

} // namespace

std::vector<GraphIssue> validateGraph(const Graph& graph)
{
    Issues issues;
    if (!checkReferences(graph, issues))
        return issues; // the remaining checks index tensors by id
    const auto producer = producersFromNodes(graph, issues);
    checkNames(graph, issues);
    checkOrder(graph, producer, issues);
    checkTensors(graph, producer, issues);
    checkShapes(graph, issues);
    return issues;
}

void validateGraphOrThrow(const Graph& graph)
{
    const auto issues = validateGraph(graph);
    const auto errors = std::count_if(
        issues.begin(), issues.end(), [](const auto& i) { return i.severity == GraphIssue::Severity::Error; });
    if (errors == 0)
        return;
    const auto first = std::find_if(
        issues.begin(), issues.end(), [](const auto& i) { return i.severity == GraphIssue::Severity::Error; });
    std::string message = "invalid graph '" + graph.info().name + "': " + first->message;
    if (errors > 1)
        message += " (and " + std::to_string(errors - 1) + " more errors)";
    throw Error(message);
}

} // namespace ps
