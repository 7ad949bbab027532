// Every op family through the stage executor, against the whole graph on one executor.
#include "graph/op_cost.h"
#include "onnx/onnx_import.h"
#include "pipeline_support.h"
#include "plan/partition.h"
#include "runtime/training_run.h"
#include "trainer.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;

// The runtime releases after forward what op_cost does not list as saved, swaps and recomputes
// storages, and feeds graph inputs per stage; each backward kernel must then read only what it
// kept. One SGD step of a 2-stage 1F1B pipeline (keep-all, and swap + recompute) is compared with
// the whole graph on one executor for the zoo families (GPT-2, BERT, T5, MLP) and, where the
// fixtures exist, PyTorch's ONNX exports (transformer layers, ResNet-18) with a mean-square loss.

namespace {

std::int64_t indexBound(const Graph& g, TensorId input)
{
    std::int64_t bound = 0;
    for (const auto& node : g.nodes()) {
        std::int64_t b = 0;
        if (node.op == OpType::Embedding && node.inputs[0] == input)
            b = g.tensor(node.inputs[1]).shape.front();
        if (node.op == OpType::CrossEntropy && node.inputs.size() > 1 && node.inputs[1] == input)
            b = g.tensor(node.inputs[0]).shape.back();
        if (b > 0)
            bound = bound == 0 ? b : std::min(bound, b);
    }
    return bound == 0 ? 2 : bound;
}

std::vector<HostBatch> randomBatches(const Graph& g, int microBatches)
{
    std::mt19937_64 rng(17);
    std::normal_distribution<float> normal(0.0F, 1.0F);
    std::vector<HostBatch> batches(static_cast<std::size_t>(microBatches));
    for (auto& b : batches) {
        for (const auto& t : g.tensors()) {
            if (t.kind != TensorKind::Input)
                continue;
            const auto n = static_cast<std::size_t>(numElements(t.shape));
            if (t.dtype == DType::I64) {
                std::vector<std::int64_t> v(n);
                const auto bound = static_cast<std::uint64_t>(indexBound(g, t.id));
                for (auto& x : v)
                    x = static_cast<std::int64_t>(rng() % bound);
                b.inputs.emplace_back(t.name, std::move(v));
            } else {
                std::vector<float> v(n);
                const bool mask = t.name.find("mask") != std::string::npos;
                for (std::size_t i = 0; i < n; ++i)
                    v[i] = mask ? (i % 5 == 4 ? 0.0F : 1.0F) : normal(rng);
                b.floatInputs.emplace_back(t.name, std::move(v));
            }
        }
    }
    return batches;
}

using ParamValues = std::map<std::uint32_t, std::vector<float>>;

StageOptimizerConfig plainSgd()
{
    StageOptimizerConfig o;
    o.kind = "sgd";
    o.lr = 0.5;
    o.momentum = 0;
    o.weightDecay = 0;
    return o;
}

// Initial parameters, the per-micro-batch losses and the parameters after one step on one executor.
struct WholeGraph
{
    ParamValues initial, updated;
    std::vector<double> losses;
};

WholeGraph wholeGraphStep(const Graph& g, const std::vector<HostBatch>& batches)
{
    GraphExecutor ex(g, ExecutorOptions { 5, 0, true });
    const auto sgd = plainSgd();
    engine::Optimizer opt(
        ex, OptimizerConfig { sgd.kind, sgd.lr, sgd.beta1, sgd.beta2, sgd.eps, sgd.weightDecay, sgd.momentum });
    WholeGraph out;
    for (auto id : ex.parameterIds())
        out.initial[id.value] = asFloats(ex.backend().toHost(ex.parameter(id)));
    for (const auto& b : batches) {
        const auto shapeOf = [&](const std::string& name) {
            for (const auto& t : g.tensors()) {
                if (t.kind == TensorKind::Input && t.name == name)
                    return t.shape;
            }
            throw Error("no input " + name);
        };
        for (const auto& [name, v] : b.inputs)
            ex.setInput(
                name, ex.backend().fromHost(ex.allocator(), shapeOf(name), DType::I64, std::as_bytes(std::span(v))));
        for (const auto& [name, v] : b.floatInputs)
            ex.setInput(
                name, ex.backend().fromHost(ex.allocator(), shapeOf(name), DType::F32, std::as_bytes(std::span(v))));
        out.losses.push_back(ex.forward());
        ex.backward();
        ex.releaseActivations();
    }
    opt.step(1.0F / static_cast<float>(batches.size()));
    for (auto id : ex.parameterIds())
        out.updated[id.value] = asFloats(ex.backend().toHost(ex.parameter(id)));
    return out;
}

// Compares the pipeline's update (its parameters minus the initial ones) with the whole graph's,
// per parameter by relative L2 norm; a kernel that read a released value throws instead.
void expectSameStep(const Graph& g, const std::vector<StageMemoryPlan>& memory, const std::string& what)
{
    const int M = 3;
    const auto batches = randomBatches(g, M);
    const auto ref = wholeGraphStep(g, batches);
    RunConfig config;
    config.schedule = parseScheduleSpec("1f1b", 2, M);
    config.partition = evenCuts(g, 2);
    config.memory = memory;
    auto devices = makeDevices("cpu:2", 0);
    PipelineRunner runner(g, PipelineSpec { config.partition, runtimeSchedule(config), memory }, devices,
        RunnerOptions { 5, plainSgd(), false, {}, {} });
    for (auto id : runner.parameterIds())
        runner.setParameter(id, std::as_bytes(std::span(ref.initial.at(id.value))));
    const auto result = runner.run(batches, plainSgd().lr, 0);
    for (int m = 0; m < M; ++m)
        EXPECT_NEAR(result.microBatchLosses[static_cast<std::size_t>(m)], ref.losses[static_cast<std::size_t>(m)],
            1e-5 * std::max(1.0, std::abs(ref.losses[static_cast<std::size_t>(m)])))
            << what << " micro-batch " << m;
    double worst = 0;
    std::string worstName;
    int compared = 0;
    for (auto id : runner.parameterIds()) {
        const auto got = asFloats(runner.parameterBytes(id));
        const auto& p0 = ref.initial.at(id.value);
        const auto& p1 = ref.updated.at(id.value);
        double diff = 0;
        double norm = 0;
        for (std::size_t i = 0; i < p0.size(); ++i) {
            const double want = double(p1[i]) - double(p0[i]);
            const double have = double(got[i]) - double(p0[i]);
            diff += (want - have) * (want - have);
            norm += want * want;
        }
        if (norm < 1e-20)
            continue; // no gradient reaches it (GPT's key bias under softmax is rounding only)
        const double rel = std::sqrt(diff / norm);
        ++compared;
        if (rel >= worst) {
            worst = rel;
            worstName = g.tensor(id).name;
        }
    }
    std::cout << "[ NOTE ] " << what << ": " << compared << " of " << runner.parameterIds().size()
              << " parameters updated, largest relative update difference " << worst << " (" << worstName << ")\n";
    EXPECT_GT(compared, 0) << what;
    EXPECT_LT(worst, 1e-3) << what << ": " << worstName;
}

void expectEveryPlanMatches(const Graph& g, const std::string& what)
{
    expectSameStep(g, {}, what + ", keep everything");
    const auto plans = swapAndRecompute(g, evenCuts(g, 2));
    ASSERT_FALSE(plans[0].recomputedTensors.empty()) << what;
    expectSameStep(g, plans, what + ", swap and recompute");
}

ModelConfig small(const std::string& preset)
{
    auto c = zooPreset(preset);
    c.layers = 2;
    c.decoderLayers = c.family == ModelFamily::T5 ? 2 : 0;
    c.hidden = 64;
    c.heads = 4;
    c.headDim = 0;
    c.ffn = 0;
    c.seq = 16;
    c.decoderSeq = 0;
    c.vocab = c.family == ModelFamily::Mlp ? 10 : 300;
    c.maxPositions = c.family == ModelFamily::Mlp ? 0 : 32;
    c.relativeBuckets = 8;
    c.microBatch = 2;
    c.dropout = 0;
    return c;
}

} // namespace

