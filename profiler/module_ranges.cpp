#include "module_ranges.h"

#include "onnx/onnx_import.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <string_view>

namespace ps::profiler {
namespace {

    constexpr std::string_view kModulePrefix = "nn.Module: ";

    struct TraceModule
    {
        std::string className;
        std::int64_t instance = -1;
    };

    // "nn.Module: GPT2Block_1" -> { GPT2Block, 1 }; nothing for another name.
    std::optional<TraceModule> traceModule(std::string_view name)
    {
        if (!name.starts_with(kModulePrefix))
            return std::nullopt;
        name.remove_prefix(kModulePrefix.size());
        const auto sep = name.find_last_of('_');
        if (sep == std::string_view::npos || sep == 0 || sep + 1 == name.size() || name.size() - sep > 10
            || !std::all_of(name.begin() + static_cast<std::ptrdiff_t>(sep) + 1, name.end(),
                [](unsigned char c) { return std::isdigit(c); }))
            return std::nullopt;
        return TraceModule { std::string(name.substr(0, sep)), std::stoll(std::string(name.substr(sep + 1))) };
    }

    struct GraphModule
    {
        std::string path;
        std::size_t first = 0; // its first node (own or under it) in the window
        std::vector<NodeId> own; // nodes whose scope is the path
        std::vector<NodeId> under; // nodes whose scope is the path or lies under it
    };

    // The graph's modules (within a window) and the trace's module calls, by class.
    struct Modules
    {
        std::map<std::string, std::string> classes; // path -> class, as the import kept them
        std::map<std::string, GraphModule> byPath;
        std::map<std::string, std::vector<const GraphModule*>> byClass; // in the order of their first node
        std::map<std::string, std::map<std::int64_t, std::vector<std::size_t>>> traced; // class -> instance -> spans

        Modules(const Modules&) = delete; // byClass points into byPath
        Modules& operator=(const Modules&) = delete;
        Modules(const Graph& graph, const TraceData& data, NodeWindow window)
            : classes(moduleClassesFromJson(graph.info().configJson))
        {
            if (classes.empty())
                return;
            for (std::size_t i = 0; i < data.spans.size(); ++i) {
                if (const auto m = traceModule(data.spans[i].name); m && data.spans[i].nodes.empty())
                    traced[m->className][m->instance].push_back(i);
            }
            const auto end = std::min(window.end, graph.nodeCount());
            for (auto v = std::min(window.first, end); v < end; ++v) {
                const auto& node = graph.nodes()[v];
                for (std::string path = node.scope; !path.empty();) {
                    if (classes.contains(path)) {
                        auto& m = byPath[path];
                        if (m.under.empty()) {
                            m.path = path;
                            m.first = v;
                        }
                        m.under.push_back(node.id);
                        if (path == node.scope)
                            m.own.push_back(node.id);
                    }
                    const auto dot = path.find_last_of('.');
                    path = dot == std::string::npos ? std::string() : path.substr(0, dot);
                }
            }
            for (const auto& [path, m] : byPath)
                byClass[classes.at(path)].push_back(&m);
            // A module nested in one of its own class (a Block in a Block) shares its first node; the
            // outer one is called first.
            for (auto& [name, modules] : byClass)
                std::stable_sort(modules.begin(), modules.end(), [](const auto* a, const auto* b) {
                    return a->first != b->first ? a->first < b->first : a->path.size() < b->path.size();
                });
        }

        [[nodiscard]] bool isRoot(const std::string& name, std::size_t instances) const
        {
            const auto root = classes.find("");
            return root != classes.end() && root->second == name && instances == 1;
        }
    };

    void name(TraceData& data, const std::vector<std::size_t>& spans, const GraphModule& m, ModuleRanges& out)
    {
        for (const auto s : spans) {
            data.spans[s].name = m.path;
            data.spans[s].nodes = m.own.empty() ? m.under : m.own;
            out.spans.push_back(s);
        }
        ++out.modules;
    }

    std::string counts(const std::string& name, std::size_t traced, std::size_t inGraph)
    {
        return "the trace has " + std::to_string(traced) + " " + name + ", the model " + std::to_string(inGraph);
    }

