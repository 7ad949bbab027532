#include "kernel_timeline.h"

#include "cupti/cupti_tracer.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ps::profiler {
namespace {

    double hostNs(std::chrono::steady_clock::time_point t)
    {
        return std::chrono::duration<double, std::nano>(t.time_since_epoch()).count();
    }

} // namespace

std::unordered_map<std::uint64_t, engine::ActionSpan> actionSpans(
    const cupti::ActivityBatch& batch, const cupti::ClockMap& clock, double originHostNs, std::size_t* unattributed)
{
    std::unordered_map<std::uint32_t, std::uint64_t> external;
    for (const auto& c : batch.correlations)
        external[c.correlationId] = c.externalId;
    std::unordered_map<std::uint64_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> intervals;
    std::size_t orphans = 0;
    for (const auto& r : batch.activities) {
        const auto c = external.find(r.correlationId);
        if (c == external.end() || r.endNs < r.startNs) {
            ++orphans;
            continue;
        }
        intervals[c->second].emplace_back(r.startNs, r.endNs);
    }
    if (unattributed != nullptr)
        *unattributed = orphans;
    std::unordered_map<std::uint64_t, engine::ActionSpan> spans;
    for (auto& [id, list] : intervals) {
        std::sort(list.begin(), list.end());
        // The union of the intervals: overlapping records (two streams) count once.
        std::uint64_t busy = 0;
        std::uint64_t last = list.front().first;
        for (const auto& [start, end] : list) {
            const auto from = std::max(start, last);
            if (end > from)
                busy += end - from;
            last = std::max(last, end);
        }
        const auto first = clock.toHost(list.front().first) - originHostNs;
        spans[id] = { first, clock.toHost(last) - originHostNs,
            clock.toHost(list.front().first + busy) - originHostNs - first };
    }
    return spans;
}

KernelTimelineTracer::KernelTimelineTracer(std::unique_ptr<ActivityTracer> tracer)
    : m_tracer(std::move(tracer))
{
}

void KernelTimelineTracer::begin(std::uint64_t id)
{
    {
        // A clock pair per action: the fitted line follows any drift between the two clocks.
        const std::lock_guard lock(m_mutex);
        const auto device = m_tracer->timestampNs();
        m_clockPairs.emplace_back(device, hostNs(std::chrono::steady_clock::now()));
    }
    m_tracer->push(id);
}

void KernelTimelineTracer::end()
{
    m_tracer->pop();
}

void KernelTimelineTracer::setCollecting(bool on)
{
    const std::lock_guard lock(m_mutex);
    if (!on) { // what was recorded before is no step's any more
        (void)m_tracer->collect();
        m_clockPairs.clear();
    }
    m_tracer->setCollecting(on);
}

std::unordered_map<std::uint64_t, engine::ActionSpan> KernelTimelineTracer::finish(
    std::chrono::steady_clock::time_point origin)
{
    const std::lock_guard lock(m_mutex);
    auto batch = m_tracer->collect();
    m_clockPairs.emplace_back(m_tracer->timestampNs(), hostNs(std::chrono::steady_clock::now()));
    const auto clock = cupti::alignClocks(m_clockPairs);
    m_clockPairs.clear();
    if (batch.droppedRecords > 0)
        m_warnings.push_back("the device tracer dropped " + std::to_string(batch.droppedRecords)
            + " records this iteration: the actions they belonged to keep shorter spans");
    return actionSpans(batch, clock, hostNs(origin));
}

std::vector<std::string> KernelTimelineTracer::takeWarnings()
{
    const std::lock_guard lock(m_mutex);
    return std::exchange(m_warnings, {});
}

std::unique_ptr<KernelTimelineTracer> makeCuptiKernelTimeline()
{
    return std::make_unique<KernelTimelineTracer>(cupti::makeCuptiTracer());
}

} // namespace ps::profiler
