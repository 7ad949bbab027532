// A training run's measured timeline from the device's own records (issue P14, deliverable 3): the
// schedule runner reports each action to an engine::ActionTracer; this one pushes the action's id
// as an external correlation id (CUPTI on a GPU), so every kernel, memset and copy the action
// launched is attributed to it, and an action's span is its first record's start to its last
// record's end, mapped onto the host clock by a line fitted through (record clock, host clock)
// pairs taken at every action's start. The worker never waits for the device between actions, so
// the timeline is the one an unobserved run has, launch queueing included.
// Depends on: engine (runtime/action_tracer.h), device_profiler.h (ActivityTracer), cupti/activity.h.
#pragma once

#include "cupti/activity.h"
#include "device_profiler.h"
#include "runtime/action_tracer.h"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::profiler {

// Each external id's span: the earliest start to the latest end of the activities CUPTI correlated
// with it, through `clock`, in ns after `originHostNs`, and its busy time, the union of those
// activities (overlapping ones count once; a gap where other work ran counts not at all).
// `unattributed` (if given) receives how many activities belong to no external id.
[[nodiscard]] std::unordered_map<std::uint64_t, engine::ActionSpan> actionSpans(const cupti::ActivityBatch& batch,
    const cupti::ClockMap& clock, double originHostNs, std::size_t* unattributed = nullptr);

class KernelTimelineTracer final : public engine::ActionTracer
{
public:
    explicit KernelTimelineTracer(std::unique_ptr<ActivityTracer> tracer);

    void begin(std::uint64_t id) override;
    void end() override;
    [[nodiscard]] std::unordered_map<std::uint64_t, engine::ActionSpan> finish(
        std::chrono::steady_clock::time_point origin) override;
    // Forwards to the device tracer; stopping also drops what it recorded and the clock pairs.
    void setCollecting(bool on) override;

    // What the last finish() found wrong (records dropped by the device tracer), and clears it.
    [[nodiscard]] std::vector<std::string> takeWarnings();

private:
    std::unique_ptr<ActivityTracer> m_tracer;
    std::mutex m_mutex;
    std::vector<std::pair<std::uint64_t, double>> m_clockPairs; // (record clock, host steady ns)
    std::vector<std::string> m_warnings;
};

// The kernel timeline over CUPTI. Throws ps::Error saying why CUPTI cannot be used.
[[nodiscard]] std::unique_ptr<KernelTimelineTracer> makeCuptiKernelTimeline();

} // namespace ps::profiler
