#include "runtime/run_comparison.h"

#include "runtime/training_run.h"
#include "store/project_store.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace ps::engine {
namespace {

    double median(std::vector<double> v)
    {
        if (v.empty())
            return 0;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    }

    // Each device's predicted peak and its parts against the largest measured one and the
    // allocator's parts at it.
    std::vector<DevicePeakComparison> peakComparisons(
        const ProjectStore& store, std::int64_t runId, const SimulationResult& predicted)
    {
        std::vector<DevicePeakComparison> out;
        std::vector<std::string> measuredUses(predicted.devices.size(), "{}");
        for (std::size_t d = 0; d < predicted.devices.size(); ++d)
            out.push_back({ static_cast<int>(d), predicted.devices[d].peakBytes, predicted.devices[d].timedPeakBytes,
                predicted.devices[d].peakWithoutMessagesBytes, 0, {} });
        for (const auto& m : store.loadRunDeviceMetrics(runId)) {
            const auto k = static_cast<std::size_t>(m.device);
            if (m.device >= 0 && k < out.size() && m.peakBytes > out[k].measuredBytes) {
                out[k].measuredBytes = m.peakBytes;
                measuredUses[k] = m.peakByUse;
            }
        }
        for (std::size_t k = 0; k < out.size(); ++k) {
            const auto& mem = predicted.devices[k].memory;
            const auto uses = nlohmann::json::parse(measuredUses[k]);
            const std::array<std::pair<const char*, double>, kMemoryUses> modelled {
                { { "parameters", mem.parameters + mem.stashedWeights }, { "gradients", mem.gradients },
                    { "optimizer_states", mem.optimizerStates }, { "activations", mem.activations },
                    { "workspace", mem.workspace }, { "messages", mem.messages } }
            };
            for (const auto& [name, bytes] : modelled)
                out[k].byUse.push_back({ name, bytes, uses.value(name, 0.0) });
        }
        return out;
    }

    std::string profileText(
        const RunPrediction& prediction, const RunShape& shape, bool measured, const std::string& project)
    {
        if (measured)
            return profileDescription(prediction);
        if (shape.profileSource == "analytical")
            return "analytical on " + shape.deviceKind;
        if (shape.deviceKind != "cpu")
            return "analytical on " + shape.deviceKind + " (no measured profile: run `pipestudio profile " + project
                + " --device cuda:0" + (shape.precision == "fp32" ? "" : " --precision " + shape.precision) + "`)";
        return "analytical (no measured profile: run `pipestudio profile`)";
    }

} // namespace

RunComparison compareRun(const ProjectStore& store, std::int64_t runId, const RunComparisonOptions& options)
{
    const auto project = store.path().string();
    const auto graph = store.loadGraph();
    auto shape = shapeFromRun(store, runId, graph.nodeCount());
    if (!options.profile.empty())
        shape.profileSource = options.profile;
    const auto stored = measuredProfileFor(store, shape);
    if (options.strictProfile && !stored && !shape.profileSource.empty() && shape.profileSource != "analytical")
        throw Error("'" + project + "' stores no '" + shape.profileSource + "' profile for " + shape.deviceKind + " ("
            + (shape.profileSource == "imported" ? "pipestudio import-trace" : "pipestudio profile")
            + " stores one; --profile analytical compares with the cost model)");
    RunComparison c;
    c.runId = runId;
    c.iterations = store.runEventIterations(runId);
    if (options.needTimeline && c.iterations.empty())
        throw Error("run " + std::to_string(runId) + " stored no measured timeline");
    if (!c.iterations.empty()) {
        c.iteration = options.iteration > 0 ? options.iteration : c.iterations.back();
        if (std::find(c.iterations.begin(), c.iterations.end(), c.iteration) == c.iterations.end())
            throw Error(
                "run " + std::to_string(runId) + " stored no timeline for iteration " + std::to_string(c.iteration));
    }
    auto prediction = predictRun(graph, stored ? &stored->profile : nullptr, shape);
    if (stored)
        prediction.profileNote = stored->note;
    c.schedule = scheduleName(shape.schedule);
    c.profileSource = profileDescription(prediction);
    c.profileExplained = profileText(prediction, shape, stored.has_value(), project);
    c.predicted = prediction.simulation;
    for (std::size_t d = 0; d < c.predicted.devices.size(); ++d)
        c.deviceNames.push_back(deviceLabel(prediction, d));
    std::vector<double> stepNs;
    for (const auto& m : store.loadRunMetrics(runId))
        stepNs.push_back(m.stepNs);
    // The first step of a training run allocates and warms the caches; a trace's iterations come
    // after the profiler's own warm-up (its schedule), so all of them count.
    const bool traced = nlohmann::json::parse(store.runConfig(runId)).value("source", std::string()) == "trace";
    if (stepNs.size() > 1 && !traced)
        stepNs.erase(stepNs.begin());
    c.measuredStepNs = median(stepNs);
    if (c.iteration > 0) {
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
    }
    c.peaks = peakComparisons(store, runId, c.predicted);
    return c;
}

} // namespace ps::engine
