// `pipestudio compare`: a finished run (or a trace imported as one) against the simulator's
// prediction of it: iteration time, per-device peak memory, the largest action differences.
#include "cli/commands.h"
#include "cpu/ndarray.h"
#include "graph/graph_summary.h"
#include "runtime/run_prediction.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <limits>

namespace ps::app {
namespace {

    struct CompareOptions
    {
        std::string project;
        std::int64_t run = 0;
        std::string profile; // empty: the run's own (imported for a trace's run, else measured)
        bool json = false;
    };

    double median(std::vector<double> v)
    {
        if (v.empty())
            return 0;
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    }

    // Each device's predicted peak (and its breakdown by use) against the run's measured one; a
    // trace imported as a run measured no memory: its peaks are null, not zero.
    nlohmann::ordered_json deviceComparisons(
        const ProjectStore& store, std::int64_t runId, const SimulationResult& predicted)
    {
        const auto devices = static_cast<int>(predicted.devices.size());
        std::vector<std::int64_t> peak(static_cast<std::size_t>(devices), 0);
        std::vector<std::string> peakUses(static_cast<std::size_t>(devices), "{}");
        for (const auto& m : store.loadRunDeviceMetrics(runId)) {
            const auto k = static_cast<std::size_t>(m.device);
            if (m.device < devices && m.peakBytes > peak[k]) {
                peak[k] = m.peakBytes;
                peakUses[k] = m.peakByUse;
            }
        }
        auto devs = nlohmann::ordered_json::array();
        for (std::size_t k = 0; k < peak.size() && k < predicted.devices.size(); ++k) {
            // The model's breakdown at its peak against the allocator's at the measured one.
            const auto& mem = predicted.devices[k].memory;
            const auto measuredUses = nlohmann::json::parse(peakUses[k]);
            const std::array<std::pair<const char*, double>, engine::kMemoryUses> modelled {
                { { "parameters", mem.parameters + mem.stashedWeights }, { "gradients", mem.gradients },
                    { "optimizer_states", mem.optimizerStates }, { "activations", mem.activations },
                    { "workspace", mem.workspace }, { "messages", mem.messages } }
            };
            auto uses = nlohmann::ordered_json::object();
            for (const auto& [name, bytes] : modelled)
                uses[name] = { { "predicted_bytes", bytes }, { "measured_bytes", measuredUses.value(name, 0.0) } };
            const auto measuredPeak = peak[k] > 0 ? nlohmann::ordered_json(peak[k]) : nlohmann::ordered_json();
            const auto peakError = peak[k] > 0
                ? nlohmann::ordered_json(predicted.devices[k].peakBytes / static_cast<double>(peak[k]) - 1)
                : nlohmann::ordered_json();
            devs.push_back({ { "device", k }, { "predicted_peak_bytes", predicted.devices[k].peakBytes },
                { "measured_peak_bytes", measuredPeak }, { "peak_error", peakError }, { "by_use", uses } });
        }
        return devs;
    }

    void printComparison(const nlohmann::ordered_json& j)
    {
        fmt::print("run {} ({}), profile {}\n", j["run"].get<std::int64_t>(), j["schedule"].get<std::string>(),
            j["profile"].get<std::string>());
        fmt::print("iteration: predicted {:.2f} ms, measured {:.2f} ms (median), error {:+.1f}%\n",
            j["predicted_iteration_ms"].get<double>(), j["measured_iteration_ms"].get<double>(),
            100 * j["iteration_error"].get<double>());
        for (const auto& dv : j["devices"]) {
            if (dv["measured_peak_bytes"].is_null()) {
                fmt::print("device {}: peak predicted {}, not measured\n", dv["device"].get<int>(),
                    formatBytes(dv["predicted_peak_bytes"].get<double>()));
                continue;
            }
            fmt::print("device {}: peak predicted {}, measured {}, error {:+.1f}%\n", dv["device"].get<int>(),
                formatBytes(dv["predicted_peak_bytes"].get<double>()),
                formatBytes(static_cast<double>(dv["measured_peak_bytes"].get<std::int64_t>())),
                100 * dv["peak_error"].get<double>());
            for (const auto& [name, u] : dv["by_use"].items())
                fmt::print("  {:<17} predicted {:>10}  measured {:>10}\n", name,
                    formatBytes(u["predicted_bytes"].get<double>()), formatBytes(u["measured_bytes"].get<double>()));
        }
        for (const auto& a : j["largest_action_differences"])
            fmt::print("  {:>8} on device {}: measured {:.3f} ms, predicted {:.3f} ms\n",
                a["action"].get<std::string>(), a["device"].get<int>(), a["measured_ms"].get<double>(),
                a["predicted_ms"].get<double>());
    }

