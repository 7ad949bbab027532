#include "schedule/schedule.h"

#include "util/error.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <utility>

namespace ps {
namespace {

    Action act(ActionType type, int stage, int mb)
    {
        return { type, StageId(static_cast<std::uint32_t>(stage)), MicroBatchId(static_cast<std::uint32_t>(mb)) };
    }

    Action optimizerStep(int stage)
    {
        return { ActionType::OptimizerStep, StageId(static_cast<std::uint32_t>(stage)), MicroBatchId() };
    }

    // Micro-batches grouped for kFkB: groups of k, the last one smaller when k does not divide M.
    std::vector<std::vector<int>> groupsOf(int microBatches, int k)
    {
        std::vector<std::vector<int>> groups;
        for (int first = 0; first < microBatches; first += k) {
            groups.emplace_back();
            for (int m = first; m < std::min(first + k, microBatches); ++m)
                groups.back().push_back(m);
        }
        return groups;
    }

    // 1F1B over groups (DAPPLE / PipeDream-flush): warm-up of S-s-1 forward groups, then one
    // forward and one backward group alternately, then the remaining backward groups. With groups
    // of one micro-batch this is 1F1B; with groups of k it is kFkB (Ada-Grouper §3.2, "k copies of
    // 1F1B interleaved"); with one group of M it is GPipe.
    std::vector<Action> groupedOneFOneB(int stages, int stage, const std::vector<std::vector<int>>& groups)
    {
        const int count = static_cast<int>(groups.size());
        const int warmup = std::min(stages - stage - 1, count);
        std::vector<Action> seq;
        const auto emit = [&](ActionType type, int g) {
            for (int m : groups[static_cast<std::size_t>(g)])
                seq.push_back(act(type, stage, m));
        };
        int f = 0;
        int b = 0;
        for (; f < warmup; ++f)
            emit(ActionType::Forward, f);
        for (; f < count; ++f, ++b) {
            emit(ActionType::Forward, f);
            emit(ActionType::Backward, b);
        }
        for (; b < count; ++b)
            emit(ActionType::Backward, b);
        return seq;
    }

    // ZB-H1 (Qi et al. 2023, §3.1): the warm-up of 1F1B (so the same activation memory) with B
    // split into the input gradient B, which is all the previous stage waits for, and the weight
    // gradient W, which can wait. Stage s holds up to s W passes back: the input-gradient chain
    // reaches stage 0 without waiting behind W, and the held-back W's fill the cool-down. With
    // F = B = W the bubble is (S-1)(F + B - W), a third of 1F1B's (the simulator tests check it).
    std::vector<Action> zeroBubbleH1(int stages, int stage, int microBatches)
    {
        const int warmup = std::min(stages - stage - 1, microBatches);
        const int delay = stage;
        std::vector<Action> seq;
        int f = 0;
        int b = 0;
        int w = 0;
        const auto backward = [&] {
            seq.push_back(act(ActionType::BackwardInput, stage, b++));
            if (b - w > delay)
                seq.push_back(act(ActionType::BackwardWeight, stage, w++));
        };
        for (; f < warmup; ++f)
            seq.push_back(act(ActionType::Forward, stage, f));
        for (; f < microBatches; ++f) {
            seq.push_back(act(ActionType::Forward, stage, f));
            backward();
        }
        while (b < microBatches)
            backward();
        while (w < microBatches)
            seq.push_back(act(ActionType::BackwardWeight, stage, w++));
        return seq;
    }

