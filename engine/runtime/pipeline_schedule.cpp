// The schedule runner's PatrickStar chunk placement (§8.1-8.2: which chunks go home to each device
// after the warm-up iteration) and its schedule switches between iterations (Ada-Grouper's k).
// Part of PipelineRunner (runtime/pipeline_runner.h).
#include "runtime/pipeline_runner.h"
#include "util/error.h"

#include <algorithm>

namespace ps::engine {

Schedule PipelineRunner::withChannels(const Schedule& s)
{
    for (const auto& d : s.devices) {
        for (const auto& a : d) {
            if (a.type == ActionType::SendForward || a.type == ActionType::RecvForward
                || a.type == ActionType::SendBackward || a.type == ActionType::RecvBackward)
                return s; // already lowered
        }
    }
    return withCommunication(s);
}

void PipelineRunner::setChunkActions()
{
    for (auto& stage : m_stages) {
        std::vector<ActionType> actions;
        for (const auto& a : m_schedule.devices[m_schedule.deviceOf(stage->id()).index()]) {
            if (a.stage == stage->id())
                actions.push_back(a.type);
        }
        stage->setChunkActions(actions);
    }
}

std::vector<ChunkStats> PipelineRunner::chunkCounts()
{
    std::vector<ChunkStats> counts(m_schedule.devices.size());
    for (auto& stage : m_stages)
        counts[m_schedule.deviceOf(stage->id()).index()] += stage->chunks()->takeIterationCounts();
    return counts;
}

void PipelineRunner::placeChunks()
{
    for (std::size_t d = 0; d < m_schedule.devices.size(); ++d) {
        std::vector<ChunkManager*> managers;
        for (auto& stage : m_stages) {
            if (m_schedule.deviceOf(stage->id()).index() == d)
                managers.push_back(stage->chunks());
        }
        const auto& memory = *m_devices[d].memory;
        const auto capacity = memory.capacity();
        // The margin (§8.2): capacity less the warm-up's peak non-model bytes (§8.1), the chunks one
        // op computes on, and a sixteenth for messages whose timing varies between iterations.
        auto margin = capacity - memory.peakNonModel() - capacity / 16;
        for (auto* m : managers)
            margin -= m->pinnedBytesPerMoment();
        for (auto* m : managers) {
            for (int c = 0; c < m->chunkCount(); ++c) {
                if (m->onHost(c) && (capacity == 0 || m->moveHomeBytes(c) <= margin))
                    margin -= m->moveHome(c);
            }
        }
        const auto share =
            std::max<std::int64_t>(margin, 0) / static_cast<std::int64_t>(std::max<std::size_t>(managers.size(), 1));
        for (auto* m : managers)
            m->setCacheBytes(m->pinnedBytesPerMoment() + share);
    }
}

void PipelineRunner::setSchedule(const Schedule& schedule)
{
    auto next = withChannels(schedule);
    const auto& now = m_schedule;
    const auto what = [&]() -> std::string {
        if (next.spec.stages != now.spec.stages)
            return std::to_string(next.spec.stages) + " stages instead of " + std::to_string(now.spec.stages);
        if (next.devices.size() != now.devices.size())
            return std::to_string(next.devices.size()) + " devices instead of " + std::to_string(now.devices.size());
        if (next.spec.microBatches != now.spec.microBatches)
            return std::to_string(next.spec.microBatches) + " micro-batches instead of "
                + std::to_string(now.spec.microBatches);
        if (next.asyncWeights() != now.asyncWeights())
            return "another weight update (asynchronous against synchronous)";
        if ((next.spec.kind == ScheduleKind::PipeDream) != (now.spec.kind == ScheduleKind::PipeDream))
            return "another weight update (PipeDream's stashed versions against FTPipe's one)";
        for (std::uint32_t s = 0; s < static_cast<std::uint32_t>(now.spec.stages); ++s) {
            if (next.deviceOf(StageId(s)) != now.deviceOf(StageId(s)))
                return "stage " + std::to_string(s) + " on another device";
        }
        return {};
    }();
    if (!what.empty())
        throw Error("cannot switch to " + scheduleName(next.spec) + " between iterations: it has " + what);
    m_schedule = std::move(next);
    setChunkActions();
}

} // namespace ps::engine
