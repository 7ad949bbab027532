#include "cli/train_link.h"

#include "cli/device_options.h"
#include "cli/validators.h"
#include "util/error.h"

#include <fmt/core.h>

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

} // namespace ps::app