TEST(PipelineOps, ZooFamiliesMatchTheWholeGraph)
{
    for (const auto* preset : { "gpt2-small", "bert-base", "t5-small", "mlp" })
        expectEveryPlanMatches(buildZooModel(small(preset)), preset);
    // The zoo's CNN at its CPU size (depth 18, 8 wide, 32-pixel images), batch norm on batch
    // statistics in every stage.
    auto resnet = zooPreset("resnet-tiny");
    resnet.microBatch = 2;
    expectEveryPlanMatches(buildZooModel(resnet), "resnet-tiny");
    // AmoebaNet-D's cells: several states concatenated, factorized reductions (a cropping Pad),
    // max and average pooling beside 1x7 and 7x1 convolutions, and states read two cells later.
    auto amoeba = zooPreset("amoebanet-tiny");
    amoeba.microBatch = 2;
    expectEveryPlanMatches(buildZooModel(amoeba), "amoebanet-tiny");
}

TEST(PipelineOps, OnnxExportsMatchTheWholeGraph)
{
    const char* dir = std::getenv("PS_ONNX_FIXTURES");
    if (!dir || !std::filesystem::exists(std::filesystem::path(dir) / "manifest.json"))
        GTEST_SKIP() << "no ONNX fixtures (tests/data/make_onnx_fixtures.py needs Debian's python3-torch)";
    const auto manifest = nlohmann::json::parse(std::ifstream(std::filesystem::path(dir) / "manifest.json"));
    int checked = 0;
    for (const auto& e : manifest) {
        const auto name = e["name"].get<std::string>();
        if (name == "vit_b_16" || e["opset"].get<int>() != 17)
            continue;
        const auto input = e["input_shapes"][0];
        OnnxImportOptions o;
        o.batch = input[0].get<std::int64_t>();
        if (input.size() > 2) // a dynamic "seq" axis (fixed ones keep their exported size)
            o.dims["seq"] = input[1].get<std::int64_t>();
        auto g = importOnnx(std::filesystem::path(dir) / e["file"].get<std::string>(), o).graph;
        // loss = mean(output^2): a scalar to backpropagate from
        const auto out = g.outputs().front();
        Tensor sqTensor;
        sqTensor.name = "loss.square";
        sqTensor.shape = g.tensor(out).shape;
        const auto sq = g.addTensor(sqTensor);
        Tensor lossTensor;
        lossTensor.name = "loss";
        const auto loss = g.addTensor(lossTensor);
        Node square;
        square.name = "loss.square";
        square.op = OpType::Mul;
        square.inputs = { out, out };
        square.outputs = { sq };
        g.addNode(square);
        Node mean;
        mean.name = "loss.mean";
        mean.op = OpType::ReduceMean;
        mean.attrs["keepdims"] = std::int64_t(0);
        mean.inputs = { sq };
        mean.outputs = { loss };
        g.addNode(mean);
        g.setOutputs({ loss });
        expectEveryPlanMatches(g, name);
        ++checked;
    }
    EXPECT_EQ(checked, 4);
}
