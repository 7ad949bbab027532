#include "runtime/channel.h"

#include "util/error.h"

#include <algorithm>
#include <thread>

namespace ps::engine {

void AbortSignal::abort()
{
    m_aborted = true;
    const std::lock_guard lock(m_mutex);
    for (auto* cv : m_waiters)
        cv->notify_all();
}

void AbortSignal::registerWaiter(std::condition_variable& cv)
{
    const std::lock_guard lock(m_mutex);
    if (std::find(m_waiters.begin(), m_waiters.end(), &cv) == m_waiters.end())
        m_waiters.push_back(&cv);
}

InProcessChannel::InProcessChannel(std::string name, const Backend& source, const Backend& target,
    Allocator& targetMemory, AbortSignal& abort, EmulatedLink* link)
    : m_name(std::move(name))
    , m_source(source)
    , m_backend(target)
    , m_target(targetMemory)
    , m_abort(abort)
    , m_link(link)
{
}

std::optional<EmulatedLink::Transfer> InProcessChannel::send(MicroBatchId mb, std::vector<NdArray> message)
{
    const auto handedOver = EmulatedLink::Clock::now();
    std::vector<NdArray> copies;
    std::int64_t bytes = 0;
    const MemoryUseScope use(MemoryUse::Messages);
    m_target.setOwner("received from " + m_name);
    for (const auto& a : message) {
        if (!a.defined()) {
            copies.emplace_back();
            continue;
        }
        copies.push_back(m_source.copyTo(a, m_backend, m_target));
        bytes += a.bytes();
    }
    m_target.setOwner("");
    m_bytes += bytes;
    std::optional<EmulatedLink::Transfer> transfer;
    if (m_link && bytes > 0)
        transfer = m_link->reserve(bytes, handedOver);
    {
        const std::lock_guard lock(m_mutex);
        m_mailbox[mb.value] = { std::move(copies), transfer ? transfer->end : handedOver };
    }
    m_ready.notify_all();
    return transfer;
}

std::vector<NdArray> InProcessChannel::receive(MicroBatchId mb)
{
    std::unique_lock lock(m_mutex);
    if (!m_abort.wait(m_ready, lock, [&] { return m_mailbox.contains(mb.value); }))
        throw Aborted("aborted while waiting on " + m_name + " for micro-batch " + std::to_string(mb.value));
    auto letter = std::move(m_mailbox[mb.value]);
    m_mailbox.erase(mb.value);
    lock.unlock();
    // Until the link delivers it, in slices so an abort is noticed.
    while (EmulatedLink::Clock::now() < letter.deliveredAt) {
        if (m_abort.aborted())
            throw Aborted("aborted while " + m_name + " delivered micro-batch " + std::to_string(mb.value));
        std::this_thread::sleep_until(
            std::min(letter.deliveredAt, EmulatedLink::Clock::now() + std::chrono::milliseconds(20)));
    }
    return std::move(letter.arrays);
}

} // namespace ps::engine
