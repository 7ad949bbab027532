// Per-node measurement on any backend: every node's forward and backward timed inside whole
// training steps (one traced range per node and pass, repeated over steps), each node also alone on
// inputs from a real forward pass (its memory, and its isolated time for comparison), plus untraced
// whole steps to check the per-node sum against. Each timed repetition is a range with its own external id pushed to an
// ActivityTracer; the tracer's records are attributed to (node, pass, repetition) by
// cupti/activity.h's rules. On a GPU the tracer is CUPTI (cupti/cupti_tracer.h: device time of
// the kernels each range launched); on the CPU it is the host clock around each range.
// Depends on: engine (executor, backend), cupti/activity.h; no CUDA headers.
#pragma once

#include "backend.h"
#include "cpu_profiler.h"
#include "cupti/activity.h"

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ps::profiler {

// Records device activity and which pushed range launched it.
class ActivityTracer
{
public:
    virtual ~ActivityTracer() = default;
    // Work issued until the matching pop() belongs to `externalId`.
    virtual void push(std::uint64_t externalId) = 0;
    virtual void pop() = 0;
    // Everything recorded since the last collect (the device has finished it).
    [[nodiscard]] virtual cupti::ActivityBatch collect() = 0;
    // Now, on the clock of the records' timestamps (for their alignment with the host clock).
    [[nodiscard]] virtual std::uint64_t timestampNs() const = 0;
    // Stops or resumes recording (CUPTI: its activity kinds disabled or enabled again); what was
    // recorded before stopping stays to be collected. A no-op where recording costs nothing.
    virtual void setCollecting(bool /*on*/) { }
};

// The host clock as the tracer: one activity per pushed range, from push to pop (ranges nest per
// thread; several threads may push at once). Right for backends whose work is done when the call
// returns (the CPU). Timestamps are steady_clock nanoseconds.
class HostClockTracer final : public ActivityTracer
{
public:
    void push(std::uint64_t externalId) override;
    void pop() override;
    [[nodiscard]] cupti::ActivityBatch collect() override;
    [[nodiscard]] std::uint64_t timestampNs() const override;

private:
    using Clock = std::chrono::steady_clock;
    std::mutex m_mutex;
    cupti::ActivityBatch m_batch;
    std::map<std::thread::id, std::vector<std::pair<std::uint64_t, Clock::time_point>>> m_open;
    std::uint32_t m_nextCorrelation = 1;
};

// Measures `graph` on `backend` (the executor's inputs drawn from `options.seed`). `warnings` gets
// what the tracer reported (dropped records, work outside any range). Throws ps::Error naming the
// node the backend cannot run.
[[nodiscard]] CpuProfileRun measureOnDevice(const Graph& graph, const engine::Backend& backend, ActivityTracer& tracer,
    const CpuProfileOptions& options, const std::function<void(std::size_t, std::size_t)>& progress = {},
    std::vector<std::string>* warnings = nullptr);

} // namespace ps::profiler
