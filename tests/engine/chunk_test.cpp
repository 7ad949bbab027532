// The PatrickStar chunk manager in the engine: eviction of the chunk used latest (§8.3) on a
// hand-made access sequence, the same losses with and without chunks (it only moves memory), and a
// device too small for the model data that trains with chunks and fails without them.
#include "pipeline_support.h"
#include "runtime/chunk_manager.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

// Four parameters of 1024 elements, one per chunk.
std::vector<ChunkParameterShape> fourParameters()
{
    std::vector<ChunkParameterShape> p;
    for (std::uint32_t k = 0; k < 4; ++k)
        p.push_back({ TensorId(k), { 32, 32 } });
    return p;
}

constexpr std::int64_t kChunkBytes = 1024 * 4;

void touch(ChunkManager& m, int chunk, std::size_t moment)
{
    const std::array<int, 1> c { chunk };
    m.access(c, moment);
    m.release(c);
}

RunConfig config(const Graph& graph, const std::string& optimizer, bool chunks, std::int64_t chunkElements = 0)
{
    RunConfig c;
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.partition = evenCuts(graph, 2);
    c.optimizer.kind = optimizer;
    c.optimizer.lr = optimizer == "sgd" ? 0.05 : 3e-3;
    c.seed = 5;
    c.chunks = { chunks, chunkElements };
    return c;
}

struct Trained
{
    std::vector<double> losses;
    std::vector<std::vector<float>> params;
    std::vector<RunStepResult> steps;
};

Trained train(const Graph& graph, const RunConfig& c, std::int64_t capacity, int steps)
{
    TrainingRun run(graph, TokenData::random(256, 1 << 16, 11), makeDevices("cpu:2", capacity), c);
    Trained out;
    for (int s = 0; s < steps; ++s) {
        out.steps.push_back(run.step());
        out.losses.push_back(out.steps.back().loss);
    }
    for (auto id : run.runner().parameterIds())
        out.params.push_back(asFloats(run.runner().parameterBytes(id)));
    return out;
}

// Per device: the bytes that are not parameters, gradients or optimizer states at the peak of a
// run without a limit, and the model data.
struct Footprint
{
    std::int64_t nonModel = 0;
    std::int64_t model = 0;
};

Footprint footprint(const Graph& graph)
{
    const auto r = train(graph, config(graph, "adamw", false), 0, 1).steps.front();
    Footprint f;
    for (const auto& uses : r.devicePeakByUse) {
        const auto model = uses[0] + uses[1] + uses[2];
        f.model = std::max(f.model, model);
        f.nonModel = std::max(f.nonModel, uses[3] + uses[4] + uses[5]);
    }
    return f;
}

} // namespace

TEST(ChunkManager, PacksParametersInOrderIntoChunksOnTheHost)
{
    Allocator device("dev", 0);
    Allocator host("host");
    const std::vector<ChunkParameterShape> params { { TensorId(0), { 600 } }, { TensorId(1), { 300 } },
        { TensorId(2), { 200 } } };
    ChunkManager m(params, 1024, 2, cpuBackend(), device, host);
    ASSERT_EQ(m.chunkCount(), 2); // 600 + 300 fit one chunk; 200 more do not (§6.1)
    EXPECT_EQ(m.chunkOf(0), 0);
    EXPECT_EQ(m.chunkOf(1), 0);
    EXPECT_EQ(m.chunkOf(2), 1);
    EXPECT_TRUE(m.onHost(0));
    EXPECT_EQ(device.current(), 0);
    EXPECT_EQ(host.current(), 2 * 4 * 1024 * 4); // param, grad, m, v of two chunks
    EXPECT_TRUE(m.parameter(1).sameStorage(m.parameter(0)));
    EXPECT_TRUE(m.parameter(1).isOn(host));
}

TEST(ChunkManager, EvictsTheUploadedChunkWhoseNextUseIsLatest)
{
    for (const bool zeroFirst : { true, false }) {
        Allocator device("dev", 0);
        Allocator host("host");
        ChunkManager m(fourParameters(), 1024, 2, cpuBackend(), device, host);
        // Moments: 0, 1, 2, then 0 and 1 again, in one order or the other.
        m.setMoments({ { 0 }, { 1 }, { 2 }, { zeroFirst ? 0 : 1 }, { zeroFirst ? 1 : 0 } });
        m.setCacheBytes(2 * kChunkBytes);
        touch(m, 0, 0);
        touch(m, 1, 1);
        EXPECT_TRUE(m.uploaded(0));
        EXPECT_TRUE(m.uploaded(1));
        touch(m, 2, 2); // the cache holds two: the one needed last goes
        EXPECT_TRUE(m.uploaded(2));
        EXPECT_EQ(m.uploaded(0), zeroFirst) << "zero first: " << zeroFirst;
        EXPECT_EQ(m.uploaded(1), !zeroFirst) << "zero first: " << zeroFirst;
        const auto counts = m.takeIterationCounts();
        EXPECT_EQ(counts.uploads, 3);
        EXPECT_EQ(counts.evictions, 1);
        EXPECT_EQ(counts.bytesUp, 3 * kChunkBytes);
        EXPECT_EQ(counts.bytesDown, kChunkBytes);
    }
}