    // For each candidate module: how many of the nodes of the operators aligned inside `calls` lie
    // in it. `aligned`: the alignment's ranges by thread, by start.
    std::vector<std::size_t> votesOf(const TraceData& data, const std::vector<std::size_t>& calls,
        const std::map<std::int64_t, std::vector<std::size_t>>& aligned,
        const std::vector<const GraphModule*>& candidates)
    {
        std::vector<std::size_t> count(candidates.size(), 0);
        for (const auto s : calls) {
            const auto& call = data.spans[s];
            const auto ops = aligned.find(call.thread);
            if (ops == aligned.end())
                continue;
            auto at = std::lower_bound(ops->second.begin(), ops->second.end(), call.startNs,
                [&data](std::size_t op, double t) { return data.spans[op].startNs < t; });
            for (; at != ops->second.end() && data.spans[*at].startNs < call.endNs; ++at) {
                if (data.spans[*at].endNs > call.endNs)
                    continue;
                for (const auto node : data.spans[*at].nodes) {
                    for (std::size_t c = 0; c < candidates.size(); ++c) {
                        const auto& under = candidates[c]->under;
                        count[c] += std::binary_search(under.begin(), under.end(), node,
                                        [](NodeId x, NodeId y) { return x.index() < y.index(); })
                            ? 1
                            : 0;
                    }
                }
            }
        }
        return count;
    }

} // namespace

ModuleRanges nameModuleRanges(const Graph& graph, TraceData& data, NodeWindow window)
{
    ModuleRanges out;
    const Modules m(graph, data, window);
    for (const auto& [cls, instances] : m.traced) {
        out.calls += instances.size();
        if (m.isRoot(cls, instances.size()))
            continue; // the model itself: every node, no module's own
        const auto it = m.byClass.find(cls);
        const std::size_t inGraph = it == m.byClass.end() ? 0 : it->second.size();
        if (inGraph != instances.size()) {
            out.leftOut.push_back(cls + " (" + counts(cls, instances.size(), inGraph) + ")");
            continue;
        }
        std::size_t k = 0;
        for (const auto& [instance, spans] : instances) // by the profiler's number: first seen first
            name(data, spans, *it->second[k++], out);
    }
    return out;
}

void nameModuleRangesByAlignment(const Graph& graph, TraceData& data, ModuleRanges& ranges, NodeWindow window)
{
    const Modules m(graph, data, window); // the calls not named yet
    // The ranges alignment added over the operators it aligned, by thread, by start.
    std::map<std::int64_t, std::vector<std::size_t>> aligned;
    for (std::size_t i = 0; i < data.spans.size(); ++i) {
        if (!data.spans[i].python && !data.spans[i].nodes.empty())
            aligned[data.spans[i].thread].push_back(i);
    }
    for (auto& [thread, ops] : aligned)
        std::sort(ops.begin(), ops.end(),
            [&data](std::size_t a, std::size_t b) { return data.spans[a].startNs < data.spans[b].startNs; });
    std::vector<std::string> stillLeft;
    for (const auto& [cls, instances] : m.traced) {
        if (m.isRoot(cls, instances.size()))
            continue;
        const auto it = m.byClass.find(cls);
        if (it == m.byClass.end()) {
            stillLeft.push_back(cls + " (" + counts(cls, instances.size(), 0) + ")");
            continue;
        }
        const auto& candidates = it->second;
        // Votes: the candidate holding each aligned operator's nodes, over every call of an
        // instance. Instances take modules greedily, most votes first, each module once.
        struct Vote
        {
            std::size_t votes = 0;
            std::int64_t instance = 0;
            std::size_t candidate = 0;
        };
        std::vector<Vote> votes;
        for (const auto& [instance, spans] : instances) {
            const auto count = votesOf(data, spans, aligned, candidates);
            for (std::size_t c = 0; c < candidates.size(); ++c) {
                if (count[c] > 0)
                    votes.push_back({ count[c], instance, c });
            }
        }
        std::stable_sort(votes.begin(), votes.end(), [](const Vote& x, const Vote& y) { return x.votes > y.votes; });
        std::set<std::int64_t> named;
        std::set<std::size_t> taken;
        for (const auto& v : votes) {
            if (named.contains(v.instance) || taken.contains(v.candidate))
                continue;
            named.insert(v.instance);
            taken.insert(v.candidate);
            name(data, instances.at(v.instance), *candidates[v.candidate], ranges);
        }
        for (const auto& [instance, spans] : instances) {
            if (named.contains(instance))
                continue;
            const bool voted =
                std::any_of(votes.begin(), votes.end(), [id = instance](const Vote& v) { return v.instance == id; });
            stillLeft.push_back(cls + "_" + std::to_string(instance)
                + (voted ? " (its aligned operators point to no module left; " : " (no aligned operator inside; ")
                + counts(cls, instances.size(), candidates.size()) + ")");
        }
    }
    ranges.leftOut = std::move(stillLeft);
}

} // namespace ps::profiler
