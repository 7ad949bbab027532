#include "schedule/schedule_validate.h"

#include "util/error.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

namespace ps {
namespace {

    using Key = std::tuple<ActionType, std::uint32_t, std::uint32_t>; // type, stage, micro-batch

    Key keyOf(const Action& a)
    {
        return { a.type, a.stage.value, a.microBatch.value };
    }

    bool isCompute(ActionType t)
    {
        return t == ActionType::Forward || t == ActionType::Backward || t == ActionType::BackwardInput
            || t == ActionType::BackwardWeight;
    }

    void checkCompleteness(const Schedule& s, std::vector<std::string>& problems)
    {
        const bool split = s.splitBackward();
        std::map<Key, int> seen;
        for (std::size_t d = 0; d < s.devices.size(); ++d) {
            for (const auto& a : s.devices[d]) {
                if (a.stage.value >= static_cast<std::uint32_t>(s.spec.stages))
                    problems.push_back(
                        "device " + std::to_string(d) + ": " + formatAction(a) + " names a stage that does not exist");
                else if (s.deviceOf(a.stage).index() != d)
                    problems.push_back("device " + std::to_string(d) + ": " + formatAction(a) + " belongs to device "
                        + std::to_string(s.deviceOf(a.stage).value));
                if (isCompute(a.type))
                    ++seen[keyOf(a)];
            }
        }
        std::vector<ActionType> needed { ActionType::Forward };
        if (split)
            needed.insert(needed.end(), { ActionType::BackwardInput, ActionType::BackwardWeight });
        else
            needed.push_back(ActionType::Backward);
        for (int st = 0; st < s.spec.stages; ++st) {
            for (int m = 0; m < s.spec.microBatches; ++m) {
                for (auto t : needed) {
                    const Action a { t, StageId(static_cast<std::uint32_t>(st)),
                        MicroBatchId(static_cast<std::uint32_t>(m)) };
                    const int n = seen[keyOf(a)];
                    if (n != 1)
                        problems.push_back(
                            formatAction(a) + (n == 0 ? " is missing" : " appears " + std::to_string(n) + " times"));
                }
            }
        }
    }

    // Returns the actions `a` must wait for (in any device's list).
    std::vector<Key> dependencies(const Action& a, int stages, bool lowered, bool split)
    {
        const auto s = a.stage.value;
        const auto m = a.microBatch.value;
        const auto last = static_cast<std::uint32_t>(stages - 1);
        std::vector<Key> deps;
        switch (a.type) {
        case ActionType::Forward:
            if (s > 0)
                deps.emplace_back(lowered ? ActionType::RecvForward : ActionType::Forward, lowered ? s : s - 1, m);
            break;
        case ActionType::SwapOut:
        case ActionType::Recompute:
            deps.emplace_back(ActionType::Forward, s, m);
            break;
        case ActionType::Backward:
        case ActionType::BackwardInput:
            deps.emplace_back(ActionType::Forward, s, m);
            if (s < last && lowered)
                deps.emplace_back(ActionType::RecvBackward, s, m);
            break;
        case ActionType::BackwardWeight:
            deps.emplace_back(ActionType::BackwardInput, s, m);
            break;
        case ActionType::RecvForward:
            deps.emplace_back(ActionType::SendForward, s - 1, m);
            break;
        case ActionType::RecvBackward:
            deps.emplace_back(ActionType::SendBackward, s + 1, m);
            break;
        case ActionType::SendForward:
            deps.emplace_back(ActionType::Forward, s, m);
            break;
        case ActionType::SwapIn:
            deps.emplace_back(ActionType::SwapOut, s, m);
            break;
        case ActionType::SendBackward:
            deps.emplace_back(split ? ActionType::BackwardInput : ActionType::Backward, s, m);
            break;
        default:
            break;
        }
        return deps;
    }

