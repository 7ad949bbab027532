// Devices that time-share a core: CPU devices outnumbering the cores they run on (cpu:4 on two
// cores pins devices 0 and 2 to one core, 1 and 3 to the other). The operating system slices a
// core between the threads pinned to it, so an action that overlaps k others of its group runs at
// 1/(k+1) of its speed for that time (processor sharing). The simulator finds the slowdowns as a
// fixed point: simulate, measure each compute span's concurrency, stretch, simulate again.
// Depends on: nothing but the standard library.
#pragma once

#include <cstddef>
#include <vector>

namespace ps::sim {

// One compute action as simulated: which device ran it, its index in the device's action list,
// and its (stretched) interval.
struct ComputeSpan
{
    std::size_t device = 0;
    std::size_t action = 0;
    double startNs = 0;
    double endNs = 0;
};

// The core group of each of `devices` devices placed `devicesPerNode` to a node whose devices
// share `cores` cores: device d of a node on core d mod cores, when they outnumber the cores;
// empty when every device has its own (cores 0, or at least as many cores as devices).
[[nodiscard]] std::vector<int> coreGroups(int devices, int devicesPerNode, int cores);

// For each span, the slowdown processor sharing gives it over its interval: the interval's length
// over the integral of 1/n(t), n(t) the number of spans of the same group running at t (itself
// included); 1 for a span that overlaps none. A device beyond `groups` shares with none.
[[nodiscard]] std::vector<double> sharingSlowdowns(
    const std::vector<ComputeSpan>& spans, const std::vector<int>& groups);

} // namespace ps::sim