    // FTPipe's asynchronous schedule (§4.2): depth d = S - 1 - s along the chain; d + 1 forwards
    // fill the pipeline, then backward and forward alternate; the stage updates its weights after
    // every A-th backward and after the last one (gradients accumulated in between).
    std::vector<Action> ftpipeAsync(int stages, int stage, int microBatches, int stepEvery)
    {
        const int fill = std::min(stages - stage, microBatches);
        std::vector<Action> seq;
        int f = 0;
        for (; f < fill; ++f)
            seq.push_back(act(ActionType::Forward, stage, f));
        for (int b = 0; b < microBatches; ++b) {
            seq.push_back(act(ActionType::Backward, stage, b));
            if ((b + 1) % stepEvery == 0 || b + 1 == microBatches)
                seq.push_back({ ActionType::OptimizerStep, StageId(static_cast<std::uint32_t>(stage)),
                    MicroBatchId(static_cast<std::uint32_t>(b)) });
            if (f < microBatches)
                seq.push_back(act(ActionType::Forward, stage, f++));
        }
        return seq;
    }

    // Megatron-LM's interleaved 1F1B: D devices, v chunks each (stage = chunk * D + device).
    std::vector<Action> interleaved(int devices, int v, int device, int microBatches)
    {
        const int total = microBatches * v;
        const int warmup = std::min((devices - device - 1) * 2 + (v - 1) * devices, total);
        const auto chunkOf = [&](int k, bool forward) {
            const int c = (k % (devices * v)) / devices;
            return forward ? c : v - 1 - c;
        };
        const auto mbOf = [&](int k) { return (k / (devices * v)) * devices + k % devices; };
        const auto step = [&](ActionType type, int k, bool forward) {
            return act(type, chunkOf(k, forward) * devices + device, mbOf(k));
        };
        std::vector<Action> seq;
        int f = 0;
        int b = 0;
        for (; f < warmup; ++f)
            seq.push_back(step(ActionType::Forward, f, true));
        for (; f < total; ++f, ++b) {
            seq.push_back(step(ActionType::Forward, f, true));
            seq.push_back(step(ActionType::Backward, b, false));
        }
        for (; b < total; ++b)
            seq.push_back(step(ActionType::Backward, b, false));
        return seq;
    }

    void checkSpec(const ScheduleSpec& s)
    {
        if (s.stages < 1)
            throw Error("schedule: needs at least one stage, got " + std::to_string(s.stages));
        if (s.microBatches < 1)
            throw Error("schedule: needs at least one micro-batch, got " + std::to_string(s.microBatches));
        if (s.kind == ScheduleKind::FTPipeAsync && (s.groupSize < 1 || s.groupSize > s.microBatches))
            throw Error("schedule ftpipe-async:" + std::to_string(s.groupSize)
                + ": the micro-batches per optimizer step must be between 1 and the number of micro-batches ("
                + std::to_string(s.microBatches) + ")");
        if (s.kind == ScheduleKind::KFKB && (s.groupSize < 1 || s.groupSize > s.microBatches))
            throw Error("schedule kfkb:" + std::to_string(s.groupSize)
                + ": k must be between 1 and the number of "
                  "micro-batches ("
                + std::to_string(s.microBatches) + ")");
        if (s.kind == ScheduleKind::Interleaved) {
            if (s.virtualStages < 1 || s.stages % s.virtualStages != 0)
                throw Error("schedule interleaved:" + std::to_string(s.virtualStages) + ": the "
                    + std::to_string(s.stages) + " stages must divide evenly into chunks of "
                    + std::to_string(s.virtualStages) + " per device");
            if (s.microBatches % s.devices() != 0)
                throw Error("schedule interleaved: micro-batches (" + std::to_string(s.microBatches)
                    + ") must be a multiple of the devices (" + std::to_string(s.devices()) + ")");
        }
    }