    // Executes the lists abstractly: a device advances while its next action's dependencies ran.
    void checkDeadlock(const Schedule& s, std::vector<std::string>& problems)
    {
        bool lowered = false;
        for (const auto& d : s.devices)
            lowered = lowered
                || std::any_of(d.begin(), d.end(), [](const Action& a) { return a.type == ActionType::RecvForward; });
        // Backward of the last-but-one stage waits for the next stage's backward when not lowered.
        const bool split = s.splitBackward();
        std::map<Key, bool> done;
        std::vector<std::size_t> next(s.devices.size(), 0);
        bool progress = true;
        while (progress) {
            progress = false;
            for (std::size_t d = 0; d < s.devices.size(); ++d) {
                while (next[d] < s.devices[d].size()) {
                    const auto& a = s.devices[d][next[d]];
                    auto deps = dependencies(a, s.spec.stages, lowered, split);
                    if (!lowered && (a.type == ActionType::Backward || a.type == ActionType::BackwardInput)
                        && a.stage.value + 1 < static_cast<std::uint32_t>(s.spec.stages)) {
                        const auto gradType = split ? ActionType::BackwardInput : ActionType::Backward;
                        deps.emplace_back(gradType, a.stage.value + 1, a.microBatch.value);
                    }
                    if (!std::all_of(deps.begin(), deps.end(), [&](const Key& k) { return done[k]; }))
                        break;
                    done[keyOf(a)] = true;
                    ++next[d];
                    progress = true;
                }
            }
        }
        for (std::size_t d = 0; d < s.devices.size(); ++d) {
            if (next[d] < s.devices[d].size())
                problems.push_back("deadlock: device " + std::to_string(d) + " waits forever at "
                    + formatAction(s.devices[d][next[d]]) + " (action " + std::to_string(next[d]) + ")");
        }
    }

} // namespace

std::vector<std::string> validateSchedule(const Schedule& schedule)
{
    std::vector<std::string> problems;
    if (schedule.devices.empty())
        return { "the schedule has no devices" };
    checkCompleteness(schedule, problems);
    if (!problems.empty())
        return problems;
    checkDeadlock(schedule, problems);
    return problems;
}

void validateScheduleOrThrow(const Schedule& schedule)
{
    const auto problems = validateSchedule(schedule);
    if (problems.empty())
        return;
    std::string message = "invalid " + scheduleName(schedule.spec) + " schedule: " + problems.front();
    if (problems.size() > 1)
        message += " (and " + std::to_string(problems.size() - 1) + " more problems)";
    throw Error(message);
}

std::string scheduleToCsv(const Schedule& schedule)
{
    std::string out;
    for (const auto& device : schedule.devices) {
        for (std::size_t i = 0; i < device.size(); ++i)
            out += (i ? "," : "") + formatAction(device[i]);
        out += '\n';
    }
    return out;
}

Schedule scheduleFromCsv(std::string_view csv, const std::string& source)
{
    Schedule schedule;
    schedule.spec.kind = ScheduleKind::Custom;
    std::istringstream in { std::string(csv) };
    std::string line;
    std::int64_t maxStage = -1;
    std::int64_t maxMb = -1;
    std::int64_t actions = 0;
    for (int row = 1; std::getline(in, line); ++row) {
        if (!line.empty() && line.back() == '\r')
            line.pop_back();
        auto& device = schedule.devices.emplace_back();
        std::istringstream cells(line);
        std::string cell;
        for (int col = 1; std::getline(cells, cell, ','); ++col) {
            cell.erase(std::remove(cell.begin(), cell.end(), ' '), cell.end());
            if (cell.empty() || cell == "None")
                continue;
            const auto a = parseAction(cell);
            if (!a)
                throw Error(source + ": row " + std::to_string(row) + ", cell " + std::to_string(col) + ": '" + cell
                    + "' is not an action (expected e.g. 0F1, 1B0, 2SEND_F3)");
            device.push_back(*a);
            ++actions;
            maxStage = std::max<std::int64_t>(maxStage, a->stage.value);
            if (a->microBatch.valid())
                maxMb = std::max<std::int64_t>(maxMb, a->microBatch.value);
        }
    }
    if (schedule.devices.empty() || maxStage < 0)
        throw Error(source + ": no actions in the schedule CSV");
    // Every stage runs each micro-batch's forward at least, so a CSV naming stage S and micro-batch
    // M with fewer than (S + 1) x (M + 1) actions cannot be complete; rejected here because the
    // validator would walk all those pairs ("0F4000000000" alone: 4e9 of them).
    if (maxStage >= actions || maxMb >= actions || (maxStage + 1) * std::max<std::int64_t>(maxMb + 1, 1) > actions)
        throw Error(source + ": stage " + std::to_string(maxStage) + " and micro-batch " + std::to_string(maxMb)
            + " need more actions than the CSV's " + std::to_string(actions)
            + " (one forward per stage and micro-batch)");
    schedule.spec.stages = static_cast<int>(maxStage + 1);
    schedule.spec.microBatches = static_cast<int>(maxMb + 1);
    if (schedule.spec.stages > static_cast<int>(schedule.devices.size())) {
        schedule.spec.kind = ScheduleKind::Custom;
        schedule.spec.virtualStages = schedule.spec.stages / static_cast<int>(schedule.devices.size());
    }
    return schedule;
}

} // namespace ps
