// `pipestudio compare`: a finished run (or a trace imported as one) against the simulator's
// prediction of it: iteration time, per-device peak memory, the largest action differences.
#include "cli/commands.h"
#include "graph/graph_summary.h"
#include "runtime/run_comparison.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

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

    // The comparison as `compare --json` prints it; a trace imported as a run measured no memory: its
    // measured peaks are null, not zero.
    nlohmann::ordered_json comparisonJson(const engine::RunComparison& c)
    {
        nlohmann::ordered_json j { { "run", c.runId }, { "profile", c.profileExplained }, { "schedule", c.schedule },
            { "predicted_iteration_ms", c.predicted.iterationNs / 1e6 },
            // null where no step finished (a run that failed before its first step)
            { "measured_iteration_ms",
                c.measuredStepNs > 0 ? nlohmann::ordered_json(c.measuredStepNs / 1e6) : nlohmann::ordered_json() },
            { "iteration_error",
                c.measuredStepNs > 0 ? nlohmann::ordered_json(c.predicted.iterationNs / c.measuredStepNs - 1)
                                     : nlohmann::ordered_json() } };
        auto devs = nlohmann::ordered_json::array();
        for (const auto& p : c.peaks) {
            auto uses = nlohmann::ordered_json::object();
            for (const auto& u : p.byUse)
                uses[u.use] = { { "predicted_bytes", u.predictedBytes }, { "measured_bytes", u.measuredBytes } };
            const bool measured = p.measuredBytes > 0;
            const auto error = [&](double predicted) {
                return measured ? nlohmann::ordered_json(predicted / static_cast<double>(p.measuredBytes) - 1)
                                : nlohmann::ordered_json();
            };
            devs.push_back({ { "device", p.device }, { "predicted_peak_bytes", p.predictedBytes },
                { "predicted_timed_peak_bytes", p.predictedTimedBytes },
                { "predicted_peak_without_messages_bytes", p.predictedWithoutMessagesBytes },
                { "measured_peak_bytes",
                    measured ? nlohmann::ordered_json(p.measuredBytes) : nlohmann::ordered_json() },
                { "peak_error", error(p.predictedBytes) }, { "timed_peak_error", error(p.predictedTimedBytes) },
                { "by_use", uses } });
        }
        j["devices"] = devs;
        auto actions = nlohmann::ordered_json::array();
        for (const auto& d : c.largestDifferences)
            actions.push_back({ { "action", d.action }, { "device", d.device }, { "measured_ms", d.measuredMs },
                { "predicted_ms", d.predictedMs } });
        j["largest_action_differences"] = actions;
        return j;
    }

    void printComparison(const nlohmann::ordered_json& j)
    {
        fmt::print("run {} ({}), profile {}\n", j["run"].get<std::int64_t>(), j["schedule"].get<std::string>(),
            j["profile"].get<std::string>());
        if (j["measured_iteration_ms"].is_null())
            fmt::print("iteration: predicted {:.2f} ms, not measured (no step of the run finished)\n",
                j["predicted_iteration_ms"].get<double>());
        else
            fmt::print("iteration: predicted {:.2f} ms, measured {:.2f} ms (median), error {:+.1f}%\n",
                j["predicted_iteration_ms"].get<double>(), j["measured_iteration_ms"].get<double>(),
                100 * j["iteration_error"].get<double>());
        for (const auto& dv : j["devices"]) {
            if (dv["measured_peak_bytes"].is_null()) {
                fmt::print("device {}: peak predicted {}, not measured\n", dv["device"].get<int>(),
                    formatBytes(dv["predicted_peak_bytes"].get<double>()));
                continue;
            }
            fmt::print("device {}: peak predicted {}, measured {}, error {:+.1f}%", dv["device"].get<int>(),
                formatBytes(dv["predicted_peak_bytes"].get<double>()),
                formatBytes(static_cast<double>(dv["measured_peak_bytes"].get<std::int64_t>())),
                100 * dv["peak_error"].get<double>());
            if (dv["predicted_timed_peak_bytes"].get<double>() < dv["predicted_peak_bytes"].get<double>())
                fmt::print(" (with the messages the simulated timing leaves: {}, {:+.1f}%)",
                    formatBytes(dv["predicted_timed_peak_bytes"].get<double>()),
                    100 * dv["timed_peak_error"].get<double>());
            fmt::print("\n");
            for (const auto& [name, u] : dv["by_use"].items())
                fmt::print("  {:<17} predicted {:>10}  measured {:>10}{}\n", name,
                    formatBytes(u["predicted_bytes"].get<double>()), formatBytes(u["measured_bytes"].get<double>()),
                    name == "messages" ? "  (predicted: as many as any timing lets wait)" : "");
        }
        for (const auto& a : j["largest_action_differences"])
            fmt::print("  {:>8} on device {}: measured {:.3f} ms, predicted {:.3f} ms\n",
                a["action"].get<std::string>(), a["device"].get<int>(), a["measured_ms"].get<double>(),
                a["predicted_ms"].get<double>());
    }

    // Predicted against measured for a finished run (or a trace imported as one): engine::compareRun
    // over the run's median step, per-device peak memory (where measured) and the actions of its last
    // stored timeline.
    int runCompare(const CompareOptions& o)
    {
        const auto store = ProjectStore::open(o.project, ProjectStore::Access::ReadOnly);
        const auto runId = o.run > 0 ? o.run : store.latestRunId();
        if (runId == 0)
            throw Error("'" + o.project + "' has no training runs");
        engine::RunComparisonOptions options;
        options.profile = o.profile;
        options.needTimeline = false;
        const auto j = comparisonJson(engine::compareRun(store, runId, options));
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
