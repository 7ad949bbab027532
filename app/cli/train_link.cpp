#include "cli/train_link.h"

#include "cli/device_options.h"
#include "cli/validators.h"
#include "runtime/run_prediction.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace ps::app {

void addLinkOptions(CLI::App* cmd, LinkOptions& o)
{
    cmd->add_option("--link-bandwidth", o.bandwidth,
        "Emulate a link of this bandwidth between the devices, e.g. 1GB/s (default: memory speed)");
    cmd->add_option("--link-latency", o.latencySeconds, "The emulated link's latency in seconds")
        ->check(numberIn(0, 3600));
    cmd->add_option("--preempt", o.preempt,
        "Periodic preemption of the emulated link: PERIOD_S,FRACTION,SHARE (FRACTION of its bandwidth for SHARE of "
        "every PERIOD_S seconds)");
    cmd->add_option("--adapt-every", o.adaptEvery,
           "With --schedule kfkb:auto: steps between the group-size controller's decisions")
        ->check(CLI::Range(1, 1000000));
}

engine::LinkEmulation linkEmulation(const LinkOptions& o)
{
    engine::LinkEmulation link;
    if (o.bandwidth.empty()) {
        if (!o.preempt.empty() || o.latencySeconds > 0)
            throw Error("--preempt and --link-latency need --link-bandwidth (the link they act on)");
        return link;
    }
    link.bandwidth = parseBandwidth(o.bandwidth, "--link-bandwidth");
    link.latencySeconds = o.latencySeconds;
    if (!o.preempt.empty())
        link.trace = preemptionTrace(o.preempt);
    return link;
}

std::unique_ptr<engine::GroupSizeController> groupController(const ProjectStore& store, int adaptEvery,
    std::int64_t deviceMemoryBytes, const std::string& deviceKind, const std::string& precision,
    engine::TrainingRun& run)
{
    const auto& c = run.config();
    engine::RunShape shape { c.partition, c.schedule, c.memory, c.stageDevices, run.graph().info().microBatch,
        deviceMemoryBytes, c.link, deviceKind, precision };
    const auto matched = engine::measuredProfileFor(store, shape);
    std::optional<Profile> measured = matched ? std::optional<Profile>(matched->profile) : std::nullopt;
    auto candidates = engine::autoGroupCandidates(run.graph(), measured ? &*measured : nullptr, shape);
    auto controller = std::make_unique<engine::GroupSizeController>(
        run.graph(), std::move(measured), shape, std::move(candidates), adaptEvery);
    controller->setCurrent(controller->choose(c.link.bandwidth).chosen);
    engine::applyGroupCandidate(run, controller->current());
    return controller;
}

void adaptGroupSize(
    engine::GroupSizeController* controller, engine::TrainingRun& run, const engine::RunStepResult& r, bool json)
{
    const auto a = controller ? engine::adaptAfterStep(*controller, run, r) : std::nullopt;
    if (!a)
        return;
    const auto* d = &a->decision;
    const auto& before = a->before;
    nlohmann::ordered_json predicted = nlohmann::ordered_json::array();
    std::string text;
    for (const auto& [c, ns] : d->predictedIterationNs) {
        predicted.push_back(
            { { "k", c.k }, { "micro_batch", c.microBatch }, { "micro_batches", c.microBatches }, { "ms", ns / 1e6 } });
        text += fmt::format(" {}:{:.0f}", c.label(), ns / 1e6);
    }
    if (json)
        fmt::print("{}\n",
            nlohmann::ordered_json { { "group_size", d->chosen.k }, { "micro_batch", d->chosen.microBatch },
                { "micro_batches", d->chosen.microBatches }, { "previous_group_size", before.k },
                { "previous_micro_batch", before.microBatch }, { "after_step", d->step },
                { "measured_bandwidth", d->measuredBandwidth }, { "predicted_iteration_ms", predicted } }
                .dump());
    else
        fmt::print("  {} -> {} (M {} -> {}) after step {}: links measured at {:.3g} MB/s (moving average); "
                   "predicted ms:{}\n",
            before.label(), d->chosen.label(), before.microBatches, d->chosen.microBatches, d->step,
            d->measuredBandwidth / 1e6, text);
}

} // namespace ps::app