    constexpr std::array<std::pair<ActionType, std::string_view>, 12> kCodes = { {
        { ActionType::SendForward, "SEND_F" },
        { ActionType::RecvForward, "RECV_F" },
        { ActionType::SendBackward, "SEND_B" },
        { ActionType::RecvBackward, "RECV_B" },
        { ActionType::SwapOut, "SWAP_OUT" },
        { ActionType::SwapIn, "SWAP_IN" },
        { ActionType::Recompute, "RECOMPUTE" },
        { ActionType::OptimizerStep, "OPT_STEP" },
        { ActionType::Forward, "F" },
        { ActionType::Backward, "B" },
        { ActionType::BackwardInput, "I" },
        { ActionType::BackwardWeight, "W" },
    } };

} // namespace

bool Schedule::splitBackward() const
{
    for (const auto& d : devices) {
        for (const auto& a : d) {
            if (a.type == ActionType::BackwardInput || a.type == ActionType::BackwardWeight)
                return true;
        }
    }
    return false;
}

std::size_t Schedule::actionCount() const
{
    std::size_t n = 0;
    for (const auto& d : devices)
        n += d.size();
    return n;
}

ScheduleSpec parseScheduleSpec(std::string_view text, int stages, int microBatches)
{
    ScheduleSpec spec { ScheduleKind::OneFOneB, stages, microBatches, 1, 1 };
    const auto colon = text.find(':');
    const auto name = text.substr(0, colon);
    int arg = 0;
    if (colon != std::string_view::npos) {
        const auto digits = text.substr(colon + 1);
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), arg);
        if (ec != std::errc() || ptr != digits.data() + digits.size() || arg < 1)
            throw Error("schedule '" + std::string(text) + "': expected a positive number after ':'");
    }
    if (name == "gpipe")
        spec.kind = ScheduleKind::GPipe;
    else if (name == "1f1b")
        spec.kind = ScheduleKind::OneFOneB;
    else if (name == "kfkb")
        spec = { ScheduleKind::KFKB, stages, microBatches, arg > 0 ? arg : 2, 1 };
    else if (name == "interleaved")
        spec = { ScheduleKind::Interleaved, stages, microBatches, 1, arg > 0 ? arg : 2 };
    else if (name == "pipedream")
        spec.kind = ScheduleKind::PipeDream;
    else if (name == "zb-h1" || name == "zbh1")
        spec.kind = ScheduleKind::ZeroBubbleH1;
    else if (name == "ftpipe-async")
        spec = { ScheduleKind::FTPipeAsync, stages, microBatches, arg > 0 ? arg : microBatches, 1 };
    else
        throw Error("unknown schedule '" + std::string(text)
            + "' (gpipe, 1f1b, kfkb:K, interleaved:V, zb-h1, pipedream, ftpipe-async[:A])");
    checkSpec(spec);
    return spec;
}

std::string scheduleName(const ScheduleSpec& s)
{
    switch (s.kind) {
    case ScheduleKind::GPipe:
        return "gpipe";
    case ScheduleKind::OneFOneB:
        return "1f1b";
    case ScheduleKind::KFKB:
        return "kfkb:" + std::to_string(s.groupSize);
    case ScheduleKind::Interleaved:
        return "interleaved:" + std::to_string(s.virtualStages);
    case ScheduleKind::PipeDream:
        return "pipedream";
    case ScheduleKind::ZeroBubbleH1:
        return "zb-h1";
    case ScheduleKind::FTPipeAsync:
        return "ftpipe-async:" + std::to_string(s.groupSize);
    case ScheduleKind::Custom:
        return "custom";
    }
    return "custom";
}

