#include "trace_import.h"

#include "graph/op_cost.h"
#include "module_ranges.h"
#include "op_alignment.h"
#include "trace_model.h"
#include "util/error.h"

#include <algorithm>
#include <array>
#include <fstream>
#include <iterator>
#include <map>
#include <string_view>
#include <zlib.h>

namespace ps::profiler {
namespace {

    constexpr std::string_view kSqliteMagic { "SQLite format 3\0", 16 };

    std::string readAll(const std::filesystem::path& path)
    {
        std::ifstream in(path, std::ios::binary);
        if (!in)
            throw Error("cannot read '" + path.string() + "'");
        return { std::istreambuf_iterator<char>(in), {} };
    }

    // A gzip file's content (torch writes one for export_chrome_trace("trace.json.gz")).
    std::string gunzip(const std::filesystem::path& path)
    {
        gzFile in = gzopen(path.string().c_str(), "rb");
        if (in == nullptr)
            throw Error("cannot read '" + path.string() + "'");
        std::string out;
        std::array<char, 1 << 16> buffer {};
        int got = 0;
        while ((got = gzread(in, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0)
            out.append(buffer.data(), static_cast<std::size_t>(got));
        int code = 0;
        const std::string message = got < 0 ? gzerror(in, &code) : "";
        gzclose(in);
        if (got < 0)
            throw Error("'" + path.string() + "' is not a readable gzip file: " + message);
        return out;
    }

    char firstNonSpace(const std::string& text)
    {
        for (const char c : text) {
            if (c != ' ' && c != '\t' && c != '\r' && c != '\n')
                return c;
        }
        return '\0';
    }

    TraceData readTrace(const std::filesystem::path& path)
    {
        const auto file = "'" + path.string() + "'";
        if (std::filesystem::is_directory(path))
            throw Error(file + " is a directory, not a trace");
        auto text = readAll(path);
        if (text.empty())
            throw Error(file + " is empty, not a trace");
        if (std::string_view(text).starts_with(kSqliteMagic))
            return readNsysSqlite(path);
        if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x1f
            && static_cast<unsigned char>(text[1]) == 0x8b) {
            text = gunzip(path);
            if (text.empty())
                throw Error(file + " holds an empty gzip stream, not a trace");
            if (const char c = firstNonSpace(text); c != '{' && c != '[')
                throw Error(file + " is gzip-compressed but not a PyTorch profiler JSON trace");
        }
        if (const char c = firstNonSpace(text); c == '{' || c == '[')
            return readChromeTraceJson(path, text);
        throw Error(file + " is neither an Nsight Systems SQLite export nor a PyTorch profiler JSON trace");
    }

} // namespace

TraceImport importTrace(const Graph& graph, const std::filesystem::path& path, NodeWindow window)
{
    auto data = readTrace(path);
    auto modules = nameModuleRanges(graph, data, window);
    const auto withModules = [&modules](TraceImport r) {
        r.moduleRanges = static_cast<std::int64_t>(modules.spans.size());
        r.modules = modules.modules;
        r.modulesNotNamed = modules.leftOut;
        return r;
    };
    auto ranged = withModules(mapTraceToNodes(graph, data));
    if (modules.calls == 0 && ranged.coverage() >= 0.5)
        return ranged;
    // Ranges name no node, or cover little (an unannotated torch.profiler trace, a stray range
    // named like a scope): align the operators by order, and keep that where it covers more.
    // Module calls (a with_stack trace) leave a module's own nodes to share its operators' time:
    // inside them an aligned operator names its own nodes, and the module ranges are kept where
    // they cover at least what the alignment covers alone.
    const auto alignment = alignOperators(graph, data, window);
    if (alignment.alignedOperators == 0)
        return ranged;
    nameModuleRangesByAlignment(graph, data, modules, window);
    auto best = withModules(mapTraceToNodes(graph, data));
    if (!modules.spans.empty()) {
        for (const auto s : modules.spans)
            data.spans[s].nodes.clear();
        if (auto alone = mapTraceToNodes(graph, data); alone.coverage() > best.coverage()) {
            alone.modulesNotNamed = { "every module range: the alignment alone covers more" };
            best = std::move(alone);
        }
    }
    const bool better =
        modules.spans.empty() ? best.coverage() > ranged.coverage() : best.coverage() >= ranged.coverage();
    if (!better)
        return ranged;
    best.aligned = true;
    best.alignment = alignment;
    return best;
}

TraceImport mergeStageTraces(const std::vector<TraceImport>& stages, const std::vector<NodeWindow>& windows)
{
    if (stages.empty() || stages.size() != windows.size())
        throw Error("merging stage traces needs one window per trace");
    TraceImport merged;
    merged.format = stages.front().format;
    merged.schemaVersion = stages.front().schemaVersion;
    merged.gpuName = stages.front().gpuName;
    merged.gpuMemoryBytes = stages.front().gpuMemoryBytes;
    merged.nodes.resize(stages.front().nodes.size());
    std::map<std::string, UnmatchedName> unmatched;
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto& t = stages[s];
        if (t.nodes.size() != merged.nodes.size())
            throw Error("the stage traces were imported onto graphs of different sizes");
        merged.deviceActivity = merged.deviceActivity || t.deviceActivity;
        merged.activities += t.activities;
        merged.matchedActivities += t.matchedActivities;
        merged.unmatchedActivities += t.unmatchedActivities;
        merged.totalNs += t.totalNs;
        merged.matchedNs += t.matchedNs;
        merged.unmatchedNs += t.unmatchedNs;
        merged.optimizerActivities += t.optimizerActivities;
        merged.optimizerNs += t.optimizerNs;
        merged.communicationActivities += t.communicationActivities;
        merged.communicationNs += t.communicationNs;
        merged.setupActivities += t.setupActivities;
        merged.setupNs += t.setupNs;
        merged.inputCopyActivities += t.inputCopyActivities;
        merged.inputCopyNs += t.inputCopyNs;
        merged.ranges += t.ranges;
        merged.aligned = merged.aligned || t.aligned;
        merged.alignment.passes += t.alignment.passes;
        merged.alignment.passesTooLarge += t.alignment.passesTooLarge;
        merged.alignment.operators += t.alignment.operators;
        merged.alignment.alignedOperators += t.alignment.alignedOperators;
        merged.alignment.nodesCovered += t.alignment.nodesCovered;
        merged.alignment.nodes += t.alignment.nodes;
        for (const auto& u : t.unmatched) {
            auto& m = unmatched[u.name];
            m.name = u.name;
            m.count += u.count;
            m.totalNs += u.totalNs;
        }
        const auto end = std::min(windows[s].end, merged.nodes.size());
        for (auto v = std::min(windows[s].first, end); v < end; ++v)
            merged.nodes[v] = t.nodes[v];
    }
    for (const auto& n : merged.nodes)
        merged.nodesMatched += n.forwardOccurrences + n.backwardOccurrences > 0 ? 1 : 0;
    for (auto& [name, u] : unmatched)
        merged.unmatched.push_back(u);
    std::sort(merged.unmatched.begin(), merged.unmatched.end(),
        [](const UnmatchedName& a, const UnmatchedName& b) { return a.totalNs > b.totalNs; });
    if (merged.unmatched.size() > 10)
        merged.unmatched.resize(10);
    return merged;
}

Profile toImportedProfile(
    const Graph& graph, const TraceImport& trace, const std::string& deviceKind, std::int64_t microBatch)
{
    if (trace.nodes.size() != graph.nodeCount())
        throw Error("the imported trace does not match the graph's " + std::to_string(graph.nodeCount()) + " nodes");
    if (microBatch < 1)
        throw Error("the micro-batch size of a trace must be positive, got " + std::to_string(microBatch));
    const auto costs = computeOpCosts(graph);
    const auto traceBatch = static_cast<double>(microBatch);
    const auto graphBatch = static_cast<double>(std::max<std::int64_t>(1, graph.info().microBatch));
    const auto perSample = [](double value, double batch) { return LinearModel { 0, value / batch }; };
    Profile p;
    p.deviceKind = deviceKind;
    p.source = "imported";
    for (std::size_t i = 0; i < graph.nodeCount(); ++i) {
        const auto& t = trace.nodes[i];
        const auto& c = costs[i];
        NodeProfile n;
        n.forwardNs = perSample(t.forwardNs, traceBatch);
        n.backwardNs = perSample(t.backwardNs, traceBatch);
        const double share = c.backwardFlops > 0 ? c.weightGradFlops / c.backwardFlops : 0.0;
        n.weightGradNs = perSample(t.backwardNs * share, traceBatch);
        n.outputBytes = perSample(static_cast<double>(c.outputBytes), graphBatch);
        n.savedBytes = perSample(static_cast<double>(c.savedBytes), graphBatch);
        n.workspaceBytes = perSample(static_cast<double>(c.workspaceBytes), graphBatch);
        n.parameterCount = c.parameterCount;
        p.nodes.push_back(n);
    }
    // The optimizer step the trace timed (its Optimizer.step ranges), per parameter: the median
    // over iterations, a first iteration's allocation of the states included among them.
    std::vector<double> optimizerNs;
    for (const auto& it : trace.iterations) {
        for (const auto& a : it.actions) {
            if (a.kind == TraceActionKind::Optimizer)
                optimizerNs.push_back(a.endNs - a.startNs);
        }
    }
    std::int64_t parameters = 0;
    for (const auto& t : graph.tensors())
        parameters += t.kind == TensorKind::Parameter ? numElements(t.shape) : 0;
    if (!optimizerNs.empty() && parameters > 0) {
        std::sort(optimizerNs.begin(), optimizerNs.end());
        p.setup.optimizerNsPerParameter = optimizerNs[optimizerNs.size() / 2] / static_cast<double>(parameters);
    }
    return p;
}

} // namespace ps::profiler