TEST(ChunkManager, AFullDeviceEvictsUnpinnedChunksAndFailsWhenAllArePinned)
{
    Allocator device("dev", 2 * kChunkBytes);
    Allocator host("host");
    ChunkManager m(fourParameters(), 1024, 1, cpuBackend(), device, host);
    m.setMoments({ { 0, 1 }, { 2 }, { 3 }, { 0 } });
    m.setCacheBytes(4 * kChunkBytes); // only the allocator limits
    const std::array<int, 2> both { 0, 1 };
    m.access(both, 0);
    m.release(both);
    touch(m, 2, 1); // chunk 1 is never used again: it goes, 0 stays
    EXPECT_TRUE(m.uploaded(0));
    EXPECT_FALSE(m.uploaded(1));
    EXPECT_LE(device.peak(), 2 * kChunkBytes);
    const std::array<int, 2> pinned { 0, 2 };
    m.access(pinned, 2);
    const std::array<int, 1> three { 3 };
    EXPECT_THROW(m.access(three, 2), OutOfMemoryError);
}

TEST(ChunkManager, OptimizerRunsWhereTheStatesLive)
{
    Allocator device("dev", 0);
    Allocator host("host");
    ChunkManager m(fourParameters(), 1024, 1, cpuBackend(), device, host);
    EXPECT_EQ(m.moveHome(1), 3 * kChunkBytes); // param, grad, momentum
    EXPECT_FALSE(m.onHost(1));
    EXPECT_TRUE(m.parameter(1).isOn(device));
    EXPECT_TRUE(m.optimizerState(0, 1).isOn(device));
    m.sgd({ 0.1F, 0.9F, 0.0F, 1.0F, true });
    const auto counts = m.takeIterationCounts();
    EXPECT_EQ(counts.hostOptimizerElements, 3 * 1024);
    EXPECT_EQ(counts.deviceOptimizerElements, 1024);
    EXPECT_EQ(counts.hostChunks, 3);
}

// The chunk manager only moves memory: losses and parameters are the run's without it, whether
// the chunks sit on the host (the warm-up step), go home to the device, or are evicted.
TEST(ChunkedPipeline, SameLossesAsWithoutChunks)
{
    const auto graph = tinyGpt();
    const auto f = footprint(graph);
    const auto capacity = f.nonModel + f.model / 2 + (1 << 20) / 4;
    for (const std::string optimizer : { "adamw", "sgd" }) {
        const auto plain = train(graph, config(graph, optimizer, false), 0, 6);
        const auto chunked = train(graph, config(graph, optimizer, true, 20480), capacity, 6);
        for (std::size_t s = 0; s < plain.losses.size(); ++s)
            EXPECT_NEAR(chunked.losses[s], plain.losses[s], 1e-6 * std::abs(plain.losses[s]))
                << optimizer << " step " << s + 1;
        ASSERT_EQ(chunked.params.size(), plain.params.size());
        for (std::size_t k = 0; k < plain.params.size(); ++k)
            EXPECT_EQ(chunked.params[k], plain.params[k]) << optimizer << " parameter " << k;
        std::int64_t uploads = 0;
        std::int64_t hostOptimizer = 0;
        std::int64_t deviceOptimizer = 0;
        for (const auto& step : chunked.steps) {
            for (const auto& c : step.deviceChunks) {
                uploads += c.uploads;
                hostOptimizer += c.hostOptimizerElements;
                deviceOptimizer += c.deviceOptimizerElements;
            }
        }
        EXPECT_GT(uploads, 0) << optimizer;
        EXPECT_GT(hostOptimizer, 0) << optimizer;
        EXPECT_GT(deviceOptimizer, 0) << optimizer; // chunks on both sides
    }
}

TEST(ChunkedPipeline, TrainsOnADeviceTooSmallForTheModelData)
{
    const auto graph = tinyGpt();
    const auto f = footprint(graph);
    // Room for the activations and a few chunks, not for the parameters with their states.
    const auto capacity = f.nonModel + f.model / 4;
    EXPECT_THROW(train(graph, config(graph, "adamw", false), capacity, 1), OutOfMemoryError);
    const auto chunked = train(graph, config(graph, "adamw", true), capacity, 4);
    for (const auto& step : chunked.steps) {
        ASSERT_EQ(step.deviceChunks.size(), 2U);
        for (std::size_t d = 0; d < 2; ++d) {
            EXPECT_LE(step.devicePeakBytes[d], capacity);
            EXPECT_GT(step.deviceChunks[d].hostChunks, 0) << "device " << d;
            EXPECT_GT(step.deviceChunks[d].hostOptimizerElements, 0) << "device " << d;
            EXPECT_GT(step.deviceChunks[d].uploads, 0) << "device " << d;
        }
    }
    const auto plain = train(graph, config(graph, "adamw", false), 0, 4);
    EXPECT_EQ(chunked.losses, plain.losses);
}