Schedule generateSchedule(const ScheduleSpec& spec)
{
    checkSpec(spec);
    Schedule schedule { spec, std::vector<std::vector<Action>>(static_cast<std::size_t>(spec.devices())), {} };
    const int S = spec.stages;
    const int M = spec.microBatches;
    for (int d = 0; d < spec.devices(); ++d) {
        auto& seq = schedule.devices[static_cast<std::size_t>(d)];
        switch (spec.kind) {
        case ScheduleKind::GPipe:
            seq = groupedOneFOneB(S, d, groupsOf(M, M));
            break;
        case ScheduleKind::OneFOneB:
            seq = groupedOneFOneB(S, d, groupsOf(M, 1));
            break;
        case ScheduleKind::KFKB:
            seq = groupedOneFOneB(S, d, groupsOf(M, spec.groupSize));
            break;
        case ScheduleKind::PipeDream:
            // Same order as 1F1B; each backward is followed by its stage's weight update
            // (no flush; weight stashing keeps the version each in-flight micro-batch used).
            for (const auto& a : groupedOneFOneB(S, d, groupsOf(M, 1))) {
                seq.push_back(a);
                if (a.type == ActionType::Backward)
                    seq.push_back({ ActionType::OptimizerStep, a.stage, a.microBatch });
            }
            break;
        case ScheduleKind::ZeroBubbleH1:
            seq = zeroBubbleH1(S, d, M);
            break;
        case ScheduleKind::FTPipeAsync:
            seq = ftpipeAsync(S, d, M, spec.groupSize);
            break;
        case ScheduleKind::Interleaved:
            seq = interleaved(spec.devices(), spec.virtualStages, d, M);
            break;
        case ScheduleKind::Custom:
            throw Error("schedule: custom schedules are imported, not generated");
        }
        if (spec.kind != ScheduleKind::PipeDream && spec.kind != ScheduleKind::FTPipeAsync) {
            for (int s = d; s < S; s += spec.devices())
                seq.push_back(optimizerStep(s));
        }
    }
    return schedule;
}

namespace {

    // Checks a stage-to-device map and returns the number of devices it uses (all of 0..D-1).
    std::uint32_t mappedDevices(const Schedule& perStage, const std::vector<DeviceId>& stageDevices)
    {
        const int S = perStage.spec.stages;
        if (static_cast<int>(perStage.devices.size()) != S || static_cast<int>(stageDevices.size()) != S)
            throw Error("schedule: a stage-to-device map needs one device per stage (" + std::to_string(S) + ")");
        std::uint32_t deviceCount = 0;
        for (auto d : stageDevices)
            deviceCount = std::max(deviceCount, d.value + 1);
        std::vector<char> used(deviceCount, 0);
        for (auto d : stageDevices)
            used[d.index()] = 1;
        for (std::uint32_t d = 0; d < deviceCount; ++d) {
            if (used[d] == 0)
                throw Error("schedule: device " + std::to_string(d) + " has no stage in the stage-to-device map");
        }
        return deviceCount;
    }

    bool isBackwardPass(ActionType t)
    {
        return t == ActionType::Backward || t == ActionType::BackwardInput;
    }

    // Whether `a` may run once the actions marked in `done` have: the previous stage's forward of the
    // micro-batch before a forward, the next stage's backward before an input-gradient backward.
    bool dependenciesDone(const Action& a, int stages, const std::vector<std::vector<char>>& forwardDone,
        const std::vector<std::vector<char>>& backwardDone)
    {
        const auto s = static_cast<int>(a.stage.value);
        if (a.type == ActionType::Forward)
            return s == 0 || forwardDone[static_cast<std::size_t>(s - 1)][a.microBatch.index()] != 0;
        if (a.type == ActionType::Backward || a.type == ActionType::BackwardInput)
            return s == stages - 1 || backwardDone[static_cast<std::size_t>(s + 1)][a.microBatch.index()] != 0;
        return true;
    }

} // namespace

