#include "runtime/copy_stream.h"

#include "cpu/thread_affinity.h"

#include <utility>

namespace ps::engine {

CopyStream::CopyStream(std::string name, std::vector<int> cores)
    : m_name(std::move(name))
    , m_thread([this, c = std::move(cores)]() mutable { loop(std::move(c)); })
{
}

CopyStream::~CopyStream()
{
    {
        const std::lock_guard lock(m_mutex);
        m_stopping = true;
    }
    m_changed.notify_all();
    m_thread.join();
}

CopyStream::Ticket CopyStream::enqueue(
    const Action& action, std::function<std::int64_t()> copy, std::function<void()> ready)
{
    Ticket ticket = 0;
    {
        const std::lock_guard lock(m_mutex);
        ticket = m_next++;
        m_queue.push_back({ ticket, action, std::move(copy), std::move(ready) });
    }
    m_changed.notify_all();
    return ticket;
}

void CopyStream::wait(Ticket ticket)
{
    std::unique_lock lock(m_mutex);
    m_changed.wait(lock, [&] { return m_done >= ticket; });
    const auto failed = m_failures.find(ticket);
    if (failed != m_failures.end())
        std::rethrow_exception(failed->second);
}

void CopyStream::drain()
{
    std::unique_lock lock(m_mutex);
    const auto last = m_next - 1;
    m_changed.wait(lock, [&] { return m_done >= last; });
}

std::vector<CopyStream::Record> CopyStream::takeRecords()
{
    const std::lock_guard lock(m_mutex);
    return std::exchange(m_records, {});
}

void CopyStream::loop(std::vector<int> cores)
{
    pinCurrentThread(cores); // best effort, as the workers
    for (;;) {
        Job job;
        {
            std::unique_lock lock(m_mutex);
            m_changed.wait(lock, [&] { return m_stopping || !m_queue.empty(); });
            if (m_queue.empty())
                return; // stopping with nothing left
            job = std::move(m_queue.front());
            m_queue.pop_front();
        }
        auto start = Clock::now();
        std::int64_t bytes = 0;
        std::exception_ptr failure;
        try {
            if (job.ready) {
                job.ready();
                start = Clock::now();
            }
            bytes = job.copy();
        } catch (...) {
            failure = std::current_exception();
        }
        const auto end = Clock::now();
        job.copy = nullptr; // release the copied arrays before the ticket counts as done
        job.ready = nullptr;
        {
            const std::lock_guard lock(m_mutex);
            if (failure)
                m_failures[job.ticket] = failure;
            else
                m_records.push_back({ job.action, start, end, bytes });
            m_done = job.ticket;
        }
        m_changed.notify_all();
    }
}

} // namespace ps::engine
