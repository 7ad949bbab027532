// `pipestudio calibrate`: the analytical model against a stored measured or imported profile, per
// op class (core/cost/calibration.h): each class's factor and per-node error before and after,
// and the calibrated profile stored as "calibrated" for the planning commands' --profile.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cost/calibration.h"
#include "cost/profile_threads.h"
#include "runtime/training_run.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <memory>

namespace ps::app {
namespace {

    struct CalibrateOptions
    {
        std::string project;
        bool json = false;
        bool noSave = false;
        int worstNodes = 0; // --nodes N: the N nodes the model misses by the most time
    };

    // The covered nodes by how much time the model (before the class factors) misses on them,
    // most first; ties by node id.
    std::vector<NodeFit> worstNodes(const Calibration& c, int count)
    {
        auto nodes = c.nodes;
        const auto n = std::min(nodes.size(), static_cast<std::size_t>(std::max(count, 0)));
        std::partial_sort(nodes.begin(), nodes.begin() + static_cast<std::ptrdiff_t>(n), nodes.end(),
            [](const NodeFit& a, const NodeFit& b) {
                const double x = std::abs(a.measuredNs - a.analyticalNs);
                const double y = std::abs(b.measuredNs - b.analyticalNs);
                return x != y ? x > y : a.node < b.node;
            });
        nodes.resize(n);
        return nodes;
    }

    void printWorstNodes(const Graph& graph, const Calibration& calibration, int count)
    {
        fmt::print("\nNodes the model misses by the most time, before the class factors:\n");
        fmt::print("  {:<40} {:<14} {:<14} {:>9} {:>9}  {}\n", "node", "op", "class", "measured", "model",
            "model vs measured (ms)");
        for (const auto& n : worstNodes(calibration, count)) {
            const auto& node = graph.nodes()[n.node];
            fmt::print("  {:<40} {:<14} {:<14} {:>9.3f} {:>9.3f}  {:+.0f}%\n", node.name, toString(node.op),
                toString(calibration.nodeClass[n.node]), n.measuredNs / 1e6, n.analyticalNs / 1e6,
                100 * (n.analyticalNs / n.measuredNs - 1));
        }
    }

    // The thread count a CPU calibration runs at: the one given; else every core where the project
    // holds a profile measured so, else the most threads a stored profile was measured with that
    // this machine's cores can run (a profile of one thread per device, `profile --threads 1`, is
    // fitted against the CPU measured at one thread, not at every core); every core where no stored
    // profile records a count this machine can run.
    int calibrationThreads(const ProjectStore& store, const std::string& source, int given)
    {
        if (given > 0)
            return given;
        const int all = engine::threadsPerDevice(1);
        int most = 0; // 0: a profile that records no count
        for (const int t : store.profileThreads("cpu", source)) {
            if (t == all)
                return all;
            if (t <= all)
                most = std::max(most, t);
        }
        return most > 0 ? most : all;
    }

