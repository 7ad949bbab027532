// Independent tasks over the machine's cores, for the searches (issue P19: the auto-search, the
// maximum micro-batch per algorithm). Each task writes its own result slot, so what a caller
// collects does not depend on the thread count or on which thread ran what.
// Depends on: the standard library only.
#pragma once

#include <cstddef>
#include <functional>

namespace ps {

// Threads a search uses when its caller does not say: $PS_THREADS if set to a positive number,
// else the cores this process may run on (its affinity mask; at least 1).
[[nodiscard]] int defaultSearchThreads();

// Threads a search could add now: defaultSearchThreads() less the threads running parallelFor tasks
// (each counted once, however deeply its calls nest), at least 0. A search that would only add
// speculative work asks this first, so it uses cores that other tasks leave idle.
[[nodiscard]] int idleSearchThreads();

// Runs task(i) for i in [0, count) on up to `threads` threads (0: defaultSearchThreads()), the
// calling thread among them, and returns when all are done. Tasks are taken in index order. If
// tasks throw, the exception of the lowest index is rethrown once all have stopped (the others
// are dropped); tasks not yet started when one throws are skipped.
void parallelFor(std::size_t count, int threads, const std::function<void(std::size_t)>& task);

} // namespace ps
