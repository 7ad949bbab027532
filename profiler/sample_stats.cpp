#include "sample_stats.h"

#include "util/error.h"

#include <algorithm>
#include <cmath>

namespace ps::profiler {
namespace {

    // Linear interpolation between closest ranks on sorted data (NumPy's default).
    double quantileSorted(const std::vector<double>& sorted, double q)
    {
        const double pos = q * static_cast<double>(sorted.size() - 1);
        const auto lo = static_cast<std::size_t>(std::floor(pos));
        const auto hi = std::min(lo + 1, sorted.size() - 1);
        return sorted[lo] + (pos - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
    }

} // namespace

SampleStats summarizeSamples(std::vector<double> samples)
{
    if (samples.empty())
        throw Error("no timing samples to summarize");
    std::sort(samples.begin(), samples.end());
    SampleStats s;
    s.count = samples.size();
    s.min = samples.front();
    s.max = samples.back();
    s.median = quantileSorted(samples, 0.5);
    s.p10 = quantileSorted(samples, 0.1);
    s.p90 = quantileSorted(samples, 0.9);
    std::vector<double> deviations;
    deviations.reserve(samples.size());
    for (double v : samples)
        deviations.push_back(std::abs(v - s.median));
    std::sort(deviations.begin(), deviations.end());
    s.mad = quantileSorted(deviations, 0.5);
    return s;
}

} // namespace ps::profiler
