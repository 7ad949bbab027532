#include "trace_model.h"

#include "graph/op_cost.h"
#include "text.h"
#include "trace_timeline.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>

namespace ps::profiler {
namespace {

    enum class Phase { Forward, Backward };

    struct PhaseSuffix
    {
        std::string_view suffix;
        Phase phase;
    };

    constexpr std::array kPhaseSuffixes { PhaseSuffix { ".backward", Phase::Backward },
        PhaseSuffix { ":backward", Phase::Backward }, PhaseSuffix { "/backward", Phase::Backward },
        PhaseSuffix { ".bwd", Phase::Backward }, PhaseSuffix { ":bwd", Phase::Backward },
        PhaseSuffix { "_bwd", Phase::Backward }, PhaseSuffix { ".forward", Phase::Forward },
        PhaseSuffix { ":forward", Phase::Forward }, PhaseSuffix { "/forward", Phase::Forward },
        PhaseSuffix { ".fwd", Phase::Forward }, PhaseSuffix { ":fwd", Phase::Forward },
        PhaseSuffix { "_fwd", Phase::Forward } };

    // "AddmmBackward0", "NativeLayerNormBackward0, seq = 12" (emit_nvtx): an autograd function.
    bool namesAutogradFunction(std::string_view name)
    {
        if (name.starts_with("autograd::engine::evaluate_function"))
            return true;
        const auto at = name.find("Backward");
        if (at == std::string_view::npos)
            return false;
        const auto next = at + 8;
        return next == name.size() || std::isdigit(static_cast<unsigned char>(name[next])) || name[next] == ','
            || name[next] == ' ';
    }

    bool isBackwardMarker(std::string_view name)
    {
        return toLower(name) == "backward" || namesAutogradFunction(name);
    }

    // Node names and scopes (with every dotted prefix of a scope) to the nodes they stand for.
    class NameIndex
    {
    public:
        explicit NameIndex(const Graph& graph)
        {
            for (const auto& n : graph.nodes()) {
                m_names[n.name].push_back(n.id);
                for (auto dot = n.scope.find('.'); dot != std::string::npos; dot = n.scope.find('.', dot + 1))
                    m_scopes[n.scope.substr(0, dot)].push_back(n.id);
                if (!n.scope.empty())
                    m_scopes[n.scope].push_back(n.id);
                // The module a node's dotted name lies in ("head" for "head.matmul"), where no
                // scope says it: a range named after the module covers the node.
                for (auto dot = n.name.find('.'); dot != std::string::npos; dot = n.name.find('.', dot + 1))
                    m_scopes[n.name.substr(0, dot)].push_back(n.id);
            }
            for (auto& [scope, nodes] : m_scopes) { // a node under a scope and a name prefix alike: once
                std::sort(nodes.begin(), nodes.end(), [](NodeId a, NodeId b) { return a.index() < b.index(); });
                nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
            }
        }

        // The nodes `name` stands for (a node name before a scope), with the phase its suffix names.
        const std::vector<NodeId>* find(const std::string& name, std::optional<Phase>& phase) const
        {
            phase.reset();
            if (const auto* nodes = lookup(name))
                return nodes;
            for (const auto& s : kPhaseSuffixes) {
                if (name.size() > s.suffix.size() && name.ends_with(s.suffix)) {
                    if (const auto* nodes = lookup(name.substr(0, name.size() - s.suffix.size()))) {
                        phase = s.phase;
                        return nodes;
                    }
                }
            }
            return nullptr;
        }

    private:
        const std::vector<NodeId>* lookup(const std::string& name) const
        {
            if (const auto it = m_names.find(name); it != m_names.end())
                return &it->second;
            if (const auto it = m_scopes.find(name); it != m_scopes.end())
                return &it->second;
            return nullptr;
        }

        std::unordered_map<std::string, std::vector<NodeId>> m_names;
        std::unordered_map<std::string, std::vector<NodeId>> m_scopes;
    };

    // Operators that initialise or copy tensors (`torch.nn.init`'s, `model.to("cuda")`'s, a random
    // input's): before the first node's work, they set the model and its inputs up.
    bool initialisesOrCopies(std::string_view name)
    {
        for (const char* op : { "aten::uniform_", "aten::normal_", "aten::zero_", "aten::fill_", "aten::rand",
                 "aten::randn", "aten::randint", "aten::zeros", "aten::ones", "aten::full", "aten::to",
                 "aten::_to_copy", "aten::copy_" }) {
            if (name == op)
                return true;
        }
        return false;
    }

