// Operator alignment (op_alignment.h).
#include "op_alignment.h"

#include "aten_ops.h"
#include "trace_timeline.h"
#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>

namespace ps::profiler {
namespace {

    using enum OpType;

    // An operator on single values only (BatchNorm's num_batches_tracked += 1, a step counter).
    const AtenKind kScalarUpdate { {}, {}, true };

    bool isViewNode(const Node& n)
    {
        return n.op == Reshape || n.op == Transpose || n.op == Split || n.op == Slice || n.op == Expand
            || n.op == Select || n.op == Cast;
    }

    bool contains(const std::vector<OpType>& v, OpType op)
    {
        return std::find(v.begin(), v.end(), op) != v.end();
    }

    // Scores of the alignment: a match beats skipping both sides; views are free to skip.
    constexpr int kMatch = 4;
    constexpr int kShapeBonus = 2;
    constexpr int kAbsorb = 1;
    constexpr int kViewMatch = 1;
    constexpr int kSkip = -1;
    constexpr int kMaxAbsorb = 8;
    constexpr std::size_t kMaxCells = std::size_t { 64 } << 20;

    struct Operator
    {
        int span;
        const AtenKind* kind; // null: an operator the table does not know
    };

    // "aten::native_layer_norm", "NativeLayerNormBackward0" and "autograd::engine::evaluate_function:
    // NativeLayerNormBackward0" all give "nativelayernorm": how a backward function names its forward.
    std::string normalized(std::string_view name)
    {
        constexpr std::string_view kEvaluate = "autograd::engine::evaluate_function: ";
        if (name.starts_with(kEvaluate))
            name.remove_prefix(kEvaluate.size());
        if (const auto c = name.rfind("::"); c != std::string_view::npos)
            name.remove_prefix(c + 2);
        if (const auto b = name.find("Backward"); b != std::string_view::npos)
            name = name.substr(0, b);
        std::string out;
        for (const char ch : name) {
            if (ch != '_')
                out += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        return out;
    }

    bool isBackwardFunction(std::string_view name)
    {
        return name.starts_with("autograd::engine::evaluate_function: ");
    }

    // The dynamic programme of a sequence alignment: the best score of having consumed i items of
    // one side and j of the other, and the move that reached it.
    class AlignmentTable
    {
    public:
        static constexpr int kNone = std::numeric_limits<int>::min() / 2;

        AlignmentTable(std::size_t n, std::size_t m)
            : m_columns(m + 1)
            , m_score((n + 1) * (m + 1), kNone)
            , m_move((n + 1) * (m + 1), -1)
        {
            m_score[0] = 0;
        }
        [[nodiscard]] int score(std::size_t i, std::size_t j) const
        {
            return m_score[i * m_columns + j];
        }
        [[nodiscard]] std::int8_t move(std::size_t i, std::size_t j) const
        {
            return m_move[i * m_columns + j];
        }
        void relax(std::size_t i, std::size_t j, int value, std::int8_t how)
        {
            if (value > m_score[i * m_columns + j]) {
                m_score[i * m_columns + j] = value;
                m_move[i * m_columns + j] = how;
            }
        }

    private:
        std::size_t m_columns;
        std::vector<int> m_score;
        std::vector<std::int8_t> m_move;
    };

    // A forward pass as aligned: where it ends and its operators' nodes, in order.
    struct AlignedPass
    {
        std::int64_t index = 0;
        double startNs = 0;
        double endNs = 0;
        std::vector<std::pair<int, std::pair<std::size_t, std::size_t>>> matches; // operator span, nodes [first, end)
    };

    class Aligner
    {
    public:
        Aligner(const Graph& graph, TraceData& data, NodeWindow window)
            : m_graph(graph)
            , m_data(data)
            , m_first(std::min(window.first, graph.nodeCount()))
            , m_end(std::clamp(window.end, m_first, graph.nodeCount()))
        {
            for (auto v = m_first; v < m_end; ++v) {
                if (!isViewNode(graph.nodes()[v]))
                    ++m_stats.nodes;
            }
            m_covered.assign(graph.nodeCount(), false);
        }

        AlignmentStats run()
        {
            for (const auto& pass : forwardPasses()) {
                m_stats.operators += computing(pass);
                std::span<const Operator> rest(pass);
                while (!rest.empty()) {
                    const auto [first, used] = align(rest); // from its first to its last matched operator
                    // Another forward right after it (GPipe's F F ..., a forward-only loop): about as
                    // many operators again as the aligned ones (not counting set-up work before them:
                    // parameters initialised and copied to the device).
                    const auto tail = rest.subspan(used);
                    if (used == 0 || 4 * computing(tail) < 3 * computing(rest.subspan(first, used - first)))
                        break;
                    rest = tail;
                }
            }
            alignBackwardByOrder();
            m_stats.nodesCovered = static_cast<std::size_t>(std::count(m_covered.begin(), m_covered.end(), true));
            for (auto& s : m_newSpans)
                m_data.spans.push_back(std::move(s));
            return m_stats;
        }

    private:
        static bool backwardRange(std::string_view name)
        {
            return name == "backward" || name.find("Backward") != std::string_view::npos
                || name.starts_with("autograd::");
        }

        // The outermost operators of forward passes, cut where a backward or optimizer step comes.
        // The outermost forward operators of each thread, in time order (what encloses them is
        // neither an operator nor backward or optimizer work); each one's and its callees' names.
        std::map<std::int64_t, std::vector<int>> outerOperators()
        {
            std::map<std::int64_t, std::vector<int>> byThread;
            for (std::size_t i = 0; i < m_data.spans.size(); ++i)
                byThread[m_data.spans[i].thread].push_back(static_cast<int>(i));
            std::map<std::int64_t, std::vector<int>> outer;
            for (auto& [thread, spans] : byThread) {
                if (m_data.autogradThread(thread))
                    continue;
                std::sort(spans.begin(), spans.end(), [&](int a, int b) {
                    const auto& x = m_data.spans[a];
                    const auto& y = m_data.spans[b];
                    return x.startNs != y.startNs ? x.startNs < y.startNs : x.endNs > y.endNs;
                });
                std::vector<int> stack; // every enclosing span
                std::vector<int> owner; // per stack entry: the outermost forward operator around it, or -1
                for (const int i : spans) {
                    const auto& s = m_data.spans[i];
                    while (!stack.empty() && m_data.spans[stack.back()].endNs <= s.startNs) {
                        stack.pop_back();
                        owner.pop_back();
                    }
                    const bool excluded = std::any_of(stack.begin(), stack.end(), [&](int e) {
                        const auto& name = m_data.spans[e].name;
                        return m_data.spans[e].op || backwardRange(name) || isOptimizerRange(name);
                    });
                    const bool isOuter = s.op && !excluded && !backwardRange(s.name);
                    if (isOuter)
                        outer[thread].push_back(i);
                    const int own = isOuter ? i : owner.empty() ? -1 : owner.back();
                    if (own >= 0 && s.op)
                        m_opNames[own].insert(normalized(s.name)); // what its backward functions are called
                    stack.push_back(i);
                    owner.push_back(own);
                }
            }
            return outer;
        }

        static std::ptrdiff_t computing(std::span<const Operator> ops)
        {
            return std::count_if(
                ops.begin(), ops.end(), [](const Operator& o) { return o.kind == nullptr || !o.kind->view; });
        }

        // Each thread's outermost operators cut into passes where backward work, an optimizer step
        // or a ProfilerStep starts between two of them. Runs far shorter than the longest pass
        // (the gradient seed, a CPU backward's own top-level operators) are not forward passes.
        std::vector<std::vector<Operator>> forwardPasses()
        {
            std::vector<double> breaks;
            for (const auto& s : m_data.spans) {
                if (m_data.autogradThread(s.thread) || backwardRange(s.name) || isOptimizerRange(s.name)
                    || isProfilerStep(s.name))
                    breaks.push_back(s.startNs);
            }
            std::sort(breaks.begin(), breaks.end());
            std::vector<std::vector<Operator>> passes;
            for (const auto& [thread, outer] : outerOperators()) {
                double previousEnd = -std::numeric_limits<double>::infinity();
                for (std::size_t k = 0; k < outer.size(); ++k) {
                    const auto& s = m_data.spans[outer[k]];
                    const auto b = std::lower_bound(breaks.begin(), breaks.end(), previousEnd);
                    if (k == 0 || (b != breaks.end() && *b <= s.startNs))
                        passes.emplace_back();
                    const auto it = atenTable().find(s.name);
                    const bool scalars = !s.inputDims.empty()
                        && std::all_of(
                            s.inputDims.begin(), s.inputDims.end(), [](const Shape& d) { return d.empty(); });
                    passes.back().push_back({ outer[k],
                        scalars                       ? &kScalarUpdate
                            : it == atenTable().end() ? nullptr
                                                      : &it->second });
                    previousEnd = s.endNs;
                }
            }
            std::ptrdiff_t longest = 0;
            for (const auto& p : passes)
                longest = std::max(longest, computing(p));
            passes.erase(std::remove_if(passes.begin(), passes.end(),
                             [&](const std::vector<Operator>& p) { return 4 * computing(p) < longest; }),
                passes.end());
            std::sort(passes.begin(), passes.end(), [&](const auto& a, const auto& b) {
                return m_data.spans[a.front().span].startNs < m_data.spans[b.front().span].startNs;
            });
            return passes;
        }

        bool shapesAgree(const TraceSpan& op, const Node& node) const
        {
            for (const auto& dims : op.inputDims) {
                if (dims.empty())
                    continue;
                for (const auto in : node.inputs) {
                    if (m_graph.tensor(in).shape == dims)
                        return true;
                }
            }
            return false;
        }

        int matchScore(const Operator& op, const Node& node) const
        {
            if (op.kind == nullptr)
                return std::numeric_limits<int>::min();
            if (op.kind->view)
                return isViewNode(node) && !op.kind->kinds.empty() ? kViewMatch : std::numeric_limits<int>::min();
            if (!contains(op.kind->kinds, node.op))
                return std::numeric_limits<int>::min();
            return kMatch + (shapesAgree(m_data.spans[op.span], node) ? kShapeBonus : 0);
        }

        // Node `next` reads an output of one of the nodes [first, next) (it continues their computation).
        bool readsFrom(std::size_t first, std::size_t next) const
        {
            for (const auto in : m_graph.nodes()[next].inputs) {
                const auto p = m_graph.tensor(in).producer;
                if (p.valid() && p.index() >= first && p.index() < next)
                    return true;
            }
            return false;
        }

        // How many nodes after `j` the operator computes as well (the bias of a linear, a tail).
        int absorbable(const Operator& op, std::size_t j) const
        {
            int k = 0;
            const auto& nodes = m_graph.nodes();
            while (k < kMaxAbsorb && j + 1 + static_cast<std::size_t>(k) < m_end) {
                const auto& next = nodes[j + 1 + static_cast<std::size_t>(k)];
                if (!contains(op.kind->absorbs, next.op) || !readsFrom(j, next.id.index()))
                    break;
                ++k;
            }
            return k;
        }

        using NodeRange = std::pair<std::size_t, std::size_t>; // nodes [first, end)

        // The sequence alignment of `ops` with the window's nodes: per operator, the nodes it
        // matched (empty where it matched none).
        std::vector<NodeRange> matchInOrder(std::span<const Operator> ops) const
        {
            const std::size_t n = ops.size();
            const std::size_t m = m_end - m_first;
            AlignmentTable table(n, m); // moves: 0 skip an operator, 1 skip a node, 2 + k match absorbing k
            const auto nodes = std::span(m_graph.nodes()).subspan(m_first, m);
            for (std::size_t i = 0; i <= n; ++i) {
                for (std::size_t j = 0; j <= m; ++j) {
                    const int here = table.score(i, j);
                    if (here == AlignmentTable::kNone)
                        continue;
                    if (i < n)
                        table.relax(i + 1, j, here + (ops[i].kind != nullptr && ops[i].kind->view ? 0 : kSkip), 0);
                    if (j < m)
                        table.relax(i, j + 1, here + (isViewNode(nodes[j]) ? 0 : kSkip), 1);
                    const int s = i < n && j < m ? matchScore(ops[i], nodes[j]) : AlignmentTable::kNone;
                    if (s > AlignmentTable::kNone) {
                        const int extra = ops[i].kind->view ? 0 : absorbable(ops[i], m_first + j);
                        for (int k = 0; k <= extra; ++k)
                            table.relax(i + 1, j + 1 + static_cast<std::size_t>(k), here + s + k * kAbsorb,
                                static_cast<std::int8_t>(2 + k));
                    }
                }
            }
            // The best end anywhere: operators and nodes after it are left for free (another
            // forward right behind this one, the graph's tail a trace of one stage lacks).
            std::size_t i = 0;
            std::size_t j = 0;
            for (std::size_t a = 0; a <= n; ++a) {
                for (std::size_t b = 0; b <= m; ++b) {
                    if (table.score(a, b) > table.score(i, j)) {
                        i = a;
                        j = b;
                    }
                }
            }
            std::vector<NodeRange> matched(n, { 0, 0 });
            while (i > 0 || j > 0) {
                const auto how = table.move(i, j);
                if (how < 0)
                    break;
                if (how <= 1) {
                    (how == 0 ? i : j) -= 1;
                    continue;
                }
                const auto first = j - 1 - static_cast<std::size_t>(how - 2);
                matched[i - 1] = { m_first + first, m_first + j };
                i -= 1;
                j = first;
            }
            return matched;
        }

        // Aligns one pass and emits its ranges; returns the index of the first operator the order
        // matched and how many operators it used (through the last one matched), {0, 0} when none.
        std::pair<std::size_t, std::size_t> align(std::span<const Operator> ops)
        {
            const std::size_t n = ops.size();
            if ((n + 1) * (m_end - m_first + 1) > kMaxCells) { // named ranges are the way for such traces
                ++m_stats.passesTooLarge;
                return { 0, 0 };
            }
            auto matched = matchInOrder(ops);
            std::size_t used = 0; // operators up to the last the order matched
            std::size_t first = n;
            for (std::size_t o = 0; o < n; ++o) {
                if (matched[o].second > matched[o].first) {
                    used = o + 1;
                    first = std::min(first, o);
                }
            }
            if (used == 0)
                return { 0, 0 }; // nothing of the graph: not a forward pass
            ++m_stats.passes;
            matchOutOfOrder(ops.first(used), matched);
            AlignedPass pass;
            pass.index = static_cast<std::int64_t>(m_passes.size());
            pass.startNs = n > 0 ? m_data.spans[ops.front().span].startNs : 0;
            for (std::size_t o = 0; o < n; ++o) {
                pass.endNs = std::max(pass.endNs, m_data.spans[ops[o].span].endNs);
                if (matched[o].second > matched[o].first) {
                    emit(ops[o], matched[o].first, matched[o].second);
                    pass.matches.push_back({ ops[o].span, matched[o] });
                }
            }
            m_passes.push_back(std::move(pass));
            return { first, used };
        }

        // Without autograd sequence numbers (the legacy profiler, Debian's torch 1.13) backward
        // functions are aligned with the forward's matched operators in reverse order, by name
        // (`AddmmBackward0` to a linear whose addmm it ran), between one forward pass and the next.
        void alignBackwardByOrder()
        {
            std::vector<int> functions;
            for (std::size_t i = 0; i < m_data.spans.size(); ++i) {
                const auto& s = m_data.spans[i];
                if (s.sequence >= 0 && s.name.find("Backward") != std::string::npos)
                    return; // sequence numbers link backward to forward (trace_model.cpp)
                if (isBackwardFunction(s.name))
                    functions.push_back(static_cast<int>(i));
            }
            std::sort(functions.begin(), functions.end(),
                [&](int a, int b) { return m_data.spans[a].startNs < m_data.spans[b].startNs; });
            std::sort(m_passes.begin(), m_passes.end(),
                [](const AlignedPass& a, const AlignedPass& b) { return a.startNs < b.startNs; });
            for (std::size_t p = 0; p < m_passes.size(); ++p) {
                const double until =
                    p + 1 < m_passes.size() ? m_passes[p + 1].startNs : std::numeric_limits<double>::infinity();
                std::vector<int> window;
                for (const int f : functions) {
                    if (m_data.spans[f].startNs >= m_passes[p].endNs && m_data.spans[f].startNs < until)
                        window.push_back(f);
                }
                alignBackwardPass(window, m_passes[p]);
            }
        }

        void alignBackwardPass(const std::vector<int>& functions, const AlignedPass& pass)
        {
            std::vector<std::pair<int, std::pair<std::size_t, std::size_t>>> forward(
                pass.matches.rbegin(), pass.matches.rend());
            const std::size_t n = functions.size();
            const std::size_t m = forward.size();
            if (n == 0 || m == 0 || (n + 1) * (m + 1) > kMaxCells)
                return;
            std::vector<std::string> names;
            for (const int f : functions)
                names.push_back(normalized(m_data.spans[f].name));
            // Moves: 0 skip a function, 1 skip an operator, 2 match, 3 match the operator matched last.
            AlignmentTable table(n, m);
            for (std::size_t i = 0; i <= n; ++i) {
                for (std::size_t j = 0; j <= m; ++j) {
                    const int here = table.score(i, j);
                    if (here == AlignmentTable::kNone)
                        continue;
                    if (i < n) // a function of no matched operator (AccumulateGrad, a constant's)
                        table.relax(i + 1, j, here + kSkip, 0);
                    if (j < m) // an operator whose inputs needed no gradient
                        table.relax(i, j + 1, here, 1);
                    const auto matches = [&](std::size_t op) {
                        const auto it = m_opNames.find(forward[op].first);
                        return it != m_opNames.end() && it->second.contains(names[i]);
                    };
                    if (i < n && j < m && matches(j))
                        table.relax(i + 1, j + 1, here + kMatch, 2);
                    if (i < n && j > 0 && matches(j - 1)) // another backward function of the same operator,
                        table.relax(i + 1, j, here + kMatch - 1, 3); // below a fresh match where both fit
                }
            }
            std::size_t i = n;
            std::size_t j = m;
            for (std::size_t jj = 0; jj <= m; ++jj) {
                if (table.score(n, jj) > table.score(n, j))
                    j = jj;
            }
            while (i > 0 || j > 0) {
                const auto how = table.move(i, j);
                if (how < 0)
                    break;
                if (how == 0) {
                    --i;
                } else if (how == 1) {
                    --j;
                } else {
                    const auto& f = m_data.spans[functions[i - 1]];
                    TraceSpan range;
                    range.thread = f.thread;
                    range.startNs = f.startNs;
                    range.endNs = f.endNs;
                    range.pass = pass.index;
                    const auto& nodes = forward[j - 1].second; // both matching moves end on operator j - 1
                    for (auto v = nodes.first; v < nodes.second; ++v)
                        range.nodes.push_back(m_graph.nodes()[v].id);
                    range.name = m_graph.nodes()[nodes.first].name;
                    m_newSpans.push_back(std::move(range));
                    --i;
                    j -= how == 2 ? 1 : 0;
                }
            }
        }

        // What the order left: an operator the graph's topological order puts elsewhere (a branch
        // the file lists before the code that ran first) takes the first node of its kind
        // with its input shape that no operator of the pass took; batch normalization after a
        // convolution, which an eval-mode export folded into it, goes to that convolution, and
        // dropout, which such an export leaves out, to the operator before it.
        void matchOutOfOrder(std::span<const Operator> ops, std::vector<NodeRange>& matched) const
        {
            std::vector<bool> taken(m_graph.nodeCount(), false);
            for (const auto& [first, end] : matched) {
                for (auto v = first; v < end; ++v)
                    taken[v] = true;
            }
            const auto& nodes = m_graph.nodes();
            for (std::size_t o = 0; o < ops.size(); ++o) {
                const auto& op = ops[o];
                if (matched[o].second > matched[o].first || op.kind == nullptr || op.kind->view)
                    continue;
                for (auto v = m_first; v < m_end; ++v) {
                    // By kind and input shape; where the trace recorded no shapes, GEMMs and
                    // convolutions by kind alone (metrics' comparisons and sums would take any node).
                    const auto& span = m_data.spans[op.span];
                    const bool gemm = contains(op.kind->kinds, MatMul) || contains(op.kind->kinds, Conv);
                    if (!taken[v] && contains(op.kind->kinds, nodes[v].op)
                        && (span.inputDims.empty() ? gemm : shapesAgree(span, nodes[v]))) {
                        const auto end = v + 1 + static_cast<std::size_t>(absorbable(op, v));
                        matched[o] = { v, end };
                        for (auto t = v; t < end; ++t)
                            taken[t] = true;
                        break;
                    }
                }
            }
            for (std::size_t o = 1; o < ops.size(); ++o) {
                if (ops[o].kind == nullptr || !contains(ops[o].kind->kinds, BatchNorm) || matched[o].second > 0)
                    continue;
                auto p = o - 1; // the matched operator before it, past any unmatched ones
                while (p > 0 && matched[p].second == 0)
                    --p;
                const auto& previous = matched[p];
                if (previous.second > previous.first && nodes[previous.first].op == Conv)
                    matched[o] = previous;
            }
            attachDropouts(ops, matched);
        }

        // Dropout in a graph without Dropout nodes (an eval-mode export of a model trained with
        // it) goes to the computing operator matched before it, whose output it reads: its time is
        // part of the step the trace measured.
        void attachDropouts(std::span<const Operator> ops, std::vector<NodeRange>& matched) const
        {
            const auto& nodes = m_graph.nodes();
            for (auto v = m_first; v < m_end; ++v) {
                if (nodes[v].op == Dropout)
                    return;
            }
            for (std::size_t o = 1; o < ops.size(); ++o) {
                if (ops[o].kind == nullptr || !contains(ops[o].kind->kinds, Dropout) || matched[o].second > 0)
                    continue;
                for (auto p = o; p-- > 0;) {
                    if (matched[p].second > matched[p].first && !isViewNode(nodes[matched[p].first])) {
                        matched[o] = matched[p];
                        break;
                    }
                }
            }
        }

        void emit(const Operator& op, std::size_t first, std::size_t end)
        {
            const auto& s = m_data.spans[op.span];
            TraceSpan range;
            range.thread = s.thread;
            range.startNs = s.startNs;
            range.endNs = s.endNs;
            range.pass = static_cast<std::int64_t>(m_passes.size()); // the pass being aligned
            for (auto v = first; v < end; ++v) {
                range.nodes.push_back(m_graph.nodes()[v].id);
                m_covered[v] = m_covered[v] || !isViewNode(m_graph.nodes()[v]);
            }
            range.name = m_graph.nodes()[first].name;
            m_newSpans.push_back(std::move(range));
            m_stats.alignedOperators += op.kind->view ? 0 : 1;
        }

        const Graph& m_graph;
        TraceData& m_data;
        std::size_t m_first = 0; // the window of nodes operators align with
        std::size_t m_end = 0;
        AlignmentStats m_stats;
        std::vector<bool> m_covered;
        std::vector<TraceSpan> m_newSpans;
        std::map<int, std::set<std::string>> m_opNames; // per forward operator: its and its callees' names
        std::vector<AlignedPass> m_passes;
    };

} // namespace

AlignmentStats alignOperators(const Graph& graph, TraceData& data, NodeWindow window)
{
    return Aligner(graph, data, window).run();
}

} // namespace ps::profiler
