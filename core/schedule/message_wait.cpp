#include "schedule/message_wait.h"

#include "util/error.h"

#include <algorithm>
#include <cstdint>
#include <tuple>

namespace ps {
namespace {

    bool takesBackward(ActionType t)
    {
        return t == ActionType::Backward || t == ActionType::BackwardInput;
    }

    // One message of the schedule: where it goes, after how many of the receiver's actions it
    // can be there, and the receiver's action that takes it in.
    struct Message
    {
        std::size_t device = 0;
        bool forward = true;
        std::uint32_t from = 0; // the receiver's actions that happen before its send
        std::size_t until = 0; // the receiver's action that takes it in
    };

    class Execution
    {
    public:
        explicit Execution(const Schedule& s)
            : m_s(s)
            , m_stages(static_cast<std::size_t>(std::max(1, s.spec.stages)))
            , m_micro(static_cast<std::size_t>(std::max(1, s.spec.microBatches)))
            , m_clock(s.devices.size(), std::vector<std::uint32_t>(s.devices.size(), 0))
            , m_sent(2 * m_stages * m_micro)
            , m_takenAt(2 * m_stages * m_micro, kNone)
        {
        }

        // Runs the lists in any order their receives allow, recording each message.
        std::vector<Message> run()
        {
            for (std::size_t d = 0; d < m_s.devices.size(); ++d) {
                for (std::size_t i = 0; i < m_s.devices[d].size(); ++i) {
                    const auto& a = m_s.devices[d][i];
                    if (a.type == ActionType::Forward && a.stage.value > 0)
                        m_takenAt[slot(true, a.stage.index(), a.microBatch.index())] = i;
                    else if (takesBackward(a.type) && a.stage.index() + 1 < m_stages)
                        m_takenAt[slot(false, a.stage.index(), a.microBatch.index())] = i;
                }
            }
            std::vector<std::size_t> next(m_s.devices.size(), 0);
            for (bool progress = true; progress;) {
                progress = false;
                for (std::size_t d = 0; d < m_s.devices.size(); ++d) {
                    while (next[d] < m_s.devices[d].size() && step(d, m_s.devices[d][next[d]])) {
                        m_clock[d][d] = static_cast<std::uint32_t>(++next[d]);
                        progress = true;
                    }
                }
            }
            for (std::size_t d = 0; d < next.size(); ++d) {
                if (next[d] < m_s.devices[d].size())
                    throw Error("message bound: device " + std::to_string(d) + " of the " + scheduleName(m_s.spec)
                        + " schedule waits forever at " + formatAction(m_s.devices[d][next[d]]));
            }
            return std::move(m_messages);
        }

    private:
        static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

        [[nodiscard]] std::size_t slot(bool forward, std::size_t stage, std::size_t mb) const
        {
            return (forward ? 0 : m_stages * m_micro) + std::min(stage, m_stages - 1) * m_micro
                + std::min(mb, m_micro - 1);
        }

        // false: a receive whose message was not sent yet.
        bool step(std::size_t d, const Action& a)
        {
            const bool forward = a.type == ActionType::SendForward || a.type == ActionType::RecvForward;
            switch (a.type) {
            case ActionType::SendForward:
            case ActionType::SendBackward: {
                const auto stage = forward ? a.stage.index() + 1 : a.stage.index() - 1;
                if (a.stage.index() + (forward ? 1 : 0) == 0 || stage >= m_stages)
                    return true; // nothing to send past the chain's ends
                const auto to = m_s.deviceOf(StageId(static_cast<std::uint32_t>(stage))).index();
                const auto s = slot(forward, stage, a.microBatch.index());
                m_sent[s] = m_clock[d];
                if (m_takenAt[s] != kNone)
                    m_messages.push_back({ to, forward, m_clock[d][to], m_takenAt[s] });
                return true;
            }
            case ActionType::RecvForward:
            case ActionType::RecvBackward: {
                auto& sent = m_sent[slot(forward, a.stage.index(), a.microBatch.index())];
                if (sent.empty())
                    return false;
                for (std::size_t e = 0; e < sent.size(); ++e)
                    m_clock[d][e] = std::max(m_clock[d][e], sent[e]);
                sent = { 0 }; // taken: not empty, no longer needed
                return true;
            }
            default:
                return true;
            }
        }