    // What encloses a point of a thread's timeline.
    struct Context
    {
        int mapped = -1; // the innermost span naming nodes
        int outer = -1; // the outermost one: one occurrence (micro-batch, iteration) of what it covers
        bool backwardMarker = false;
        bool optimizer = false; // inside an optimizer range
        bool zeroGrad = false; // inside the optimizer's zero_grad ("Optimizer.zero_grad#AdamW.zero_grad")
        bool communication = false; // inside a send, receive or collective
        int backwardOp = -1; // the innermost autograd function carrying a sequence number
        int outerOp = -1; // the outermost framework operator (`aten::to` around a copy's runtime call)
    };

    struct SpanInfo
    {
        const std::vector<NodeId>* nodes = nullptr;
        std::optional<Phase> phase; // from the name's suffix
        Context context; // including the span itself
        double selfNs = 0;
    };

    struct Query
    {
        double atNs = 0;
        std::size_t work = 0;
    };

    class Attributor
    {
    public:
        Attributor(const Graph& graph, const TraceData& data)
            : m_data(data)
            , m_index(graph)
            , m_costs(computeOpCosts(graph))
            , m_info(data.spans.size())
            , m_workContext(data.work.size())
        {
            m_result.format = data.format;
            m_result.schemaVersion = data.schemaVersion;
            m_result.deviceActivity = !data.work.empty();
            m_result.gpuName = data.gpu.name;
            m_result.gpuMemoryBytes = data.gpu.memoryBytes;
            m_result.nodes.resize(graph.nodeCount());
            m_sums.resize(graph.nodeCount());
        }

        TraceImport run()
        {
            std::vector<std::pair<double, double>> steps;
            std::vector<std::pair<double, double>> optimizerRanges;
            for (std::size_t i = 0; i < m_data.spans.size(); ++i) {
                const auto& span = m_data.spans[i];
                if (!span.nodes.empty())
                    m_info[i].nodes = &span.nodes; // aligned, or a module range (module_ranges.h)
                else if (!span.python) // other Python functions name no node
                    m_info[i].nodes = m_index.find(span.name, m_info[i].phase);
                m_result.ranges += m_info[i].nodes && span.nodes.empty() ? 1 : 0; // the trace's own ranges
                if (isProfilerStep(span.name))
                    steps.emplace_back(span.startNs, span.endNs);
                if (isOptimizerRange(span.name))
                    optimizerRanges.emplace_back(span.startNs, span.endNs);
                if (m_info[i].nodes)
                    m_firstMappedNs = std::min(m_firstMappedNs, span.startNs);
            }
            if (std::isinf(m_firstMappedNs))
                m_firstMappedNs = -std::numeric_limits<double>::infinity();
            sweepThreads();
            indexForwardOps();
            if (m_data.work.empty()) {
                for (std::size_t i = 0; i < m_data.spans.size(); ++i) {
                    const auto& span = m_data.spans[i];
                    // A ProfilerStep's or a Python function's self time is Python's or the profiler's.
                    if (m_info[i].selfNs > 0 && !span.python && !isProfilerStep(span.name))
                        attribute(
                            span.name, m_info[i].selfNs, m_info[i].context, span.thread, { span.startNs, span.endNs });
                }
            } else {
                for (std::size_t w = 0; w < m_data.work.size(); ++w) {
                    const auto& work = m_data.work[w];
                    attribute(work.name, work.durationNs, m_workContext[w], work.launchThread,
                        { work.startNs, work.startNs + work.durationNs }, work.launchThread >= 0 ? work.launchNs : -1);
                }
            }
            finish();
            m_result.iterations = buildTraceTimeline(std::move(m_timed), std::move(steps), std::move(optimizerRanges));
            return std::move(m_result);
        }

    private:
        void sweepThreads()
        {
            std::map<std::int64_t, std::vector<int>> spansByThread;
            for (std::size_t i = 0; i < m_data.spans.size(); ++i)
                spansByThread[m_data.spans[i].thread].push_back(static_cast<int>(i));
            std::map<std::int64_t, std::vector<Query>> queriesByThread;
            for (std::size_t w = 0; w < m_data.work.size(); ++w) {
                if (m_data.work[w].launchThread >= 0)
                    queriesByThread[m_data.work[w].launchThread].push_back({ m_data.work[w].launchNs, w });
            }
            for (auto& [thread, spans] : spansByThread) {
                std::sort(spans.begin(), spans.end(), [&](int a, int b) {
                    const auto& x = m_data.spans[a];
                    const auto& y = m_data.spans[b];
                    if (x.startNs != y.startNs)
                        return x.startNs < y.startNs;
                    if (x.endNs != y.endNs)
                        return x.endNs > y.endNs;
                    return !x.nodes.empty() && y.nodes.empty(); // an aligned range encloses its operator
                });
                auto& queries = queriesByThread[thread];
                std::sort(
                    queries.begin(), queries.end(), [](const Query& a, const Query& b) { return a.atNs < b.atNs; });
                sweep(spans, queries);
            }
        }

