// FTPipe's asynchronous pipeline in the runtime (`train --schedule ftpipe-async:A`, FTPipe §4.2):
// one weight version (no stash), an optimizer step every A micro-batches over their mean gradient,
// and the non-last stages recomputing from their border inputs inside B with the current weights.
#include "graph/op_cost.h"
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

Graph tinyGpt()
{
    auto c = zooPreset("gpt2-tiny"); // 2 layers, 64 wide, byte vocabulary, dropout 0
    c.seq = 32;
    c.microBatch = 2;
    return buildZooModel(c);
}

// FTPipe's checkpointing (§4.2.1): every stage but the last recomputes what it produces and saves.
std::vector<StageMemoryPlan> borderCheckpoints(const Graph& graph, const Partition& partition)
{
    const auto costs = computeOpCosts(graph);
    std::vector<StageMemoryPlan> plans(static_cast<std::size_t>(partition.stageCount()));
    for (int s = 0; s + 1 < partition.stageCount(); ++s) {
        const StageId id(static_cast<std::uint32_t>(s));
        const auto begin = partition.stageBegin(id);
        const auto end = partition.stageEnd(id, graph.nodeCount());
        auto& p = plans[static_cast<std::size_t>(s)];
        for (std::size_t n = begin; n < end; ++n) {
            for (auto t : costs[n].savedTensors) {
                const auto root = storageRoot(graph, t);
                const auto& rt = graph.tensor(root);
                const bool here = rt.kind == TensorKind::Activation && rt.producer.valid()
                    && rt.producer.index() >= begin && rt.producer.index() < end;
                if (here
                    && std::find(p.recomputedTensors.begin(), p.recomputedTensors.end(), root)
                        == p.recomputedTensors.end())
                    p.recomputedTensors.push_back(root);
            }
        }
    }
    return plans;
}

struct OneStep
{
    double loss = 0;
    std::map<std::string, std::vector<float>> params;
    std::vector<int> steps; // optimizer steps per stage
    std::vector<int> versions; // peak weight versions per stage
};

OneStep oneStep(const Graph& graph, const std::string& schedule)
{
    RunConfig c;
    c.schedule = parseScheduleSpec(schedule, 2, 4);
    c.partition = evenCuts(graph, 2);
    c.memory = borderCheckpoints(graph, c.partition);
    c.optimizer.kind = "sgd";
    c.optimizer.lr = 0.05;
    c.seed = 5;
    TrainingRun run(graph, TokenData::random(256, 1 << 16, 11), makeDevices("cpu:2", 0), c);
    OneStep out;
    out.loss = run.step().loss;
    for (auto id : run.runner().parameterIds())
        out.params[graph.tensor(id).name] = asFloats(run.runner().parameterBytes(id));
    for (const auto& s : run.runner().stages()) {
        out.steps.push_back(s->optimizerSteps());
        out.versions.push_back(s->peakWeightVersions());
    }
    return out;
}

} // namespace

TEST(FtpipeRuntime, OneStepPerIterationIsTheSynchronousStep)
{
    // A = M: nothing changes inside the iteration, so every pass sees the weights it started with
    // and each stage steps once over the mean of all M gradients: 1F1B's step. The tied embedding
    // is the exception: an asynchronous stage updates its own copy (as PipeDream's do).
    const auto graph = tinyGpt();
    const auto sync = oneStep(graph, "1f1b");
    const auto async = oneStep(graph, "ftpipe-async:4");
    EXPECT_NEAR(async.loss, sync.loss, 1e-6 * sync.loss);
    EXPECT_EQ(async.steps, (std::vector<int> { 1, 1 }));
    EXPECT_EQ(async.versions, (std::vector<int> { 1, 1 }));
    ASSERT_EQ(async.params.size(), sync.params.size());
    for (const auto& [name, values] : sync.params) {
        if (name == "wte.weight")
            continue;
        EXPECT_LT(relativeL2(async.params.at(name), values), 1e-5) << name;
    }
}

TEST(FtpipeRuntime, AStepAfterEveryBackwardWithOneWeightVersion)
{
    // A = 1: four steps per stage in the iteration. The later micro-batches run on weights earlier
    // ones updated, without PipeDream's stashed versions, so the result is neither the synchronous
    // step nor PipeDream's.
    const auto graph = tinyGpt();
    const auto async = oneStep(graph, "ftpipe-async:1");
    EXPECT_EQ(async.steps, (std::vector<int> { 4, 4 }));
    EXPECT_EQ(async.versions, (std::vector<int> { 1, 1 }));
    const auto pipedream = oneStep(graph, "pipedream");
    EXPECT_EQ(pipedream.steps, (std::vector<int> { 4, 4 }));
    EXPECT_EQ(pipedream.versions, (std::vector<int> { 2, 1 }));
    const auto sync = oneStep(graph, "1f1b");
    const auto& name = "h.0.mlp.c_fc.weight";
    ASSERT_TRUE(async.params.contains(name));
    EXPECT_GT(relativeL2(async.params.at(name), sync.params.at(name)), 1e-4);
    EXPECT_GT(relativeL2(async.params.at(name), pipedream.params.at(name)), 1e-7)
        << "stage 0 recomputes with the current weights, PipeDream's backward reads the stashed ones";
}

TEST(FtpipeRuntime, TheAsynchronousPipelineLearns)
{
    auto c = zooPreset("gpt2-tiny");
    c.seq = 32;
    c.microBatch = 4;
    const auto graph = buildZooModel(c);
    RunConfig config;
    config.schedule = parseScheduleSpec("ftpipe-async:2", 2, 4);
    config.partition = evenCuts(graph, 2);
    config.memory = borderCheckpoints(graph, config.partition);
    config.optimizer = StageOptimizerConfig { "adamw", 1e-3 };
    TrainingRun run(graph, TokenData::fromTextFile(PS_SOURCE_DIR "/README.md"), makeDevices("cpu:2", 0), config);
    const auto [first, last] = firstAndLastLoss(run, 30);
    EXPECT_LT(last, first - 0.5) << "the asynchronous pipeline's loss should fall";
}

TEST(FtpipeRuntime, AStageWithoutCheckpointingIsWarnedAbout)
{
    const auto graph = tinyGpt();
    RunConfig c;
    c.schedule = parseScheduleSpec("ftpipe-async:2", 2, 4);
    c.partition = evenCuts(graph, 2);
    const auto warnings = scheduleWarnings(c); // no memory plans: stage 0 keeps everything
    ASSERT_EQ(warnings.size(), 1U);
    EXPECT_NE(warnings.front().find("stage(s) 0 keep"), std::string::npos) << warnings.front();
    c.memory = borderCheckpoints(graph, c.partition);
    EXPECT_TRUE(scheduleWarnings(c).empty());
    c.schedule = parseScheduleSpec("1f1b", 2, 4);
    c.memory.clear();
    EXPECT_TRUE(scheduleWarnings(c).empty());
}
