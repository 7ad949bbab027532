#include "runtime/emulated_link.h"

#include "util/error.h"

#include <algorithm>

namespace ps::engine {

EmulatedLink::EmulatedLink(LinkEmulation emulation, Clock::time_point origin)
    : m_emulation(std::move(emulation))
    , m_origin(origin)
{
    if (!(m_emulation.bandwidth > 0))
        throw Error("an emulated link needs a positive bandwidth");
    if (m_emulation.latencySeconds < 0)
        throw Error("an emulated link's latency must not be negative");
}

EmulatedLink::Transfer EmulatedLink::reserve(std::int64_t bytes, Clock::time_point now)
{
    const std::lock_guard lock(m_mutex);
    const double nowSeconds = std::chrono::duration<double>(now - m_origin).count();
    // The same arithmetic as the simulator's send: queue behind the link, add latency, then move
    // the bytes at the trace's bandwidth.
    const double start = std::max(nowSeconds, m_freeAtSeconds);
    const double moving = start + m_emulation.latencySeconds;
    const double size = static_cast<double>(bytes);
    const double end = m_emulation.trace ? m_emulation.trace->transferEnd(moving, size, m_emulation.bandwidth)
                                         : moving + size / m_emulation.bandwidth;
    m_freeAtSeconds = end;
    const auto at = [&](double seconds) {
        return m_origin + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    };
    return { at(start), at(end) };
}

} // namespace ps::engine
