// Channels carry a stage's boundary activations forward and their gradients back, one message per
// micro-batch, with byte accounting. The in-process channel copies onto the receiving device's
// allocator (so the receiver's memory cap applies and the sender may free its copy); a CUDA peer
// copy or an NCCL send/recv implements the same interface.
//
// Receives block until the message arrives or the run is aborted (another worker failed). Over an
// emulated link (runtime/emulated_link.h) a message arrives when the link delivers it.
// Depends on: backend.h, runtime/emulated_link.h; no Qt, no CUDA.
#pragma once

#include "backend.h"
#include "runtime/emulated_link.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ps::engine {

// Thrown by a wait that gave up because another worker failed: a consequence, never the cause
// (the runner reports the cause first).
class Aborted : public Error
{
public:
    using Error::Error;
};

// Set by the first worker that fails; every blocking wait of the run gives up on it.
class AbortSignal
{
public:
    void abort();
    [[nodiscard]] bool aborted() const
    {
        return m_aborted.load();
    }
    // Waits on `cv` (with `lock` held) until `ready()` or an abort; returns false on abort.
    template <typename Ready> bool wait(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, Ready ready)
    {
        registerWaiter(cv);
        // Polls the abort flag too: abort() notifies without the waiter's mutex, so a wake-up
        // could fall between the waiter's check and its wait.
        while (!ready() && !aborted())
            cv.wait_for(lock, std::chrono::milliseconds(20));
        return !aborted();
    }

private:
    void registerWaiter(std::condition_variable& cv);
    std::atomic<bool> m_aborted { false };
    std::mutex m_mutex;
    std::vector<std::condition_variable*> m_waiters;
};

class Channel
{
public:
    virtual ~Channel() = default;
    // Delivers the message of micro-batch `mb` (undefined arrays travel as "no value"). Returns
    // the transfer's time on the link when the channel emulates one.
    virtual std::optional<EmulatedLink::Transfer> send(MicroBatchId mb, std::vector<NdArray> message) = 0;
    // Blocks until micro-batch `mb`'s message is there; throws ps::Error if the run was aborted.
    [[nodiscard]] virtual std::vector<NdArray> receive(MicroBatchId mb) = 0;
    [[nodiscard]] virtual std::int64_t bytesSent() const = 0;
    [[nodiscard]] virtual std::string describe() const = 0;
};

// Between two devices of this process: the sender copies onto the receiver's allocator; with a
// link, the receiver sees the copy when the link would have delivered it.
class InProcessChannel : public Channel
{
public:
    InProcessChannel(std::string name, const Backend& source, const Backend& target, Allocator& targetMemory,
        AbortSignal& abort, EmulatedLink* link = nullptr);

    std::optional<EmulatedLink::Transfer> send(MicroBatchId mb, std::vector<NdArray> message) override;
    [[nodiscard]] std::vector<NdArray> receive(MicroBatchId mb) override;
    [[nodiscard]] std::int64_t bytesSent() const override
    {
        return m_bytes.load();
    }
    [[nodiscard]] std::string describe() const override
    {
        return m_name;
    }

private:
    std::string m_name;
    const Backend& m_source;
    const Backend& m_backend;
    Allocator& m_target;
    AbortSignal& m_abort;
    EmulatedLink* m_link = nullptr;
    std::mutex m_mutex;
    std::condition_variable m_ready;
    struct Letter
    {
        std::vector<NdArray> arrays;
        EmulatedLink::Clock::time_point deliveredAt;
    };
    std::map<std::uint32_t, Letter> m_mailbox; // by micro-batch
    std::atomic<std::int64_t> m_bytes { 0 };
};

} // namespace ps::engine
