// What the schedule runner tells a device tracer, so that a GPU run's measured timeline is the
// device's own (the kernels and copies each action launched, from a CUPTI trace) without the worker
// waiting for the device after every action. Waiting after each action (the timeline without a
// tracer) keeps the host from queueing the next action's launches while the device works, so the
// measured iteration is longer than the unobserved one; a tracer leaves the launches queued.
// The runner calls begin/end on each device's worker thread around the work one action issues, and
// finish once per iteration after every device has been synchronized.
// Depends on: the standard library only.
#pragma once

#include <chrono>
#include <cstdint>
#include <unordered_map>

namespace ps::engine {

// Where an action ran on its device: nanoseconds from the iteration's start, on the host clock.
struct ActionSpan
{
    double startNs = 0;
    double endNs = 0;
    // How long the device ran the action's own work inside the span (the union of its kernels and
    // copies); less than the span where another device's work ran in between (two stage devices on
    // one GPU share its stream). Negative: not known, the span counts.
    double busyNs = -1;
};

class ActionTracer
{
public:
    virtual ~ActionTracer() = default;
    // Work the calling thread issues until end() belongs to `id` (unique within an iteration).
    virtual void begin(std::uint64_t id) = 0;
    virtual void end() = 0;
    // Each id's span on the device, from `origin` (the iteration's start); ids that launched nothing
    // are absent. Called when every device has finished the iteration's work; forgets what it returns.
    [[nodiscard]] virtual std::unordered_map<std::uint64_t, ActionSpan> finish(
        std::chrono::steady_clock::time_point origin) = 0;
    // Whether the device's work is recorded at all: off through the steps whose timeline nobody
    // keeps, so they do not pay the recording's cost per launch (CUPTI's activity kinds disabled);
    // on again before a timed step. Called between steps, when every device is idle.
    virtual void setCollecting(bool /*on*/) { }
};

} // namespace ps::engine
