// The messages that can wait at a device whatever the durations (schedule/message_wait.h), and the
// simulator's peak that counts them so: a plan made for a memory cap must fit however far a
// receiver's peers run ahead (issue P15: a capped CPU run ran out of memory when they did).
#include "schedule/message_wait.h"
#include "sim/simulator.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace ps;

namespace {

// The most of each count among a stage's points.
WaitPoint most(const std::vector<WaitPoint>& points)
{
    WaitPoint m;
    for (const auto& p : points) {
        m.inFlight = std::max(m.inFlight, p.inFlight);
        m.forwardMessages = std::max(m.forwardMessages, p.forwardMessages);
        m.backwardMessages = std::max(m.backwardMessages, p.backwardMessages);
        m.weightPending = std::max(m.weightPending, p.weightPending);
    }
    return m;
}

bool contains(const std::vector<WaitPoint>& points, const WaitPoint& p)
{
    return std::find(points.begin(), points.end(), p) != points.end();
}

Cluster fastLinks(int devices)
{
    DeviceSpec d;
    d.id = "test-gpu";
    d.memoryBytes = 1LL << 40;
    d.flopsFp32 = 1e12;
    d.memoryBandwidth = 1e12;
    d.hostLink = { "pcie", 1e15, 0 };
    d.peerLink = { "link", 1e15, 0 };
    return makeCluster(d, devices, 8);
}

// Stages whose durations are scaled by `speed[s]`; bytes differ by direction and stage so that a
// miscounted message shows.
std::vector<StageCost> stages(const std::vector<double>& speed)
{
    std::vector<StageCost> out(speed.size());
    for (std::size_t s = 0; s < out.size(); ++s) {
        auto& c = out[s];
        c.forwardNs = 1e6 * speed[s];
        c.backwardNs = 2e6 * speed[s];
        c.weightGradNs = 1e6 * speed[s];
        c.activationBytes = 1000 + 100 * static_cast<double>(s);
        c.sendForwardBytes = 10 + static_cast<double>(s);
        c.sendBackwardBytes = 30 + static_cast<double>(s);
    }
    return out;
}

std::vector<double> peaks(const Schedule& schedule, const std::vector<double>& speed, bool earliest, bool timed = false)
{
    SimulationInput in { schedule, stages(speed), fastLinks(schedule.spec.devices()), {}, 1, {}, {} };
    in.options.messagesAtEarliest = earliest;
    in.options.timedPeak = true;
    std::vector<double> out;
    for (const auto& d : simulate(in).devices)
        out.push_back(timed ? d.timedPeakBytes : d.peakBytes);
    return out;
}

} // namespace

// GPipe: the first stage's last forward and first backward can find every micro-batch's gradient
// already there (the next stage's backwards need nothing more from it), and the second stage's
// first forward every micro-batch's activations.
TEST(MessageWait, GPipeStagesCanHoldEveryMicroBatchsMessage)
{
    const auto points = messageWaitPoints(generateSchedule({ ScheduleKind::GPipe, 2, 4, 1, 1 }));
    ASSERT_EQ(points.size(), 2U);
    EXPECT_TRUE(contains(points[0], { 4, 0, 4 }));
    EXPECT_TRUE(contains(points[1], { 1, 4, 0 }));
    EXPECT_TRUE(contains(points[1], { 4, 1, 0 }));
    EXPECT_EQ(most(points[0]).forwardMessages, 0) << "the first stage receives no activations";
    EXPECT_EQ(most(points[1]).backwardMessages, 0) << "the last stage receives no gradients";
}

// 1F1B, 4 stages, 8 micro-batches. Stage 0 runs four forwards before its first backward, so stage
// 1 can hold all four activations during its first forward; in the cool-down, during stage 0's B4
// with four micro-batches in flight, stage 1's B5..B7 need nothing more from it, so all four
// gradients can be there. The last stage holds at most the two its warm-up lets stage 2 send ahead.
TEST(MessageWait, OneFOneBBoundsWhatWaitsByTheWarmUpAndTheCoolDown)
{
    const auto schedule = generateSchedule({ ScheduleKind::OneFOneB, 4, 8, 1, 1 });
    const auto points = messageWaitPoints(schedule);
    ASSERT_EQ(points.size(), 4U);
    EXPECT_EQ(points[0], (std::vector<WaitPoint> { { 4, 0, 4 } }));
    EXPECT_TRUE(contains(points[1], { 1, 4, 0 }));
    EXPECT_TRUE(contains(points[1], { 3, 0, 3 }));
    EXPECT_EQ(most(points[1]).inFlight, 3);
    EXPECT_EQ(points[3], (std::vector<WaitPoint> { { 1, 2, 0 } }));
    EXPECT_EQ(messageWaitPoints(withCommunication(schedule)), points) << "lowered first";
}

// The simulated peak counts every message from the earliest moment the schedule lets it arrive:
// the same for any durations and never below the peak of the simulated arrivals.
TEST(MessageWait, TheSimulatedPeakIsTheSameWhateverTheDurations)
{
    for (auto kind : { ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1 }) {
        for (int S : { 2, 3, 4 }) {
            const auto schedule = generateSchedule({ kind, S, 6, 1, 1 });
            const auto label = scheduleName(schedule.spec) + " S " + std::to_string(S);
            std::vector<double> even(static_cast<std::size_t>(S), 1.0);
            auto firstSlow = even;
            firstSlow.front() = 20;
            auto lastSlow = even;
            lastSlow.back() = 20;
            const auto reference = peaks(schedule, even, true);
            EXPECT_EQ(peaks(schedule, firstSlow, true), reference) << label;
            EXPECT_EQ(peaks(schedule, lastSlow, true), reference) << label;
            const auto arrived = peaks(schedule, even, false);
            for (std::size_t d = 0; d < reference.size(); ++d)
                EXPECT_GE(reference[d], arrived[d]) << label << " device " << d;
            // The timed peak beside it (compare's lower end) is the simulated arrivals' peak.
            EXPECT_EQ(peaks(schedule, even, true, true), arrived) << label;
            EXPECT_EQ(peaks(schedule, lastSlow, true, true), peaks(schedule, lastSlow, false)) << label;
        }
    }
}

// ZB-H1 defers W passes: after its B, a micro-batch keeps what W reads until W ends, so the points
// count those too. The last of 4 stages runs 3 more B passes before the W of the first: during
// its next forward 3 are pending beside the forward's own micro-batch (the planner held only the
// in-flight ones: gpt2-small's last ZB-H1 stage, 2.3 GB planned against 4.8 GB simulated).
TEST(MessageWait, ZeroBubbleCountsTheWeightPassesItDefers)
{
    const auto points = messageWaitPoints(generateSchedule({ ScheduleKind::ZeroBubbleH1, 4, 8, 1, 1 }));
    ASSERT_EQ(points.size(), 4U);
    EXPECT_TRUE(contains(points[3], { 1, 2, 0, 3 }));
    EXPECT_EQ(most(points[3]).inFlight, 1);
    for (const auto& stage : messageWaitPoints(generateSchedule({ ScheduleKind::OneFOneB, 4, 8, 1, 1 }))) {
        for (const auto& p : stage)
            EXPECT_EQ(p.weightPending, 0) << "1F1B runs W inside B";
    }
}
