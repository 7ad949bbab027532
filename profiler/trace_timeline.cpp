#include "trace_timeline.h"

#include "text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

namespace ps::profiler {
namespace {

    double anchorOf(const TimedActivity& a)
    {
        return a.anchorNs >= 0 ? a.anchorNs : a.startNs;
    }

    // Splits one iteration's activities (start order) into passes.
    std::vector<TraceAction> passes(const std::vector<TimedActivity>& acts)
    {
        std::vector<TraceAction> out;
        TraceAction optimizer { TraceActionKind::Optimizer, 0, std::numeric_limits<double>::infinity(), 0 };
        int counts[2] = { 0, 0 };
        std::size_t current = 0; // index in out + 1; 0: none
        std::size_t first = 0; // lowest node of the current forward / highest of the current backward
        std::size_t last = 0;
        for (const auto& a : acts) {
            if (a.kind == TraceActionKind::Optimizer) {
                optimizer.startNs = std::min(optimizer.startNs, a.startNs);
                optimizer.endNs = std::max(optimizer.endNs, a.endNs);
                continue;
            }
            const bool forward = a.kind == TraceActionKind::Forward;
            bool fresh = current == 0 || out[current - 1].kind != a.kind;
            if (!fresh && a.node != last)
                fresh = forward ? a.node <= first : a.node >= first;
            if (fresh) {
                out.push_back({ a.kind, counts[forward ? 0 : 1]++, a.startNs, a.endNs });
                current = out.size();
                first = a.node;
            } else {
                auto& action = out[current - 1];
                action.startNs = std::min(action.startNs, a.startNs);
                action.endNs = std::max(action.endNs, a.endNs);
                first = forward ? std::min(first, a.node) : std::max(first, a.node);
            }
            last = a.node;
        }
        if (optimizer.endNs > 0)
            out.push_back(optimizer);
        std::stable_sort(
            out.begin(), out.end(), [](const TraceAction& x, const TraceAction& y) { return x.startNs < y.startNs; });
        return out;
    }

    // Without ProfilerStep ranges (the legacy profiler, a profile() block without a schedule), the
    // iterations end with their optimizer steps: the host's `Optimizer.step` ranges, those with no
    // forward or backward work launched between them taken as one (several optimizers). Each
    // iteration reaches from the previous one's end to its optimizer step's end, all in host time
    // (a kernel belongs where it was launched); work after the last step is an iteration of its
    // own. Empty where fewer than two optimizer steps tell the iterations apart.
    std::vector<std::pair<double, double>> optimizerSteps(const std::vector<TimedActivity>& sorted,
        std::vector<std::pair<double, double>> ranges, double firstAnchor, double lastAnchor)
    {
        std::sort(ranges.begin(), ranges.end());
        std::vector<double> ends;
        std::size_t next = 0; // the first activity (by anchor) not before the last step's end
        for (const auto& [start, end] : ranges) {
            bool workBetween = ends.empty();
            for (; next < sorted.size() && anchorOf(sorted[next]) < start; ++next)
                workBetween = workBetween || sorted[next].kind != TraceActionKind::Optimizer;
            if (workBetween)
                ends.push_back(end);
            else
                ends.back() = std::max(ends.back(), end);
        }
        std::vector<std::pair<double, double>> out;
        if (ends.size() < 2)
            return out;
        double start = firstAnchor;
        for (const auto end : ends) {
            out.emplace_back(start, end);
            start = end;
        }
        if (lastAnchor >= start)
            out.emplace_back(start, std::numeric_limits<double>::infinity());
        return out;
    }

} // namespace

bool isProfilerStep(std::string_view name)
{
    return name.starts_with("ProfilerStep#");
}

bool isOptimizerRange(std::string_view name)
{
    const auto l = toLower(name);
    return l.starts_with("optimizer.step");
}

bool isCommunication(std::string_view name)
{
    return name.starts_with("c10d::") || name.starts_with("gloo:") || name.starts_with("nccl:")
        || name.starts_with("record_param_comms") || name.starts_with("ncclKernel")
        || name.starts_with("ncclDevKernel");
}

bool isHostToDeviceCopy(std::string_view name)
{
    return toLower(name).starts_with("memcpy htod");
}

namespace {

    // `s` cut to at most `most` bytes with "..." at the end, never inside a UTF-8 character.
    std::string cutAt(std::string_view s, std::size_t most)
    {
        if (s.size() <= most)
            return std::string(s);
        std::size_t end = most - 3;
        while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80)
            --end; // a continuation byte: back to the character's first
        return std::string(s.substr(0, end)) + "...";
    }

} // namespace