Schedule placeStages(const Schedule& perStage, const std::vector<DeviceId>& stageDevices)
{
    const int S = perStage.spec.stages;
    const auto deviceCount = mappedDevices(perStage, stageDevices);
    const auto M = static_cast<std::size_t>(perStage.spec.microBatches);
    std::vector<std::vector<char>> fwd(static_cast<std::size_t>(S), std::vector<char>(M, 0));
    std::vector<std::vector<char>> bwd = fwd;
    std::vector<std::size_t> next(static_cast<std::size_t>(S), 0);
    Schedule out { perStage.spec, std::vector<std::vector<Action>>(deviceCount), stageDevices };
    std::size_t remaining = perStage.actionCount();
    while (remaining > 0) {
        bool progressed = false;
        for (std::uint32_t d = 0; d < deviceCount; ++d) {
            int pick = -1; // one action per device per round, as if each took one time unit
            for (int s = 0; s < S; ++s) {
                const auto& list = perStage.devices[static_cast<std::size_t>(s)];
                const auto i = next[static_cast<std::size_t>(s)];
                if (stageDevices[static_cast<std::size_t>(s)].value != d || i >= list.size()
                    || !dependenciesDone(list[i], S, fwd, bwd))
                    continue;
                const bool backward = list[i].type != ActionType::Forward;
                if (pick < 0
                    || (backward
                        && perStage.devices[static_cast<std::size_t>(pick)][next[static_cast<std::size_t>(pick)]].type
                            == ActionType::Forward))
                    pick = s;
            }
            if (pick < 0)
                continue;
            const auto& a = perStage.devices[static_cast<std::size_t>(pick)][next[static_cast<std::size_t>(pick)]++];
            out.devices[d].push_back(a);
            if (a.type == ActionType::Forward)
                fwd[a.stage.index()][a.microBatch.index()] = 1;
            if (a.type == ActionType::Backward || a.type == ActionType::BackwardInput)
                bwd[a.stage.index()][a.microBatch.index()] = 1;
            --remaining;
            progressed = true;
        }
        if (!progressed)
            throw Error("schedule: the stage-to-device map deadlocks this schedule");
    }
    return out;
}

Schedule placeStages(const Schedule& perStage, const std::vector<DeviceId>& stageDevices, const StageFlow& flow)
{
    const auto deviceCount = mappedDevices(perStage, stageDevices);
    const auto S = static_cast<std::size_t>(perStage.spec.stages);
    if (flow.producers.size() != S || flow.consumers.size() != S || flow.forwardNs.size() != S
        || flow.backwardNs.size() != S)
        throw Error("schedule: the stage flow needs dependencies and times for all " + std::to_string(S) + " stages");
    const auto M = static_cast<std::size_t>(perStage.spec.microBatches);
    constexpr double kNotYet = -1;
    std::vector<std::vector<double>> fwdEnd(S, std::vector<double>(M, kNotYet));
    auto bwdEnd = fwdEnd;
    std::vector<double> deviceFree(deviceCount, 0);
    std::vector<std::size_t> next(S, 0);
    Schedule out { perStage.spec, std::vector<std::vector<Action>>(deviceCount), stageDevices };
    // A synchronous optimizer step closes its device's iteration: it waits until every stage on
    // the device has run all its passes (the simulator sums tied gradients at that point).
    const auto deviceDone = [&](std::size_t s) {
        for (std::size_t t = 0; t < S; ++t) {
            const auto& list = perStage.devices[t];
            if (stageDevices[t] == stageDevices[s] && next[t] < list.size()
                && list[next[t]].type != ActionType::OptimizerStep)
                return false;
        }
        return true;
    };
    // When `a` (stage s) could start, kNotYet while a stage it waits for has not run it.
    const auto readyAt = [&](std::size_t s, const Action& a) {
        double ready = deviceFree[stageDevices[s].index()];
        if (a.type == ActionType::OptimizerStep && !a.microBatch.valid() && !deviceDone(s))
            return kNotYet;
        const bool forward = a.type == ActionType::Forward;
        if (!forward && !isBackwardPass(a.type))
            return ready;
        for (auto other : forward ? flow.producers[s] : flow.consumers[s]) {
            const double end = (forward ? fwdEnd : bwdEnd)[other.index()][a.microBatch.index()];
            if (end == kNotYet)
                return kNotYet;
            ready = std::max(ready, end);
        }
        return ready;
    };
    for (std::size_t remaining = perStage.actionCount(); remaining > 0; --remaining) {
        std::size_t pick = S;
        double pickReady = 0;
        for (std::size_t s = 0; s < S; ++s) {
            const auto& list = perStage.devices[s];
            if (next[s] >= list.size())
                continue;
            const double ready = readyAt(s, list[next[s]]);
            const bool earlier = pick == S || ready < pickReady
                || (ready == pickReady && isBackwardPass(list[next[s]].type)
                    && !isBackwardPass(perStage.devices[pick][next[pick]].type));
            if (ready != kNotYet && earlier) {
                pick = s;
                pickReady = ready;
            }
        }
        if (pick == S)
            throw Error("schedule: the stage-to-device map deadlocks this schedule");
        const auto& a = perStage.devices[pick][next[pick]++];
        const auto type = a.type;
        const double duration = type == ActionType::Forward              ? flow.forwardNs[pick]
            : isBackwardPass(type) || type == ActionType::BackwardWeight ? flow.backwardNs[pick]
                                                                         : 0.0;
        const auto d = stageDevices[pick].index();
        deviceFree[d] = pickReady + duration;
        if (type == ActionType::Forward)
            fwdEnd[pick][a.microBatch.index()] = deviceFree[d];
        if (isBackwardPass(type))
            bwdEnd[pick][a.microBatch.index()] = deviceFree[d];
        out.devices[d].push_back(a);
    }
    return out;
}

