#include "sim/earliest_arrival.h"

#include <algorithm>

namespace ps::sim {

EarliestArrivals::EarliestArrivals(std::size_t devices, std::size_t keys)
    : m_clock(devices, std::vector<std::uint32_t>(devices, 0))
    , m_doneAt(devices)
    , m_earliest(devices)
    , m_timed(devices)
{
    m_sent[0].resize(keys);
    m_sent[1].resize(keys);
}

void EarliestArrivals::done(std::size_t device, double timeNs)
{
    m_doneAt[device].push_back(timeNs);
    m_clock[device][device] = static_cast<std::uint32_t>(m_doneAt[device].size());
}

void EarliestArrivals::sent(std::size_t from, std::size_t to, std::size_t key, bool forward, double arrivalNs,
    double bytes, std::size_t receiverNext, bool timed)
{
    merge(m_sent[forward ? 0 : 1][key], m_clock[from]);
    if (bytes == 0)
        return;
    // Before the receiver's first action that does not happen before this send (MemoryDelta::order
    // 2i: before action i's own changes, 2i + 1).
    const auto before = m_clock[from][to];
    const double earliest = before > 0 ? std::min(arrivalNs, m_doneAt[to][before - 1]) : 0.0;
    m_earliest[to].push_back({ earliest, bytes, MemoryKind::Messages, 2 * std::uint64_t { before } });
    if (timed)
        m_timed[to].push_back({ arrivalNs, bytes, MemoryKind::Messages, 2 * std::uint64_t { receiverNext } });
}

std::vector<MemoryDelta> EarliestArrivals::withMessages(
    std::size_t device, std::vector<MemoryDelta> deltas, bool timed) const
{
    const auto& messages = (timed ? m_timed : m_earliest)[device];
    deltas.insert(deltas.end(), messages.begin(), messages.end());
    return deltas;
}

void EarliestArrivals::received(std::size_t device, std::size_t key, bool forward)
{
    auto& sent = m_sent[forward ? 0 : 1][key];
    merge(m_clock[device], sent);
    std::vector<std::uint32_t>().swap(sent); // received once: no longer needed
}

void EarliestArrivals::merge(std::vector<std::uint32_t>& into, const std::vector<std::uint32_t>& from)
{
    into.resize(std::max(into.size(), from.size()), 0);
    for (std::size_t i = 0; i < from.size(); ++i)
        into[i] = std::max(into[i], from[i]);
}

} // namespace ps::sim
