#include "schedule/schedule.h"
#include "schedule/schedule_validate.h"
#include "sim/memory_model.h"
#include "util/error.h"

#include <gtest/gtest.h>

using namespace ps;

namespace {

std::string order(const std::vector<Action>& actions)
{
    std::string out;
    for (const auto& a : actions) {
        if (a.type == ActionType::OptimizerStep)
            continue;
        out += (out.empty() ? "" : " ") + std::string(actionCode(a.type)) + std::to_string(a.microBatch.value);
    }
    return out;
}

std::vector<ScheduleSpec> allSpecs(int S, int M)
{
    std::vector<ScheduleSpec> specs = { { ScheduleKind::GPipe, S, M, 1, 1 }, { ScheduleKind::OneFOneB, S, M, 1, 1 },
        { ScheduleKind::PipeDream, S, M, 1, 1 }, { ScheduleKind::ZeroBubbleH1, S, M, 1, 1 } };
    for (int k : { 1, 2, 3, 5, M })
        if (k <= M)
            specs.push_back({ ScheduleKind::KFKB, S, M, k, 1 });
    for (int v : { 2, 4 }) {
        if (S % v == 0 && M % (S / v) == 0)
            specs.push_back({ ScheduleKind::Interleaved, S, M, 1, v });
    }
    return specs;
}

} // namespace