        const Schedule& m_s;
        std::size_t m_stages, m_micro;
        std::vector<std::vector<std::uint32_t>> m_clock; // [d][e]: e's actions before d's next
        std::vector<std::vector<std::uint32_t>> m_sent; // by slot: the sender's clock, until received
        std::vector<std::size_t> m_takenAt; // by slot: the receiver's action that takes it in
        std::vector<Message> m_messages;
    };

    // Drops duplicates (first, so that what remains is a handful of points, not one per action)
    // and points another point of the list dominates.
    void keepUndominated(std::vector<WaitPoint>& points)
    {
        const auto key = [](const WaitPoint& p) {
            return std::tuple(p.inFlight, p.forwardMessages, p.backwardMessages, p.weightPending);
        };
        std::sort(
            points.begin(), points.end(), [&](const WaitPoint& a, const WaitPoint& b) { return key(a) < key(b); });
        points.erase(std::unique(points.begin(), points.end()), points.end());
        const auto dominates = [](const WaitPoint& a, const WaitPoint& b) {
            return a != b && a.inFlight >= b.inFlight && a.forwardMessages >= b.forwardMessages
                && a.backwardMessages >= b.backwardMessages && a.weightPending >= b.weightPending;
        };
        std::vector<WaitPoint> kept;
        for (const auto& p : points) {
            if (std::none_of(points.begin(), points.end(), [&](const WaitPoint& q) { return dominates(q, p); }))
                kept.push_back(p);
        }
        points = std::move(kept);
    }

} // namespace

std::vector<std::vector<WaitPoint>> messageWaitPoints(const Schedule& schedule)
{
    const auto s = hasCommunication(schedule) ? schedule : withCommunication(schedule);
    const auto messages = Execution(s).run();
    // Per device, messages by the first action they can wait during and the action that takes
    // them in: a sweep adds each from its first action and drops it after its last.
    std::vector<std::vector<WaitPoint>> points(static_cast<std::size_t>(std::max(1, s.spec.stages)));
    for (std::size_t d = 0; d < s.devices.size(); ++d) {
        const auto& list = s.devices[d];
        std::vector<int> fwdIn(list.size() + 1, 0), bwdIn(list.size() + 1, 0);
        for (const auto& m : messages) {
            if (m.device != d)
                continue;
            const auto first = std::min<std::size_t>(m.from, m.until); // the earliest action it can be there
            (m.forward ? fwdIn : bwdIn)[first] += 1;
            (m.forward ? fwdIn : bwdIn)[m.until + 1] -= 1;
        }
        std::vector<int> inFlight(points.size(), 0);
        std::vector<int> pending(points.size(), 0); // split backward: B done, W not
        int forward = 0;
        int backward = 0;
        for (std::size_t i = 0; i < list.size(); ++i) {
            forward += fwdIn[i];
            backward += bwdIn[i];
            const auto& a = list[i];
            const auto st = a.stage.index();
            if (st >= points.size())
                continue;
            if (a.type == ActionType::Forward)
                ++inFlight[st];
            if (a.type == ActionType::Forward || takesBackward(a.type) || a.type == ActionType::BackwardWeight)
                points[st].push_back({ inFlight[st], forward, backward, pending[st] });
            if (takesBackward(a.type))
                --inFlight[st];
            if (a.type == ActionType::BackwardInput)
                ++pending[st];
            if (a.type == ActionType::BackwardWeight)
                --pending[st];
        }
    }
    for (auto& p : points)
        keepUndominated(p);
    return points;
}

} // namespace ps
