// When a message can first be at its receiver, whatever the durations (issue P15: a plan made for
// a memory cap ran out of memory when a receiver's peers ran ahead of the simulated timing). The
// engine's channels copy a message onto the receiver as it is sent, so a faster sender makes it
// arrive as early as the schedule's order allows. Vector clocks over the simulated execution:
// clock[d][e] counts device e's actions that happen before device d's next one; a message sent
// from d with clock[d][e] = p can be at e once e's action p - 1 is done. The same rule over a
// schedule alone is schedule/message_wait.h's.
// Depends on: sim/memory_model.h (MemoryDelta).
#pragma once

#include "sim/memory_model.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ps::sim {

class EarliestArrivals
{
public:
    EarliestArrivals(std::size_t devices, std::size_t keys);

    // Device `device` finished its next action at `timeNs`.
    void done(std::size_t device, double timeNs);

    // A message of `bytes` from `from` to `to` for arrival `key` (forward or backward), delivered
    // by the timeline at `arrivalNs` while the receiver is before its action `receiverNext`: its
    // sender's clock is kept for the receive (empty messages too: what the receiver learns from
    // them orders its later actions), and its charge to the receiver from the earliest moment it
    // can be there (and, where `timed`, from its arrival).
    void sent(std::size_t from, std::size_t to, std::size_t key, bool forward, double arrivalNs, double bytes,
        std::size_t receiverNext, bool timed);
    // `deltas` (device `device`'s own changes) with its messages: from their earliest arrival, or
    // from the timeline's where `timed`.
    [[nodiscard]] std::vector<MemoryDelta> withMessages(
        std::size_t device, std::vector<MemoryDelta> deltas, bool timed) const;
    // Device `device` received `key`'s message(s) (every sender's, once): it now knows what their
    // senders knew.
    void received(std::size_t device, std::size_t key, bool forward);

private:
    static void merge(std::vector<std::uint32_t>& into, const std::vector<std::uint32_t>& from);

    std::vector<std::vector<std::uint32_t>> m_clock; // [d][e]
    std::vector<std::vector<std::uint32_t>> m_sent[2]; // by direction (0 forward), by key: the senders' clocks
    std::vector<std::vector<double>> m_doneAt; // by device: when each of its actions was done
    std::vector<std::vector<MemoryDelta>> m_earliest, m_timed; // by receiving device: the charges
};

} // namespace ps::sim