    // Predicted against measured for a finished run (or a trace imported as one): the simulator fed
    // with the profile asked for (default: the project's measured profile for the run's devices,
    // else the analytical one; for a trace's run its imported profile) over the run's cuts and
    // schedule, against the run's median step time, per-device peak memory (where measured) and
    // the actions of its last stored timeline.
    int runCompare(const CompareOptions& o)
    {
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        const auto runId = o.run > 0 ? o.run : store.latestRunId();
        if (runId == 0)
            throw Error("'" + o.project + "' has no training runs");
        const auto graph = store.loadGraph();
        auto shape = engine::shapeFromRun(store, runId, graph.nodeCount());
        const bool gpu = shape.deviceKind != "cpu";
        if (!o.profile.empty())
            shape.profileSource = o.profile;
        const auto measuredProfile = engine::measuredProfileFor(store, shape);
        if (!measuredProfile && !shape.profileSource.empty() && shape.profileSource != "analytical")
            throw Error("'" + o.project + "' stores no '" + shape.profileSource + "' profile for " + shape.deviceKind
                + " (" + (shape.profileSource == "imported" ? "pipestudio import-trace" : "pipestudio profile")
                + " stores one; --profile analytical compares with the cost model)");
        const auto prediction = engine::predictWithStoredProfile(store, graph, shape);
        const auto& predicted = prediction.simulation;
        const std::string source = measuredProfile ? engine::profileDescription(prediction)
            : shape.profileSource == "analytical"  ? "analytical on " + shape.deviceKind
            : gpu ? "analytical on " + shape.deviceKind + " (no measured profile: run `pipestudio profile " + o.project
                + " --device cuda:0" + (shape.precision == "fp32" ? "" : " --precision " + shape.precision) + "`)"
                  : "analytical (no measured profile: run `pipestudio profile`)";
        std::vector<double> stepNs;
        for (const auto& m : store.loadRunMetrics(runId))
            stepNs.push_back(m.stepNs);
        // The first step of a training run allocates and warms the caches; a trace's iterations
        // come after the profiler's own warm-up (its schedule), so all of them count.
        const bool traced = nlohmann::json::parse(store.runConfig(runId)).value("source", std::string()) == "trace";
        if (stepNs.size() > 1 && !traced)
            stepNs.erase(stepNs.begin());
        const double measuredNs = median(stepNs);
        nlohmann::ordered_json j { { "run", runId }, { "profile", source },
            { "schedule", scheduleName(shape.schedule) }, { "predicted_iteration_ms", predicted.iterationNs / 1e6 },
            { "measured_iteration_ms", measuredNs / 1e6 },
            { "iteration_error", measuredNs > 0 ? predicted.iterationNs / measuredNs - 1 : 0 } };
        j["devices"] = deviceComparisons(store, runId, predicted);
        // Action by action over the last stored iteration.
        const auto iterations = store.runEventIterations(runId);
        auto actions = nlohmann::ordered_json::array();
        if (!iterations.empty()) {
            for (const auto& d :
                engine::largestActionDifferences(store.loadRunEvents(runId, iterations.back()), predicted.events, 8))
                actions.push_back({ { "action", d.action }, { "device", d.device }, { "measured_ms", d.measuredMs },
                    { "predicted_ms", d.predictedMs } });
        }
        j["largest_action_differences"] = actions;
        if (o.json)
            fmt::print("{}\n", j.dump(2));
        else
            printComparison(j);
        return 0;
    }

} // namespace

void addCompareCommand(CLI::App& app, Action& action)
{
    auto c = std::make_shared<CompareOptions>();
    auto* compare = app.add_subcommand("compare",
        "A training run's measured iteration time, peak memory and actions against the simulator's prediction");
    compare->add_option("project", c->project, "Project file (.pstudio)")->required();
    compare->add_option("--run", c->run, "Run id (default: the newest)")
        ->check(CLI::Range(std::int64_t { 1 }, std::numeric_limits<std::int64_t>::max()));
    compare->add_option("--profile", c->profile,
        "Profile to predict with: analytical, measured (this machine's `pipestudio profile` rows for the run's "
        "devices), imported (an `import-trace` profile) or a stored source name; default: the run's own (imported "
        "for a trace imported as a run, else measured when stored)");
    compare->add_flag("--json", c->json, "Print JSON");
    compare->callback([c, &action] { action = [c] { return runCompare(*c); }; });
}

} // namespace ps::app
