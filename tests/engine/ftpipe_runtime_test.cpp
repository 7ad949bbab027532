// FTPipe's asynchronous pipeline in the runtime (`train --schedule ftpipe-async:A`, FTPipe §4.2):
// one weight version (no stash), an optimizer step every A micro-batches over their mean gradient,
// and the non-last stages recomputing from their border inputs inside B with the current weights;
// checked against a hand-differentiated model's update sequence.
#include "graph/op_cost.h"
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

namespace {

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

namespace {

// A two-stage model small enough to differentiate by hand: ids -> Embedding(wte) -> MatMul(w0)
// on stage 0, -> MatMul(w1) -> CrossEntropy(labels) on stage 1. Fed a text of one repeated byte,
// every row of every micro-batch is the same token, so a micro-batch's loss and gradients are
// those of one row: e = wte[a], h = e w0, z = h w1, p = softmax(z), r = p - onehot(a),
// loss = -log p[a], dw1 = h r^T, dh = w1 r, dw0 = e dh^T, dwte[a] = w0 dh.
constexpr std::int64_t kBatch = 2;
constexpr std::int64_t kSeq = 3;
constexpr std::int64_t kWidth = 4;
constexpr std::int64_t kVocab = 256;
constexpr int kToken = 'a';

using Matrix = std::vector<double>; // row-major

Matrix initialValues(std::int64_t rows, std::int64_t cols, double phase)
{
    Matrix m(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < m.size(); ++i)
        m[i] = 0.5 * std::sin(0.7 * static_cast<double>(i) + phase);
    return m;
}

std::shared_ptr<const std::vector<std::byte>> asBytes(const Matrix& m)
{
    std::vector<float> f(m.begin(), m.end());
    const auto* p = reinterpret_cast<const std::byte*>(f.data());
    return std::make_shared<const std::vector<std::byte>>(p, p + f.size() * sizeof(float));
}

Graph handModel(const Matrix& wte, const Matrix& w0, const Matrix& w1)
{
    ModelInfo info;
    info.name = "hand";
    info.family = "mlp";
    info.microBatch = kBatch;
    Graph g(info);
    const auto tensor = [&](std::string name, Shape shape, TensorKind kind, DType dtype = DType::F32) {
        Tensor t;
        t.name = std::move(name);
        t.shape = std::move(shape);
        t.kind = kind;
        t.dtype = dtype;
        return g.addTensor(t);
    };
    const auto ids = tensor("input_ids", { kBatch, kSeq }, TensorKind::Input, DType::I64);
    const auto labels = tensor("labels", { kBatch, kSeq }, TensorKind::Input, DType::I64);
    const auto tWte = tensor("wte", { kVocab, kWidth }, TensorKind::Parameter);
    const auto tW0 = tensor("w0", { kWidth, kWidth }, TensorKind::Parameter);
    const auto tW1 = tensor("w1", { kWidth, kVocab }, TensorKind::Parameter);
    const auto e = tensor("e", { kBatch, kSeq, kWidth }, TensorKind::Activation);
    const auto h = tensor("h", { kBatch, kSeq, kWidth }, TensorKind::Activation);
    const auto z = tensor("z", { kBatch, kSeq, kVocab }, TensorKind::Activation);
    const auto loss = tensor("loss", {}, TensorKind::Activation);
    const auto node = [&](std::string name, OpType op, std::vector<TensorId> in, TensorId out) {
        Node n;
        n.name = std::move(name);
        n.op = op;
        n.inputs = std::move(in);
        n.outputs = { out };
        g.addNode(n);
    };
    node("embed", OpType::Embedding, { ids, tWte }, e);
    node("mm0", OpType::MatMul, { e, tW0 }, h);
    node("mm1", OpType::MatMul, { h, tW1 }, z);
    node("loss", OpType::CrossEntropy, { z, labels }, loss);
    g.setOutputs({ loss });
    g.setParameterValues(tWte, asBytes(wte));
    g.setParameterValues(tW0, asBytes(w0));
    g.setParameterValues(tW1, asBytes(w1));
    return g;
}

// Stage 0's weights and what it sent for each micro-batch; stage 1's weights and what it sent back.
struct HandStage
{
    Matrix wte, w0, w1; // the stage's own (stage 0: wte, w0; stage 1: w1)
    Matrix gWte, gW0, gW1; // accumulated since the last step
    int pending = 0; // backwards since the last step
};

struct HandResult
{
    Matrix wte, w0, w1;
    double meanLoss = 0;
};

// FTPipe's asynchronous semantics (§4.2) worked through the schedule's own action order: each
// stage keeps one weight version; a forward uses the weights of that moment; stage 0 recomputes
// its activations in its backward with the weights of that moment (not the forward's); a stage
// steps (plain SGD) over the mean of its last A gradients after every A-th backward.
HandResult handComputedAsync(const Schedule& schedule, int groupSize, double lr, Matrix wte, Matrix w0, Matrix w1)
{
    const auto a = static_cast<std::size_t>(kToken);
    const auto C = static_cast<std::size_t>(kWidth);
    const auto V = static_cast<std::size_t>(kVocab);
    HandStage s0 { std::move(wte), std::move(w0), {}, {}, {}, {}, 0 };
    HandStage s1 { {}, {}, std::move(w1), {}, {}, {}, 0 };
    s0.gWte.assign(s0.wte.size(), 0);
    s0.gW0.assign(s0.w0.size(), 0);
    s1.gW1.assign(s1.w1.size(), 0);
    const auto stage0Forward = [&](const HandStage& s) {
        Matrix e(s.wte.begin() + static_cast<std::ptrdiff_t>(a * C),
            s.wte.begin() + static_cast<std::ptrdiff_t>((a + 1) * C));
        Matrix h(C, 0.0);
        for (std::size_t c = 0; c < C; ++c)
            for (std::size_t k = 0; k < C; ++k)
                h[k] += e[c] * s.w0[c * C + k];
        return std::pair { e, h };
    };
    const auto step = [&](Matrix& w, Matrix& g, int n) {
        for (std::size_t i = 0; i < w.size(); ++i) {
            w[i] -= lr * g[i] / n;
            g[i] = 0;
        }
    };
    const auto M = static_cast<std::size_t>(schedule.spec.microBatches);
    std::vector<std::optional<Matrix>> sentH(M), sentDh(M), stage1Input(M), stage1R(M);
    std::vector<double> losses(M, 0.0);
    std::vector<std::size_t> next(schedule.devices.size(), 0);
    for (bool progress = true; progress;) {
        progress = false;
        for (std::size_t d = 0; d < schedule.devices.size(); ++d) {
            while (next[d] < schedule.devices[d].size()) {
                const auto& act = schedule.devices[d][next[d]];
                const auto mb = act.microBatch.index();
                const bool first = act.stage.index() == 0;
                if (act.type == ActionType::Forward && first) {
                    sentH[mb] = stage0Forward(s0).second;
                } else if (act.type == ActionType::Forward) {
                    if (!sentH[mb])
                        break; // waits for stage 0
                    const auto& h = *sentH[mb];
                    Matrix z(V, 0.0);
                    for (std::size_t k = 0; k < C; ++k)
                        for (std::size_t v = 0; v < V; ++v)
                            z[v] += h[k] * s1.w1[k * V + v];
                    const double top = *std::max_element(z.begin(), z.end());
                    double sum = 0;
                    for (double x : z)
                        sum += std::exp(x - top);
                    Matrix r(V);
                    for (std::size_t v = 0; v < V; ++v)
                        r[v] = std::exp(z[v] - top) / sum - (v == a ? 1.0 : 0.0);
                    losses[mb] = -(z[a] - top - std::log(sum));
                    stage1Input[mb] = h;
                    stage1R[mb] = r;
                } else if (act.type == ActionType::Backward && !first) {
                    const auto& h = *stage1Input[mb];
                    const auto& r = *stage1R[mb]; // with the weights of its forward: no recompute on the last stage
                    Matrix dh(C, 0.0);
                    for (std::size_t k = 0; k < C; ++k)
                        for (std::size_t v = 0; v < V; ++v) {
                            dh[k] += s1.w1[k * V + v] * r[v];
                            s1.gW1[k * V + v] += h[k] * r[v];
                        }
                    sentDh[mb] = dh;
                    if (++s1.pending == groupSize) {
                        step(s1.w1, s1.gW1, groupSize);
                        s1.pending = 0;
                    }
                } else if (act.type == ActionType::Backward) {
                    if (!sentDh[mb])
                        break; // waits for stage 1
                    const auto& dh = *sentDh[mb];
                    const auto e = stage0Forward(s0).first; // recomputed with today's weights
                    for (std::size_t c = 0; c < C; ++c)
                        for (std::size_t k = 0; k < C; ++k) {
                            s0.gW0[c * C + k] += e[c] * dh[k];
                            s0.gWte[a * C + c] += s0.w0[c * C + k] * dh[k];
                        }
                    if (++s0.pending == groupSize) {
                        step(s0.wte, s0.gWte, groupSize);
                        step(s0.w0, s0.gW0, groupSize);
                        s0.pending = 0;
                    }
                }
                ++next[d];
                progress = true;
            }
        }
    }
    for (std::size_t d = 0; d < schedule.devices.size(); ++d)
        EXPECT_EQ(next[d], schedule.devices[d].size()) << "device " << d << " never finished";
    HandResult out { s0.wte, s0.w0, s1.w1, 0.0 };
    for (double l : losses)
        out.meanLoss += l / static_cast<double>(M);
    return out;
}

double relativeL2To(const std::vector<float>& got, const Matrix& want)
{
    return relativeL2(got, std::vector<float>(want.begin(), want.end()));
}

} // namespace

TEST(FtpipeRuntime, UpdatesFollowAHandComputedSequence)
{
    // FTPipe §4.2's update rule on a model differentiated by hand (above): after one iteration of
    // 4 micro-batches on 2 devices, every weight equals the hand-worked sequence's, for A = 1 (a
    // step after every backward) and A = 2.
    const auto wte = initialValues(kVocab, kWidth, 0.1);
    const auto w0 = initialValues(kWidth, kWidth, 1.3);
    const auto w1 = initialValues(kWidth, kVocab, 2.9);
    const auto graph = handModel(wte, w0, w1);
    const auto text = std::filesystem::temp_directory_path() / "ps_ftpipe_hand.txt";
    std::ofstream(text) << std::string(200, static_cast<char>(kToken));
    constexpr double lr = 0.5;
    for (int groupSize : { 1, 2 }) {
        SCOPED_TRACE("ftpipe-async:" + std::to_string(groupSize));
        RunConfig c;
        c.schedule = parseScheduleSpec("ftpipe-async:" + std::to_string(groupSize), 2, 4);
        c.partition = evenCuts(graph, 2);
        ASSERT_EQ(c.partition.stageBegin(StageId(1)), 2U) << "stage 0 is the embedding and w0";
        c.memory = borderCheckpoints(graph, c.partition);
        c.optimizer.kind = "sgd";
        c.optimizer.lr = lr;
        c.optimizer.momentum = 0;
        c.optimizer.weightDecay = 0;
        c.seed = 3;
        TrainingRun run(graph, TokenData::fromTextFile(text), makeDevices("cpu:2", 0), c);
        const auto loss = run.step().loss;
        const auto want = handComputedAsync(generateSchedule(c.schedule), groupSize, lr, wte, w0, w1);
        const auto got = [&](const char* name) {
            for (auto id : run.runner().parameterIds())
                if (graph.tensor(id).name == name)
                    return asFloats(run.runner().parameterBytes(id));
            ADD_FAILURE() << "no parameter " << name;
            return std::vector<float> {};
        };
        EXPECT_LT(relativeL2To(got("wte"), want.wte), 1e-5);
        EXPECT_LT(relativeL2To(got("w0"), want.w0), 1e-5);
        EXPECT_LT(relativeL2To(got("w1"), want.w1), 1e-5);
        EXPECT_NEAR(loss, want.meanLoss, 1e-5 * want.meanLoss);
        // The sequence matters: one synchronous step over the mean of the four gradients lands
        // far from it (the check could not pass by accident).
        const auto sync = handComputedAsync(generateSchedule(parseScheduleSpec("1f1b", 2, 4)), 4, lr, wte, w0, w1);
        EXPECT_GT(relativeL2To(got("w0"), sync.w0), 1e-3);
    }
    std::filesystem::remove(text);
}
