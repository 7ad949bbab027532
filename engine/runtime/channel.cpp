#include "runtime/channel.h"

#include "util/error.h"

#include <algorithm>

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

InProcessChannel::InProcessChannel(
    std::string name, const Backend& source, const Backend& target, Allocator& targetMemory, AbortSignal& abort)
    : m_name(std::move(name))
    , m_source(source)
    , m_backend(target)
    , m_target(targetMemory)
    , m_abort(abort)
{
}

void InProcessChannel::send(MicroBatchId mb, std::vector<NdArray> message)
{
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
    {
        const std::lock_guard lock(m_mutex);
        m_mailbox[mb.value] = std::move(copies);
    }
    m_ready.notify_all();
}

std::vector<NdArray> InProcessChannel::receive(MicroBatchId mb)
{
    std::unique_lock lock(m_mutex);
    if (!m_abort.wait(m_ready, lock, [&] { return m_mailbox.contains(mb.value); }))
        throw Aborted("aborted while waiting on " + m_name + " for micro-batch " + std::to_string(mb.value));
    auto message = std::move(m_mailbox[mb.value]);
    m_mailbox.erase(mb.value);
    return message;
}

} // namespace ps::engine
