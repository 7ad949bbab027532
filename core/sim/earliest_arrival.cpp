#include "sim/earliest_arrival.h"

#include <algorithm>

namespace ps::sim {

EarliestArrivals::EarliestArrivals(std::size_t devices, std::size_t keys)
    : m_clock(devices, std::vector<std::uint32_t>(devices, 0))
    , m_doneAt(devices)
{
    m_sent[0].resize(keys);
    m_sent[1].resize(keys);
}

void EarliestArrivals::done(std::size_t device, double timeNs)
{
    m_doneAt[device].push_back(timeNs);
    m_clock[device][device] = static_cast<std::uint32_t>(m_doneAt[device].size());
}

EarliestArrivals::Arrival EarliestArrivals::sent(
    std::size_t from, std::size_t to, std::size_t key, bool forward, double arrivalNs)
{
    merge(m_sent[forward ? 0 : 1][key], m_clock[from]);
    const auto before = m_clock[from][to]; // the receiver's actions that happen before this send
    return { before > 0 ? std::min(arrivalNs, m_doneAt[to][before - 1]) : 0.0, 2 * std::uint64_t { before } };
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
