// The copy stream runs a device's host copies beside its worker: queued copies run in order on
// their own thread, the caller does not wait for them, a wait returns once its copy is done and
// rethrows its failure.
#include "runtime/copy_stream.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

using namespace ps;
using namespace ps::engine;

namespace {

Action swapOut(std::uint32_t mb)
{
    return { ActionType::SwapOut, StageId(0), MicroBatchId(mb) };
}

} // namespace

TEST(CopyStream, QueuedCopiesRunInOrderOnTheirOwnThread)
{
    CopyStream stream("cpu:0 to host", {});
    std::vector<int> order;
    std::thread::id ranOn;
    const auto a = stream.enqueue(swapOut(0), [&] {
        ranOn = std::this_thread::get_id();
        order.push_back(0);
        return std::int64_t { 10 };
    });
    const auto b = stream.enqueue(swapOut(1), [&] {
        order.push_back(1);
        return std::int64_t { 20 };
    });
    EXPECT_LT(a, b);
    stream.wait(b);
    EXPECT_EQ(order, (std::vector<int> { 0, 1 }));
    EXPECT_NE(ranOn, std::this_thread::get_id());
    const auto records = stream.takeRecords();
    ASSERT_EQ(records.size(), 2U);
    EXPECT_EQ(records[0].action.microBatch.value, 0U);
    EXPECT_EQ(records[1].bytes, 20);
    EXPECT_LE(records[0].end, records[1].start);
    EXPECT_TRUE(stream.takeRecords().empty());
}

TEST(CopyStream, TheCallerDoesNotWaitForTheCopy)
{
    CopyStream stream("cpu:0 to host", {});
    std::promise<void> release;
    auto gate = release.get_future().share();
    std::atomic<bool> finished { false };
    const auto t = stream.enqueue(swapOut(0), [&, gate] {
        gate.wait(); // blocked until the caller, which must already be past enqueue, releases it
        finished = true;
        return std::int64_t { 1 };
    });
    EXPECT_FALSE(finished);
    release.set_value();
    stream.wait(t);
    EXPECT_TRUE(finished);
}

TEST(CopyStream, AFailedCopyFailsItsWaitAndLaterCopiesStillRun)
{
    CopyStream stream("cpu:0 from host", {});
    const auto bad = stream.enqueue(swapOut(0), []() -> std::int64_t { throw Error("out of memory on cpu:0"); });
    bool ran = false;
    const auto good = stream.enqueue(swapOut(1), [&] {
        ran = true;
        return std::int64_t { 0 };
    });
    EXPECT_THROW(
        {
            try {
                stream.wait(bad);
            } catch (const Error& e) {
                EXPECT_STREQ(e.what(), "out of memory on cpu:0");
                throw;
            }
        },
        Error);
    stream.wait(good);
    EXPECT_TRUE(ran);
    EXPECT_EQ(stream.takeRecords().size(), 1U); // only finished copies are events
}

TEST(CopyStream, DestructionFinishesWhatIsQueued)
{
    std::atomic<int> done { 0 };
    {
        CopyStream stream("cpu:0 to host", {});
        for (std::uint32_t i = 0; i < 8; ++i) {
            stream.enqueue(swapOut(i), [&] {
                std::this_thread::sleep_for(std::chrono::milliseconds(1));
                ++done;
                return std::int64_t { 0 };
            });
        }
    }
    EXPECT_EQ(done, 8);
}
