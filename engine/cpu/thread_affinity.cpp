#include "cpu/thread_affinity.h"

#include <algorithm>
#include <pthread.h>
#include <sched.h>
#include <thread>

namespace ps::engine {

std::vector<int> allowedCores()
{
    std::vector<int> ids;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &set))
                ids.push_back(c);
        }
    }
    if (ids.empty()) {
        for (int c = 0; c < std::max(1, static_cast<int>(std::thread::hardware_concurrency())); ++c)
            ids.push_back(c);
    }
    return ids;
}

void pinCurrentThread(const std::vector<int>& cores)
{
    if (cores.empty())
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores)
        CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

std::vector<int> currentThreadCores()
{
    std::vector<int> ids;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; ++c) {
            if (CPU_ISSET(c, &set))
                ids.push_back(c);
        }
    }
    return ids;
}

} // namespace ps::engine
