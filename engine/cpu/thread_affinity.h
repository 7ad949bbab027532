// Which cores a CPU device's threads run on: the cores this process may use, and pinning the
// calling thread to a device's share of them.
// Depends on: Linux sched/pthread affinity only.
#pragma once

#include <vector>

namespace ps::engine {

// The cores this process may run on (taskset, a container's cpuset), in id order; every core the
// machine reports when the mask cannot be read.
[[nodiscard]] std::vector<int> allowedCores();
// Pins the calling thread to `cores` (empty: leaves it as it is). Best effort: a failure only
// leaves the thread unpinned.
void pinCurrentThread(const std::vector<int>& cores);
// The cores the calling thread may run on now (empty when they cannot be read).
[[nodiscard]] std::vector<int> currentThreadCores();

} // namespace ps::engine
