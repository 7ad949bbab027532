// A device's copy stream: a thread that runs the memory plan's host copies (SWAP_OUT to the host
// pool, SWAP_IN back) in the order they are queued, beside the device's compute worker, as the
// simulator's CopyToHost and CopyFromHost streams overlap copies with compute. The worker queues a
// copy and goes on; the action that reads the copied values (a backward) waits for its ticket.
//
// A copy that fails (the device is full at swap-in) fails its ticket: the wait rethrows it in the
// worker, which names the action that needed it. Copies queued after a failed one still run.
// Depends on: core (Action, ps::Error); no Qt, no CUDA.
#pragma once

#include "schedule/schedule.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ps::engine {

class CopyStream
{
public:
    using Clock = std::chrono::steady_clock;
    using Ticket = std::uint64_t;
    // One finished copy: which action, when it ran on the stream, how many bytes it moved.
    struct Record
    {
        Action action;
        Clock::time_point start, end;
        std::int64_t bytes = 0;
    };

    // `cores`: the device's cores, which the stream's thread shares with its worker (empty: unpinned).
    CopyStream(std::string name, std::vector<int> cores);
    // Finishes what is queued, then joins.
    ~CopyStream();
    CopyStream(const CopyStream&) = delete;
    CopyStream& operator=(const CopyStream&) = delete;

    [[nodiscard]] const std::string& name() const
    {
        return m_name;
    }
    // Queues `copy` (which returns the bytes it moved) after everything queued before. `ready`, if
    // given, runs first and blocks until the copy may start (e.g. a swap-in waiting for its swap-out
    // on the other stream): the record's start is taken after it, so it times the copy only.
    Ticket enqueue(const Action& action, std::function<std::int64_t()> copy, std::function<void()> ready = {});
    // Blocks until the ticket's copy is done; rethrows its failure.
    void wait(Ticket ticket);
    // Blocks until everything queued is done (failures are left to their tickets' waits).
    void drain();
    // The copies finished since the last call, in the order they ran.
    [[nodiscard]] std::vector<Record> takeRecords();

private:
    struct Job
    {
        Ticket ticket;
        Action action;
        std::function<std::int64_t()> copy;
        std::function<void()> ready;
    };
    void loop(std::vector<int> cores);

    std::string m_name;
    std::mutex m_mutex;
    std::condition_variable m_changed;
    std::deque<Job> m_queue;
    Ticket m_next = 1;
    Ticket m_done = 0; // every ticket up to this one has finished
    bool m_stopping = false;
    std::map<Ticket, std::exception_ptr> m_failures;
    std::vector<Record> m_records;
    std::thread m_thread; // last: starts once the members above exist
};

} // namespace ps::engine
