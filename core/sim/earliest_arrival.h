// When a message can first be at its receiver, whatever the durations (issue P15: a plan made for
// a memory cap ran out of memory when a receiver's peers ran ahead of the simulated timing). The
// engine's channels copy a message onto the receiver as it is sent, so a faster sender makes it
// arrive as early as the schedule's order allows. Vector clocks over the simulated execution:
// clock[d][e] counts device e's actions that happen before device d's next one; a message sent
// from d with clock[d][e] = p can be at e once e's action p - 1 is done. The same rule over a
// schedule alone is schedule/message_wait.h's.
// Depends on: nothing but the standard library.
#pragma once

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

    // The earliest a message counts at its receiver: a time, and an order among the receiver's
    // changes at that time (MemoryDelta::order: 2i for "before action i", 2i + 1 for action i's own).
    struct Arrival
    {
        double timeNs = 0;
        std::uint64_t order = 0;
    };
    // A message from `from` to `to` for arrival `key` (forward or backward), delivered by the
    // timeline at `arrivalNs`: kept for the receive, and when the receiver can first hold it.
    Arrival sent(std::size_t from, std::size_t to, std::size_t key, bool forward, double arrivalNs);
    // Device `device` received `key`'s message(s) (every sender's, once): it now knows what their
    // senders knew.
    void received(std::size_t device, std::size_t key, bool forward);

private:
    static void merge(std::vector<std::uint32_t>& into, const std::vector<std::uint32_t>& from);

    std::vector<std::vector<std::uint32_t>> m_clock; // [d][e]
    std::vector<std::vector<std::uint32_t>> m_sent[2]; // by direction (0 forward), by key: the senders' clocks
    std::vector<std::vector<double>> m_doneAt; // by device: when each of its actions was done
};

} // namespace ps::sim
