// A link between two CPU devices of this process with the bandwidth, latency and (optionally) the
// bandwidth-over-time trace of a real one: PCIe, NVLink, or Ada-Grouper's preempted network
// (§4.4). In-process channels copy at memory speed; with an emulated link a message becomes
// visible to its receiver only when the link would have delivered it. Transfers in one direction
// queue behind each other, as the simulator's channel between two devices does, and the sender
// does not wait (an asynchronous send, like NCCL's). So a run on CPU devices shows what slow or
// preempted links do to a schedule, and measured transfer times drive Ada-Grouper's controller.
// Depends on: cluster/cluster.h (LinkSpec, BandwidthTrace); no Qt, no CUDA.
#pragma once

#include "cluster/cluster.h"

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>

namespace ps::engine {

struct LinkEmulation
{
    double bandwidth = 0; // bytes/s, one direction; 0: no emulation (memory speed)
    double latencySeconds = 0;
    std::optional<BandwidthTrace> trace; // time from the start of the run

    [[nodiscard]] bool enabled() const
    {
        return bandwidth > 0;
    }
    // As the simulator sees it: kind "emulated".
    [[nodiscard]] LinkSpec spec() const
    {
        return { "emulated", bandwidth, latencySeconds };
    }
};

// One direction between two devices.
class EmulatedLink
{
public:
    using Clock = std::chrono::steady_clock;
    struct Transfer
    {
        Clock::time_point start; // the link is free for it (latency not yet paid), as the simulator
        Clock::time_point end; // delivered
    };

    // `origin`: time zero of the trace. Throws ps::Error for a bandwidth that is not positive.
    EmulatedLink(LinkEmulation emulation, Clock::time_point origin);
    // Reserves the link for `bytes` handed over at `now`.
    Transfer reserve(std::int64_t bytes, Clock::time_point now);

private:
    LinkEmulation m_emulation;
    Clock::time_point m_origin;
    std::mutex m_mutex;
    double m_freeAtSeconds = 0; // since m_origin
};

} // namespace ps::engine