        // One thread: spans nest (a stack), so the stack at any time holds what encloses it.
        void sweep(const std::vector<int>& spans, const std::vector<Query>& queries)
        {
            struct Frame
            {
                int span;
                double childNs = 0;
            };
            std::vector<Frame> stack;
            const auto endOf = [&](const Frame& f) { return m_data.spans[f.span].endNs; };
            const auto pop = [&] {
                const auto& f = stack.back();
                const auto& s = m_data.spans[f.span];
                m_info[f.span].selfNs = std::max(0.0, s.endNs - s.startNs - f.childNs);
                stack.pop_back();
            };
            const auto top = [&] { return stack.empty() ? Context {} : m_info[stack.back().span].context; };
            std::size_t q = 0;
            const auto answerBefore = [&](double t, bool inclusive) {
                for (; q < queries.size() && (queries[q].atNs < t || (inclusive && queries[q].atNs == t)); ++q) {
                    while (!stack.empty() && endOf(stack.back()) < queries[q].atNs)
                        pop();
                    m_workContext[queries[q].work] = top();
                }
            };
            for (const int i : spans) {
                const auto& s = m_data.spans[i];
                answerBefore(s.startNs, false);
                while (!stack.empty() && endOf(stack.back()) <= s.startNs)
                    pop();
                Context c = top();
                if (m_info[i].nodes) {
                    c.mapped = i;
                    c.outer = c.outer < 0 ? i : c.outer;
                }
                c.backwardMarker = c.backwardMarker || isBackwardMarker(s.name);
                c.optimizer = c.optimizer || isOptimizerRange(s.name);
                c.zeroGrad = c.zeroGrad || toLower(s.name).starts_with("optimizer.zero_grad");
                c.communication = c.communication || isCommunication(s.name);
                if (s.sequence >= 0 && namesAutogradFunction(s.name))
                    c.backwardOp = i;
                if (s.op && c.outerOp < 0)
                    c.outerOp = i;
                m_info[i].context = c;
                if (!stack.empty())
                    stack.back().childNs += std::max(0.0, std::min(s.endNs, endOf(stack.back())) - s.startNs);
                stack.push_back({ i });
            }
            answerBefore(std::numeric_limits<double>::infinity(), true);
            while (!stack.empty())
                pop();
        }

        void indexForwardOps()
        {
            for (std::size_t i = 0; i < m_data.spans.size(); ++i) {
                const auto& s = m_data.spans[i];
                if (s.sequence >= 0 && !namesAutogradFunction(s.name))
                    m_forwardOps[s.sequence].push_back(static_cast<int>(i));
            }
        }

        // The forward op with the backward op's sequence number that started last before it.
        int forwardOpOf(int backwardOp) const
        {
            const auto& b = m_data.spans[backwardOp];
            const auto it = m_forwardOps.find(b.sequence);
            if (it == m_forwardOps.end())
                return -1;
            int best = -1;
            for (const int f : it->second) {
                if (m_data.spans[f].startNs <= b.startNs
                    && (best < 0 || m_data.spans[f].startNs > m_data.spans[best].startNs))
                    best = f;
            }
            return best;
        }

        struct Sums
        {
            double ns[2] = { 0, 0 };
            std::set<std::int64_t> occurrences[2];
        };

