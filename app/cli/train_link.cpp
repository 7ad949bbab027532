#include "cli/train_link.h"

#include "cli/device_options.h"
#include "cli/validators.h"
#include "runtime/run_prediction.h"
#include "util/error.h"

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

std::unique_ptr<engine::GroupSizeController> groupController(
    const ProjectStore& store, int adaptEvery, std::int64_t deviceMemoryBytes, engine::TrainingRun& run)
{
    const auto& c = run.config();
    engine::RunShape shape { c.partition, c.schedule, c.memory, c.stageDevices, run.graph().info().microBatch,
        deviceMemoryBytes, c.link };
    auto controller = std::make_unique<engine::GroupSizeController>(
        run.graph(),
        [&] {
            const auto matched = engine::measuredProfileFor(store, shape);
            return matched ? std::optional<Profile>(matched->profile) : std::nullopt;
        }(),
        shape, engine::autoGroupSizes(c.schedule.microBatches), adaptEvery);
    controller->setK(controller->choose(c.link.bandwidth).k);
    auto spec = c.schedule;
    spec.groupSize = controller->k();
    run.setSchedule(spec);
    return controller;
}

void adaptGroupSize(
    engine::GroupSizeController* controller, engine::TrainingRun& run, const engine::RunStepResult& r, bool json)
{
    const auto d = controller ? controller->observe(r.step, r.events) : std::nullopt;
    if (!d)
        return;
    const int before = run.config().schedule.groupSize;
    if (d->k != before) {
        auto spec = run.config().schedule;
        spec.groupSize = d->k;
        run.setSchedule(spec);
    }
    nlohmann::ordered_json predicted = nlohmann::ordered_json::object();
    std::string text;
    for (const auto& [k, ns] : d->predictedIterationNs) {
        predicted["kfkb:" + std::to_string(k)] = ns / 1e6;
        text += fmt::format(" {}:{:.0f}", k, ns / 1e6);
    }
    if (json)
        fmt::print("{}\n",
            nlohmann::ordered_json { { "group_size", d->k }, { "previous_group_size", before },
                { "after_step", d->step }, { "measured_bandwidth", d->measuredBandwidth },
                { "predicted_iteration_ms", predicted } }
                .dump());
    else
        fmt::print("  k {} -> {} after step {}: links measured at {:.3g} MB/s; predicted ms by k{}\n", before, d->k,
            d->step, d->measuredBandwidth / 1e6, text);
}

} // namespace ps::app