std::string shortKernelName(std::string_view name)
{
    constexpr std::string_view kVoid = "void ";
    constexpr std::string_view kAnonymous = "(anonymous namespace)";
    constexpr std::size_t kMost = 100;
    if (!name.starts_with(kVoid) && name.find("::") == std::string_view::npos) // not a C++ signature
        return cutAt(name, kMost);
    if (name.starts_with(kVoid))
        name.remove_prefix(kVoid.size());
    std::string out;
    int depth = 0;
    for (std::size_t i = 0; i < name.size(); ++i) {
        const char c = name[i];
        if (c == '<') {
            out += depth++ == 0 ? "<...>" : "";
        } else if (c == '>' && depth > 0) {
            --depth;
        } else if (depth == 0) {
            if (c == '(' && name.substr(i).starts_with(kAnonymous)) {
                out += kAnonymous;
                i += kAnonymous.size() - 1;
            } else if (c == '(') {
                break; // the parameter list
            } else {
                out += c;
            }
        }
    }
    while (!out.empty() && out.back() == ' ')
        out.pop_back();
    return out.empty() ? cutAt(name, kMost) : cutAt(out, kMost);
}

std::vector<TraceIteration> buildTraceTimeline(std::vector<TimedActivity> activities,
    std::vector<std::pair<double, double>> steps, std::vector<std::pair<double, double>> optimizerRanges)
{
    const auto anchor = anchorOf;
    std::stable_sort(activities.begin(), activities.end(),
        [&](const TimedActivity& a, const TimedActivity& b) { return anchor(a) < anchor(b); });
    std::sort(steps.begin(), steps.end());
    const auto byStart = [](std::vector<TimedActivity> v) {
        std::stable_sort(
            v.begin(), v.end(), [](const TimedActivity& a, const TimedActivity& b) { return a.startNs < b.startNs; });
        return v;
    };
    std::vector<TraceIteration> out;
    const bool marked = !steps.empty();
    if (steps.empty() && !activities.empty())
        steps = optimizerSteps(
            activities, std::move(optimizerRanges), anchor(activities.front()), anchor(activities.back()));
    const bool byOptimizer = !marked && !steps.empty();
    if (steps.empty()) {
        if (activities.empty())
            return out;
        TraceIteration it;
        it.actions = passes(byStart(activities));
        const bool forwardOnly = std::all_of(it.actions.begin(), it.actions.end(),
            [](const TraceAction& a) { return a.kind == TraceActionKind::Forward; });
        if (forwardOnly && it.actions.size() > 1) { // a forward benchmark, inference: a pass is an iteration
            for (auto a : it.actions) {
                a.microBatch = 0;
                out.push_back({ a.startNs, a.endNs, false, { a } });
            }
            return out;
        }
        it.startNs = std::numeric_limits<double>::infinity();
        for (const auto& a : activities) {
            it.startNs = std::min(it.startNs, a.startNs);
            it.endNs = std::max(it.endNs, a.endNs);
        }
        if (!it.actions.empty())
            out.push_back(std::move(it));
        return out;
    }
    std::size_t next = 0;
    for (const auto& [start, end] : steps) {
        std::vector<TimedActivity> in;
        for (; next < activities.size() && anchor(activities[next]) < start; ++next) { }
        for (; next < activities.size() && anchor(activities[next]) < end; ++next)
            in.push_back(activities[next]);
        TraceIteration it { start, end, marked, passes(byStart(std::move(in))) };
        // Device work launched in the step may finish after its range: the step ends with it.
        if (!std::isfinite(it.endNs))
            it.endNs = start;
        for (const auto& a : it.actions)
            it.endNs = std::max(it.endNs, a.endNs);
        if (!it.actions.empty())
            out.push_back(std::move(it));
    }
    // A trace that starts inside a step or stops inside one: that part is no iteration.
    const auto has = [](const TraceIteration& it, TraceActionKind kind) {
        return std::any_of(
            it.actions.begin(), it.actions.end(), [kind](const TraceAction& a) { return a.kind == kind; });
    };
    if (byOptimizer && out.size() > 1 && !has(out.back(), TraceActionKind::Optimizer))
        out.pop_back();
    if (byOptimizer && out.size() > 1 && !has(out.front(), TraceActionKind::Forward))
        out.erase(out.begin());
    return out;
}

} // namespace ps::profiler
