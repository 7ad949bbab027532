// Robust statistics over repeated timing samples: what the profilers report per node.
//
// Medians and the median absolute deviation rather than means, because a single preempted
// repeat on a shared CPU would otherwise move the profile. Depends on: the standard library.
#pragma once

#include <cstddef>
#include <vector>

namespace ps::profiler {

struct SampleStats
{
    std::size_t count = 0;
    double min = 0;
    double median = 0;
    double max = 0;
    double mad = 0; // median absolute deviation from the median
    double p10 = 0;
    double p90 = 0;
};

// Throws ps::Error when `samples` is empty.
[[nodiscard]] SampleStats summarizeSamples(std::vector<double> samples);

} // namespace ps::profiler
