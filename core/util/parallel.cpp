#include "util/parallel.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

namespace ps {

int defaultSearchThreads()
{
    if (const char* env = std::getenv("PS_THREADS")) {
        const int n = std::atoi(env);
        if (n > 0)
            return n;
    }
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set); // the cores this process may run on (taskset, cpusets)
#endif
    return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

namespace {

    std::atomic<int> g_busyThreads { 0 };
    thread_local bool t_counted = false; // this thread is among g_busyThreads

    // Counts the calling thread as busy for its lifetime, unless an outer scope already does.
    class BusyScope
    {
    public:
        BusyScope()
            : m_owner(!t_counted)
        {
            if (m_owner) {
                t_counted = true;
                ++g_busyThreads;
            }
        }
        ~BusyScope()
        {
            if (m_owner) {
                --g_busyThreads;
                t_counted = false;
            }
        }
        BusyScope(const BusyScope&) = delete;
        BusyScope& operator=(const BusyScope&) = delete;

    private:
        bool m_owner;
    };

} // namespace

int idleSearchThreads()
{
    return std::max(0, defaultSearchThreads() - g_busyThreads.load());
}

void parallelFor(std::size_t count, int threads, const std::function<void(std::size_t)>& task)
{
    if (threads <= 0)
        threads = defaultSearchThreads();
    const auto workers = std::min<std::size_t>(count, static_cast<std::size_t>(threads));
    if (workers <= 1) {
        const BusyScope busy;
        for (std::size_t i = 0; i < count; ++i)
            task(i);
        return;
    }
    std::atomic<std::size_t> next { 0 };
    std::atomic<bool> failed { false };
    std::mutex mutex;
    std::size_t failedIndex = count;
    std::exception_ptr failure;
    const auto work = [&] {
        const BusyScope busy;
        for (auto i = next.fetch_add(1); i < count && !failed.load(); i = next.fetch_add(1)) {
            try {
                task(i);
            } catch (...) {
                const std::lock_guard lock(mutex);
                if (i < failedIndex) {
                    failedIndex = i;
                    failure = std::current_exception();
                }
                failed = true;
            }
        }
    };
    {
        std::vector<std::jthread> pool; // joined on every way out, a failed thread start included
        pool.reserve(workers - 1);
        for (std::size_t w = 1; w < workers; ++w)
            pool.emplace_back(work);
        work();
    }
    if (failure)
        std::rethrow_exception(failure);
}

} // namespace ps