        void attribute(const std::string& name, double ns, const Context& c, std::int64_t thread,
            std::pair<double, double> interval, double anchorNs = -1)
        {
            ++m_result.activities;
            m_result.totalNs += ns;
            int range = c.mapped;
            Phase phase = Phase::Forward;
            std::int64_t occurrence = occurrenceOf(c.outer);
            if (range >= 0) {
                const bool backward = c.backwardMarker || m_data.autogradThread(thread);
                phase = m_info[range].phase.value_or(backward ? Phase::Backward : Phase::Forward);
            } else if (c.backwardOp >= 0) {
                const int forward = forwardOpOf(c.backwardOp);
                range = forward >= 0 ? m_info[forward].context.mapped : -1;
                phase = Phase::Backward;
                occurrence = forward >= 0 ? occurrenceOf(m_info[forward].context.outer) : -1; // its forward's
            }
            if (range < 0) {
                if (c.optimizer) { // the optimizer step's work: reported as such, not as unmatched
                    m_timed.push_back({ interval.first, interval.second, TraceActionKind::Optimizer, 0, anchorNs });
                    ++m_result.optimizerActivities;
                    m_result.optimizerNs += ns;
                    return;
                }
                if (c.zeroGrad) { // the optimizer's too, though not its step (the timeline's OPT action)
                    ++m_result.optimizerActivities;
                    m_result.optimizerNs += ns;
                    return;
                }
                if (c.communication || isCommunication(name)) { // a rank's sends and waits: not a node's
                    ++m_result.communicationActivities;
                    m_result.communicationNs += ns;
                    return;
                }
                if ((anchorNs >= 0 ? anchorNs : interval.first) < m_firstMappedNs
                    && (isHostToDeviceCopy(name)
                        || (c.outerOp >= 0 && initialisesOrCopies(m_data.spans[c.outerOp].name)))) {
                    ++m_result.setupActivities;
                    m_result.setupNs += ns;
                    return;
                }
                if (isHostToDeviceCopy(name)) { // an input batch on its way
                    ++m_result.inputCopyActivities;
                    m_result.inputCopyNs += ns;
                    return;
                }
                ++m_result.unmatchedActivities;
                m_result.unmatchedNs += ns;
                auto& u = m_unmatched[name];
                ++u.count;
                u.totalNs += ns;
                return;
            }
            ++m_result.matchedActivities;
            m_result.matchedNs += ns;
            const auto& nodes = *m_info[range].nodes;
            const bool forward = phase == Phase::Forward;
            m_timed.push_back(
                { interval.first, interval.second, forward ? TraceActionKind::Forward : TraceActionKind::Backward,
                    (forward ? nodes.front() : nodes.back()).index(), anchorNs });
            split(nodes, phase, ns, occurrence);
        }

        // One occurrence of what a range covers: the range itself, or the forward pass operator
        // alignment found it in (several operators of one pass may feed one node).
        std::int64_t occurrenceOf(int outer) const
        {
            return outer >= 0 && m_data.spans[outer].pass >= 0 ? -2 - m_data.spans[outer].pass : outer;
        }

        // A scope's time goes to its nodes in proportion to their FLOPs in that phase (evenly
        // when they have none).
        void split(const std::vector<NodeId>& nodes, Phase phase, double ns, std::int64_t occurrence)
        {
            const auto p = static_cast<int>(phase);
            const auto flops = [&](NodeId id) {
                const auto& c = m_costs[id.index()];
                return phase == Phase::Forward ? c.forwardFlops : c.backwardFlops;
            };
            double total = 0;
            for (const auto id : nodes)
                total += flops(id);
            for (const auto id : nodes) {
                const double share = total > 0 ? flops(id) / total : 1.0 / static_cast<double>(nodes.size());
                auto& s = m_sums[id.index()];
                s.ns[p] += ns * share;
                s.occurrences[p].insert(occurrence);
            }
        }

        void finish()
        {
            for (std::size_t i = 0; i < m_sums.size(); ++i) {
                const auto& s = m_sums[i];
                auto& n = m_result.nodes[i];
                n.forwardOccurrences = static_cast<std::int64_t>(s.occurrences[0].size());
                n.backwardOccurrences = static_cast<std::int64_t>(s.occurrences[1].size());
                n.forwardNs = n.forwardOccurrences > 0 ? s.ns[0] / static_cast<double>(n.forwardOccurrences) : 0.0;
                n.backwardNs = n.backwardOccurrences > 0 ? s.ns[1] / static_cast<double>(n.backwardOccurrences) : 0.0;
                m_result.nodesMatched += n.forwardOccurrences + n.backwardOccurrences > 0 ? 1 : 0;
            }
            for (const auto& [name, u] : m_unmatched)
                m_result.unmatched.push_back({ name, u.count, u.totalNs });
            std::sort(m_result.unmatched.begin(), m_result.unmatched.end(),
                [](const UnmatchedName& a, const UnmatchedName& b) { return a.totalNs > b.totalNs; });
            if (m_result.unmatched.size() > 10)
                m_result.unmatched.resize(10);
        }

        const TraceData& m_data;
        NameIndex m_index;
        std::vector<OpCost> m_costs;
        std::vector<SpanInfo> m_info;
        std::vector<Context> m_workContext;
        std::map<std::int64_t, std::vector<int>> m_forwardOps; // by sequence number
        std::vector<Sums> m_sums;
        std::map<std::string, UnmatchedName> m_unmatched;
        std::vector<TimedActivity> m_timed; // for the timeline
        TraceImport m_result;
        // Where the first span naming nodes starts; -infinity where none does (nothing is set-up).
        double m_firstMappedNs = std::numeric_limits<double>::infinity();
    };

} // namespace

bool TraceData::autogradThread(std::int64_t thread) const
{
    const auto it = threadNames.find(thread);
    return it != threadNames.end() && toLower(it->second).find("autograd") != std::string::npos;
}

TraceImport mapTraceToNodes(const Graph& graph, const TraceData& data)
{
    return Attributor(graph, data).run();
}

} // namespace ps::profiler
