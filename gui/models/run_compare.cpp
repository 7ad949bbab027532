#include "models/run_compare.h"

#include "store/project_store.h"
#include "util/error.h"

#include <algorithm>
#include <limits>

namespace ps::gui {

RunComparison compareRun(const ProjectStore& store, std::int64_t runId, std::int64_t iteration)
{
    RunComparison c;
    c.runId = runId;
    c.iterations = store.runEventIterations(runId);
    if (c.iterations.empty())
        throw Error("run " + std::to_string(runId) + " stored no measured timeline");
    c.iteration = iteration > 0 ? iteration : c.iterations.back();
    if (std::find(c.iterations.begin(), c.iterations.end(), c.iteration) == c.iterations.end())
        throw Error(
            "run " + std::to_string(runId) + " stored no timeline for iteration " + std::to_string(c.iteration));
    const auto prediction = predictStoredRun(store, runId);
    c.predicted = prediction.simulation;
    c.profileSource = profileDescription(prediction);
    for (std::size_t d = 0; d < prediction.simulation.devices.size(); ++d)
        c.deviceNames.push_back(deviceLabel(prediction, d));
    c.measured = store.loadRunEvents(runId, c.iteration);
    double start = std::numeric_limits<double>::max();
    for (const auto& e : c.measured)
        start = std::min(start, e.startNs);
    for (auto& e : c.measured) {
        e.startNs -= start;
        e.endNs -= start;
        c.measuredIterationNs = std::max(c.measuredIterationNs, e.endNs);
    }
    c.largestDifferences = largestActionDifferences(c.measured, c.predicted.events);
    for (std::size_t d = 0; d < c.predicted.devices.size(); ++d)
        c.peaks.push_back({ static_cast<int>(d), c.predicted.devices[d].peakBytes, 0 });
    for (const auto& m : store.loadRunDeviceMetrics(runId)) {
        if (m.device >= 0 && m.device < static_cast<int>(c.peaks.size()))
            c.peaks[static_cast<std::size_t>(m.device)].measuredBytes =
                std::max(c.peaks[static_cast<std::size_t>(m.device)].measuredBytes, m.peakBytes);
    }
    return c;
}

} // namespace ps::gui