    int runCalibrate(const CalibrateOptions& o, DeviceOptions d)
    {
        if (d.profile.empty() || d.profile == "analytical" || d.profile == "calibrated")
            throw Error("--profile: calibrate against a measured or imported profile (measured, imported or a stored "
                        "source), not '"
                + d.profile + "'");
        auto store =
            ProjectStore::open(o.project, o.noSave ? ProjectStore::Access::ReadOnly : ProjectStore::Access::ReadWrite);
        const auto graph = store.loadGraph();
        const auto source = d.profile == "measured" ? measuredSource(d.device, d) : d.profile;
        // On the CPU the model is measured at the thread count it is fitted at (calibrationThreads).
        if (d.device == "cpu")
            d.threads = calibrationThreads(store, source, d.threads);
        const auto device = resolveDevice(d);
        const auto matched = loadMatchedProfile(store, device.id, source, device.id == "cpu" ? d.threads : 0);
        if (!matched || matched->profile.nodes.size() != graph.nodeCount())
            throw Error("--profile " + d.profile + ": '" + o.project + "' has no " + source + " profile of its "
                + std::to_string(graph.nodeCount()) + " nodes for device '" + device.id + "'");
        const double mb = static_cast<double>(graph.info().microBatch);
        // A GPU profile (CUPTI, an imported trace's kernels) holds device time, of which the host's
        // launch cost is no part: the classes are compared on the model's kernel time (each kernel's
        // fixed device time in place of its launch cost), and the calibrated profile gets the
        // launch costs back unscaled.
        const bool deviceTime = device.id != "cpu";
        auto kernelOptions = costOptions(d);
        if (deviceTime)
            kernelOptions.kernelLaunchNs = kernelOptions.kernelDeviceNs;
        const auto analytical = estimateProfile(graph, device, kernelOptions);
        const auto calibration = calibrate(graph, matched->profile, analytical, nodeClasses(graph, device, d), mb);
        if (calibration.coveredNodes == 0)
            throw Error("the " + source + " profile covers no node with a time: nothing to calibrate against");
        auto calibrated = deviceTime
            ? calibratedProfile(analytical, calibration, estimateProfile(graph, device, costOptions(d)))
            : calibratedProfile(analytical, calibration);
        calibrated.threads = matched->profile.threads; // fitted at that count
        if (!o.noSave)
            store.saveProfile(calibrated, 1, mb > 1 ? mb : 2);
        if (o.json) {
            nlohmann::ordered_json classes = nlohmann::ordered_json::array();
            for (const auto& c : calibration.classes)
                classes.push_back(
                    { { "class", toString(c.kind) }, { "nodes", c.nodes }, { "measured_ms", c.measuredNs / 1e6 },
                        { "analytical_ms", c.analyticalNs / 1e6 }, { "factor", c.factor },
                        { "median_error_before", c.medianErrorBefore }, { "median_error_after", c.medianErrorAfter } });
            nlohmann::ordered_json misses = nlohmann::ordered_json::array();
            for (const auto& n : worstNodes(calibration, o.worstNodes)) {
                const auto& node = graph.nodes()[n.node];
                misses.push_back({ { "node", node.name }, { "op", toString(node.op) },
                    { "class", toString(calibration.nodeClass[n.node]) }, { "measured_ms", n.measuredNs / 1e6 },
                    { "analytical_ms", n.analyticalNs / 1e6 } });
            }
            nlohmann::ordered_json out { { "device", device.id }, { "profile", source },
                { "threads", device.id == "cpu" ? d.threads : 0 }, { "profile_note", matched->note },
                { "compared_on",
                    deviceTime ? "device time (kernels with their fixed device time, no launch cost)" : "step time" },
                { "forward_only", calibration.forwardOnly }, { "covered_nodes", calibration.coveredNodes },
                { "nodes", graph.nodeCount() }, { "micro_batch", mb }, { "saved", !o.noSave }, { "classes", classes },
                { "worst_nodes", misses } };
            fmt::print("{}\n", out.dump(2));
            return 0;
        }
        fmt::print("Analytical model on {} against the {} profile ({} of {} nodes with a time), micro-batch {}{}{}{}\n",
            device.name, source, calibration.coveredNodes, graph.nodeCount(), mb,
            matched->note.empty() ? "" : "; profile " + matched->note,
            deviceTime ? "; on device time: the model's kernels, each with its fixed device time, no launch cost" : "",
            calibration.forwardOnly ? "; forward only (the profile times no backward)" : "");
        fmt::print("{:<14} {:>5} {:>12} {:>14} {:>8}  {}\n", "class", "nodes", "measured ms", "analytical ms", "factor",
            "median |error| per node, before -> after");
        for (const auto& c : calibration.classes)
            fmt::print("{:<14} {:>5} {:>12.3f} {:>14.3f} {:>8.3f}  {:.1f}% -> {:.1f}%\n", toString(c.kind), c.nodes,
                c.measuredNs / 1e6, c.analyticalNs / 1e6, c.factor, 100 * c.medianErrorBefore,
                100 * c.medianErrorAfter);
        if (o.worstNodes > 0)
            printWorstNodes(graph, calibration, o.worstNodes);
        if (!o.noSave)
            fmt::print("Saved the calibrated profile (source calibrated, device {}): plan with --profile calibrated "
                       "--device {}\n",
                device.id, device.id);
        return 0;
    }

} // namespace

void addCalibrateCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("calibrate",
        "Fit the analytical model per op class to a stored measured or imported profile; store it as 'calibrated'");
    auto o = std::make_shared<CalibrateOptions>();
    auto d = std::make_shared<DeviceOptions>();
    d->device = "cpu";
    d->profile = "measured";
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    addDeviceOptions(cmd, *d);
    cmd->add_option("--profile", d->profile, "The profile to fit to: measured (default), imported, or a stored source");
    cmd->add_option("--threads", d->threads,
           "cpu: the thread count to fit at (a profile measured at it, `profile --threads N`; the CPU measured with "
           "as many); default every core, or the most threads a stored profile was measured with where none was "
           "measured with every core")
        ->check(CLI::Range(1, 256));
    cmd->add_option("--nodes", o->worstNodes,
           "Also list the N nodes the model (before the class factors) misses by the most time")
        ->check(CLI::Range(1, 100000));
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->add_flag("--no-save", o->noSave, "Print the fit without storing the calibrated profile");
    cmd->callback([&action, o, d] { action = [o, d] { return runCalibrate(*o, *d); }; });
}

} // namespace ps::app
