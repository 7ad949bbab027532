// Exports of simulation results: Chrome trace JSON and a metrics summary.
#include "sim/simulator.h"

#include <nlohmann/json.hpp>

namespace ps {
namespace {

    std::string eventName(const SimEvent& e)
    {
        std::string name(actionCode(e.action));
        if (e.microBatch.valid())
            name += std::to_string(e.microBatch.value);
        return name;
    }

    int threadOf(Stream s)
    {
        return static_cast<int>(s);
    }

} // namespace

std::string toChromeTrace(const SimulationResult& r)
{
    nlohmann::json events = nlohmann::json::array();
    for (std::size_t d = 0; d < r.devices.size(); ++d) {
        events.push_back({ { "name", "process_name" }, { "ph", "M" }, { "pid", d },
            { "args", { { "name", "device " + std::to_string(d) } } } });
        for (auto s : { Stream::Compute, Stream::CopyToHost, Stream::CopyFromHost, Stream::Send })
            events.push_back({ { "name", "thread_name" }, { "ph", "M" }, { "pid", d }, { "tid", threadOf(s) },
                { "args", { { "name", std::string(toString(s)) } } } });
    }
    for (const auto& e : r.events) {
        if (e.endNs <= e.startNs && e.stream != Stream::Compute)
            continue; // zero-time local sends
        nlohmann::json args = { { "stage", e.stage.value } };
        if (e.microBatch.valid())
            args["micro_batch"] = e.microBatch.value;
        if (e.bytes > 0)
            args["bytes"] = e.bytes;
        events.push_back({ { "name", eventName(e) }, { "cat", std::string(toString(e.stream)) }, { "ph", "X" },
            { "pid", e.device.value }, { "tid", threadOf(e.stream) }, { "ts", e.startNs / 1000.0 },
            { "dur", (e.endNs - e.startNs) / 1000.0 }, { "args", args } });
    }
    for (std::size_t d = 0; d < r.devices.size(); ++d) {
        for (const auto& p : r.devices[d].memoryCurve)
            events.push_back({ { "name", "memory" }, { "ph", "C" }, { "pid", d }, { "ts", p.timeNs / 1000.0 },
                { "args", { { "MiB", p.bytes / (1024.0 * 1024.0) } } } });
    }
    return nlohmann::json({ { "traceEvents", events }, { "displayTimeUnit", "ms" } }).dump();
}

std::string simulationSummaryJson(const SimulationResult& r)
{
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const auto& d : r.devices) {
        devices.push_back(
            { { "busy_ms", d.busyNs / 1e6 }, { "peak_bytes", d.peakBytes }, { "capacity_bytes", d.capacityBytes },
                { "out_of_memory", d.outOfMemory }, { "peak_in_flight", d.memory.peakInFlight },
                { "memory",
                    { { "parameters", d.memory.parameters }, { "gradients", d.memory.gradients },
                        { "optimizer_states", d.memory.optimizerStates },
                        { "stashed_weights", d.memory.stashedWeights }, { "activations", d.memory.activations },
                        { "workspace", d.memory.workspace }, { "messages", d.memory.messages } } } });
    }
    const nlohmann::ordered_json j = { { "schedule", r.scheduleName }, { "stages", r.stages },
        { "micro_batches", r.microBatches }, { "micro_batch_size", r.microBatchSize },
        { "iteration_ms", r.iterationNs / 1e6 }, { "steady_iteration_ms", r.steadyIterationNs / 1e6 },
        { "bubble_fraction", r.bubbleFraction }, { "samples_per_second", r.samplesPerSecond },
        { "out_of_memory", r.anyOutOfMemory }, { "events", r.events.size() }, { "devices", devices } };
    return j.dump(2);
}

std::string_view toString(Stream stream)
{
    switch (stream) {
    case Stream::Compute:
        return "compute";
    case Stream::CopyToHost:
        return "copy-d2h";
    case Stream::CopyFromHost:
        return "copy-h2d";
    case Stream::Send:
        return "send";
    }
    return "compute";
}

} // namespace ps