bool hasCommunication(const Schedule& schedule)
{
    for (const auto& d : schedule.devices) {
        for (const auto& a : d) {
            if (a.type == ActionType::SendForward || a.type == ActionType::RecvForward
                || a.type == ActionType::SendBackward || a.type == ActionType::RecvBackward)
                return true;
        }
    }
    return false;
}

Schedule withCommunication(const Schedule& schedule)
{
    const int S = schedule.spec.stages;
    Schedule out { schedule.spec, std::vector<std::vector<Action>>(schedule.devices.size()), schedule.stageDevices };
    for (std::size_t d = 0; d < schedule.devices.size(); ++d) {
        auto& seq = out.devices[d];
        for (const auto& a : schedule.devices[d]) {
            const auto s = static_cast<int>(a.stage.value);
            const bool isForward = a.type == ActionType::Forward;
            const bool isGrad = a.type == ActionType::Backward || a.type == ActionType::BackwardInput;
            if (isForward && s > 0)
                seq.push_back({ ActionType::RecvForward, a.stage, a.microBatch });
            if (isGrad && s < S - 1)
                seq.push_back({ ActionType::RecvBackward, a.stage, a.microBatch });
            seq.push_back(a);
            if (isForward && s < S - 1)
                seq.push_back({ ActionType::SendForward, a.stage, a.microBatch });
            if (isGrad && s > 0)
                seq.push_back({ ActionType::SendBackward, a.stage, a.microBatch });
        }
    }
    return out;
}

std::string_view actionCode(ActionType type)
{
    for (const auto& [t, code] : kCodes) {
        if (t == type)
            return code;
    }
    return "?";
}

std::string formatAction(const Action& a)
{
    std::string out = std::to_string(a.stage.value) + std::string(actionCode(a.type));
    if (a.microBatch.valid())
        out += std::to_string(a.microBatch.value);
    return out;
}

std::optional<Action> parseAction(std::string_view text)
{
    std::size_t i = 0;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9')
        ++i;
    if (i == 0)
        return std::nullopt;
    std::uint32_t stage = 0;
    std::from_chars(text.data(), text.data() + i, stage);
    const auto rest = text.substr(i);
    for (const auto& [type, code] : kCodes) { // longest codes first, so SEND_F wins over a bare F
        if (rest.substr(0, code.size()) != code)
            continue;
        const auto digits = rest.substr(code.size());
        Action a { type, StageId(stage), MicroBatchId() };
        if (digits.empty())
            return type == ActionType::OptimizerStep ? std::optional(a) : std::nullopt;
        std::uint32_t mb = 0;
        const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), mb);
        if (ec != std::errc() || ptr != digits.data() + digits.size())
            return std::nullopt;
        a.microBatch = MicroBatchId(mb);
        return a;
    }
    return std::nullopt;
}

} // namespace ps