TEST(Schedule, EveryGeneratedScheduleIsValid)
{
    int checked = 0;
    for (int S = 1; S <= 8; ++S) {
        for (int M = 1; M <= 32; ++M) {
            for (const auto& spec : allSpecs(S, M)) {
                const auto schedule = generateSchedule(spec);
                const auto problems = validateSchedule(schedule);
                ASSERT_TRUE(problems.empty())
                    << scheduleName(spec) << " S=" << S << " M=" << M << ": " << problems.front();
                const auto lowered = validateSchedule(withCommunication(schedule));
                ASSERT_TRUE(lowered.empty())
                    << scheduleName(spec) << " lowered S=" << S << " M=" << M << ": " << lowered.front();
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 1500);
}

TEST(Schedule, KfkbMatchesAdaGrouperOrder)
{
    // S = 4, M = 8 orders from the Ada-Grouper digest (k copies of 1F1B cross-merged).
    const auto k1 = generateSchedule({ ScheduleKind::KFKB, 4, 8, 1, 1 });
    EXPECT_EQ(order(k1.devices[0]), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    EXPECT_EQ(order(k1.devices[3]), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    const auto k2 = generateSchedule({ ScheduleKind::KFKB, 4, 8, 2, 1 });
    EXPECT_EQ(order(k2.devices[0]), "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
    EXPECT_EQ(order(k2.devices[1]), "F0 F1 F2 F3 F4 F5 B0 B1 F6 F7 B2 B3 B4 B5 B6 B7");
    EXPECT_EQ(order(k2.devices[3]), "F0 F1 B0 B1 F2 F3 B2 B3 F4 F5 B4 B5 F6 F7 B6 B7");
}

TEST(Schedule, KfkbEndpointsAreOneFOneBAndGPipe)
{
    for (int S : { 2, 4, 7 }) {
        for (int M : { 1, 5, 16 }) {
            const auto k1 = generateSchedule({ ScheduleKind::KFKB, S, M, 1, 1 });
            const auto f1b = generateSchedule({ ScheduleKind::OneFOneB, S, M, 1, 1 });
            const auto kM = generateSchedule({ ScheduleKind::KFKB, S, M, M, 1 });
            const auto gpipe = generateSchedule({ ScheduleKind::GPipe, S, M, 1, 1 });
            EXPECT_EQ(k1.devices, f1b.devices);
            EXPECT_EQ(kM.devices, gpipe.devices);
        }
    }
}

TEST(Schedule, ZeroBubbleSplitsBackward)
{
    const auto zb = generateSchedule({ ScheduleKind::ZeroBubbleH1, 4, 6, 1, 1 });
    EXPECT_TRUE(zb.splitBackward());
    // The last stage holds S-1 = 3 weight-gradient passes back; the first runs each W at once.
    EXPECT_EQ(order(zb.devices[3]), "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 W3 W4 W5");
    EXPECT_EQ(order(zb.devices[0]), "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 I3 W3 I4 W4 I5 W5");
}

TEST(Schedule, InterleavedAssignsChunksRoundRobin)
{
    const auto s = generateSchedule({ ScheduleKind::Interleaved, 4, 4, 1, 2 }); // 2 devices x 2 chunks
    ASSERT_EQ(s.devices.size(), 2U);
    for (std::size_t d = 0; d < 2; ++d) {
        for (const auto& a : s.devices[d])
            EXPECT_EQ(s.deviceOf(a.stage).index(), d);
    }
}

TEST(MemoryModel, PeakInFlightMatchesFormulas)
{
    for (int S = 1; S <= 8; ++S) {
        for (int M = 1; M <= 32; ++M) {
            for (const auto& spec : allSpecs(S, M)) {
                if (spec.kind == ScheduleKind::Interleaved)
                    continue;
                const auto peak = peakInFlightFromActions(generateSchedule(spec));
                for (int s = 0; s < S; ++s)
                    ASSERT_EQ(peak[static_cast<std::size_t>(s)], inFlightMicroBatches(spec, s))
                        << scheduleName(spec) << " S=" << S << " M=" << M << " stage " << s;
            }
        }
    }
    EXPECT_EQ(weightVersions({ ScheduleKind::PipeDream, 4, 8, 1, 1 }, 0), 4);
    EXPECT_EQ(weightVersions({ ScheduleKind::PipeDream, 4, 2, 1, 1 }, 0), 2);
    EXPECT_EQ(weightVersions({ ScheduleKind::OneFOneB, 4, 8, 1, 1 }, 0), 1);
}

TEST(ScheduleValidate, RejectsMissingDuplicateAndMisplacedActions)
{
    auto s = generateSchedule({ ScheduleKind::OneFOneB, 2, 2, 1, 1 });
    auto missing = s;
    missing.devices[1].erase(missing.devices[1].begin());
    EXPECT_NE(validateSchedule(missing).front().find("1F0 is missing"), std::string::npos);
    auto twice = s;
    twice.devices[0].push_back(twice.devices[0].front());
    EXPECT_NE(validateSchedule(twice).front().find("0F0 appears 2 times"), std::string::npos);
    auto misplaced = s;
    misplaced.devices[0].push_back({ ActionType::Forward, StageId(1), MicroBatchId(0) });
    EXPECT_FALSE(validateSchedule(misplaced).empty());
}

TEST(ScheduleValidate, DetectsDeadlock)
{
    auto s = generateSchedule({ ScheduleKind::OneFOneB, 2, 2, 1, 1 });
    // Device 1 runs micro-batch 1 first while device 0 needs micro-batch 0's gradient first.
    const auto a = [](ActionType t, int st, int m) {
        return Action { t, StageId(static_cast<std::uint32_t>(st)), MicroBatchId(static_cast<std::uint32_t>(m)) };
    };
    s.devices[0] = { a(ActionType::Forward, 0, 0), a(ActionType::Backward, 0, 0), a(ActionType::Forward, 0, 1),
        a(ActionType::Backward, 0, 1) };
    s.devices[1] = { a(ActionType::Forward, 1, 1), a(ActionType::Backward, 1, 1), a(ActionType::Forward, 1, 0),
        a(ActionType::Backward, 1, 0) };
    const auto problems = validateSchedule(s);
    ASSERT_FALSE(problems.empty());
    EXPECT_NE(problems.front().find("deadlock"), std::string::npos) << problems.front();
    EXPECT_THROW(validateScheduleOrThrow(withCommunication(s)), Error);
}

TEST(ScheduleCsv, RoundTripsAndRejectsBadCells)
{
    for (const auto& spec : allSpecs(4, 8)) {
        const auto lowered = withCommunication(generateSchedule(spec));
        const auto back = scheduleFromCsv(scheduleToCsv(lowered), "test.csv");
        EXPECT_EQ(back.devices, lowered.devices) << scheduleName(spec);
        EXPECT_TRUE(validateSchedule(back).empty()) << scheduleName(spec);
    }
    EXPECT_EQ(formatAction({ ActionType::SendForward, StageId(2), MicroBatchId(5) }), "2SEND_F5");
    EXPECT_EQ(parseAction("1I3")->type, ActionType::BackwardInput);
    try {
        (void)scheduleFromCsv("0F0,0F1\n1F0,1X9\n", "bad.csv");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.csv: row 2, cell 2: '1X9'"), std::string::npos) << e.what();
    }
}

// Found by tests/fuzz (regressions/fuzz_schedule_csv): the validator walked 2 x 188888882 pairs.
TEST(ScheduleCsv, IndicesBeyondWhatTheCellsCanCoverAreRejected)
{
    try {
        (void)scheduleFromCsv("0F0,0F188888881,\n", "huge.csv");
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("huge.csv: stage 0 and micro-batch 188888881 need more actions"),
            std::string::npos)
            << e.what();
    }
    EXPECT_THROW((void)scheduleFromCsv("4294967295F0\n", "s.csv"), Error);
}

TEST(ScheduleSpec, BadParametersGiveClearErrors)
{
    EXPECT_THROW((void)parseScheduleSpec("kfkb:9", 4, 8), Error);
    EXPECT_THROW((void)parseScheduleSpec("interleaved:2", 4, 3), Error); // M not a multiple of 2 devices
    EXPECT_THROW((void)parseScheduleSpec("interleaved:3", 4, 8), Error);
    EXPECT_THROW((void)parseScheduleSpec("zigzag", 4, 8), Error);
    EXPECT_THROW((void)parseScheduleSpec("kfkb:x", 4, 8), Error);
    EXPECT_EQ(parseScheduleSpec("kfkb:2", 4, 8).groupSize, 2);
    EXPECT_EQ(parseScheduleSpec("interleaved:2", 4, 8).devices(), 2);
}

// A memory walk's peak without messages is the highest level of everything else: here the overall
// peak (a message beside a little workspace) is not where the activations peaked.
TEST(MemoryModel, WalkSeparatesThePeakWithoutMessages)
{
    const auto walk = walkMemory({ { 1, 4000, MemoryKind::Activations }, { 2, -4000, MemoryKind::Activations },
                                     { 3, 6000, MemoryKind::Messages }, { 4, 400, MemoryKind::Activations } },
        100, 0);
    EXPECT_DOUBLE_EQ(walk.peakBytes, 6500);
    EXPECT_DOUBLE_EQ(walk.messagesAtPeak, 6000);
    EXPECT_DOUBLE_EQ(walk.peakWithoutMessagesBytes, 4100);
}
