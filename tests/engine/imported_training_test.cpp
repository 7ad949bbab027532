// Imported models train: every model of the ONNX corpus (tests/data/make_onnx_corpus.py) gets a
// loss (`import --loss`: cross-entropy on a classifier's or a language model's logits, mse on a
// transformer's features), the engine takes optimizer steps on one fixed batch and the loss falls
// (gradients reach the parameters through every imported op); an imported GPT pipelined over two
// CPU devices gives the single-device losses.
#include "cuda/cuda_backend.h"
#include "cuda/cuda_probe.h"
#include "executor.h"
#include "graph/loss.h"
#include "onnx/onnx_import.h"
#include "onnx_corpus_support.h"
#include "optimizer.h"
#include "pipeline_support.h"
#include "runtime/training_run.h"
#include "trainer.h"
#include "zoo/model_config.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>

using namespace ps;
using namespace ps::engine;
using namespace ps::engine::testing;
namespace fs = std::filesystem;

namespace {

// Cross-entropy where the output has classes (a classifier's (B, classes), a GPT's logits), mse on
// features (encoders, decoders, nn.Transformer).
LossKind lossFor(const std::string& name, const Shape& output)
{
    if (name.starts_with("gpt") || output.size() == 2)
        return LossKind::CrossEntropy;
    return LossKind::MeanSquaredError;
}

Graph importWithLoss(const fs::path& dir, const nlohmann::json& e)
{
    auto imported = importOnnx(dir / e["file"].get<std::string>(), ps::testing::corpusImportOptions(e));
    const auto output = imported.graph.tensor(imported.graph.outputs().front()).shape;
    return attachLoss(std::move(imported.graph), { lossFor(e["name"].get<std::string>(), output), std::nullopt });
}

void setBatch(GraphExecutor& ex, const HostBatch& batch)
{
    const auto shapeOf = [&ex](const std::string& name) {
        for (const auto& t : ex.graph().tensors()) {
            if (t.kind == TensorKind::Input && t.name == name)
                return t.shape;
        }
        throw Error("no input " + name);
    };
    for (const auto& [name, values] : batch.inputs)
        ex.setInput(
            name, ex.backend().fromHost(ex.allocator(), shapeOf(name), DType::I64, std::as_bytes(std::span(values))));
    for (const auto& [name, values] : batch.floatInputs)
        ex.setInput(
            name, ex.backend().fromHost(ex.allocator(), shapeOf(name), DType::F32, std::as_bytes(std::span(values))));
}

// The losses of `steps` AdamW steps (lr 3e-3, no weight decay) on one generated batch. Vocabulary 2:
// within any embedding; a language model samples its windows from it.
std::vector<double> fixedBatchLosses(Graph graph, int steps)
{
    BatchSource source(graph, TokenData::random(2, 1 << 12, 3), 7);
    const auto batch = source.next();
    GraphExecutor ex(std::move(graph), ExecutorOptions { 3, 0, true });
    engine::OptimizerConfig config;
    config.lr = 3e-3;
    config.weightDecay = 0;
    engine::Optimizer optimizer(ex, config);
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
        ex.zeroGrad();
        setBatch(ex, batch);
        losses.push_back(ex.forward());
        ex.backward();
        ex.releaseActivations();
        optimizer.step(1.0F);
    }
    return losses;
}

// Every model of `dir`'s manifest, with the loss it names (cross-entropy on logits and classes, mse
// on features), lowers that loss in eight AdamW steps on one fixed batch; returns how many trained.
int manifestModelsLearn(const fs::path& dir)
{
    const auto manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
    constexpr int kFixedBatchSteps = 8;
    int trained = 0;
    for (const auto& e : manifest) {
        const auto file = e["file"].get<std::string>();
        SCOPED_TRACE(file);
        try {
            auto imported = importOnnx(dir / file);
            const auto loss = e["loss"] == "mse" ? LossKind::MeanSquaredError : LossKind::CrossEntropy;
            auto graph = attachLoss(std::move(imported.graph), { loss, std::nullopt });
            const auto losses = fixedBatchLosses(std::move(graph), kFixedBatchSteps);
            std::printf("%-32s %-4s %10.5f -> %10.5f\n", file.c_str(),
                loss == LossKind::MeanSquaredError ? "mse" : "ce", losses.front(), losses.back());
            for (double l : losses)
                EXPECT_TRUE(std::isfinite(l)) << "loss " << l;
            EXPECT_LT(losses.back(), losses.front()) << "the loss did not fall in " << kFixedBatchSteps << " steps";
            ++trained;
        } catch (const std::exception& ex) {
            ADD_FAILURE() << ex.what();
        }
    }
    return trained;
}

} // namespace

// The zoo's ResNet learns the same way (convolutions, batch norm on batch statistics, pooling).
TEST(ImportedTraining, ZooResNetLearnsAFixedBatch)
{
    auto c = zooPreset("resnet-tiny");
    c.microBatch = 8;
    const auto losses = fixedBatchLosses(buildZooModel(c), 8);
    for (double l : losses)
        EXPECT_TRUE(std::isfinite(l)) << "loss " << l;
    EXPECT_LT(losses.back(), 0.8 * losses.front());
}

TEST(ImportedTraining, EveryCorpusModelLearnsAFixedBatch)
{
    fs::path dir;
    const auto manifest = ps::testing::corpusManifest(dir);
    if (!manifest)
        GTEST_SKIP() << "no ONNX corpus (tests/data/make_onnx_corpus.py needs Debian's python3-torch)";
    constexpr int kSteps = 8;
    int trained = 0;
    std::printf("%-40s %-5s %12s %12s %9s\n", "model", "loss", "first", "last", "ms");
    for (const auto& e : *manifest) {
        if (e.contains("error"))
            continue;
        const auto stem = e["file"].get<std::string>();
        SCOPED_TRACE(stem);
        const auto start = std::chrono::steady_clock::now();
        try {
            auto graph = importWithLoss(dir, e);
            const bool crossEntropy =
                graph.node(graph.tensor(graph.outputs().front()).producer).op == OpType::CrossEntropy;
            const auto losses = fixedBatchLosses(std::move(graph), kSteps);
            const double ms =
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
            std::printf("%-40s %-5s %12.5f %12.5f %9.1f\n", stem.c_str(), crossEntropy ? "ce" : "mse", losses.front(),
                losses.back(), ms);
            for (double l : losses)
                EXPECT_TRUE(std::isfinite(l)) << stem << ": loss " << l;
            EXPECT_LT(losses.back(), losses.front()) << stem << ": the loss did not fall in " << kSteps << " steps";
            ++trained;
        } catch (const std::exception& ex) {
            ADD_FAILURE() << stem << ": " << ex.what();
        }
    }
    EXPECT_GE(trained, 50);
}

// torch 2.15's exports (tests/data/onnx_torch2: both exporters; transformers decoders, encoders,
// encoder-decoders, vision, speech and mixture of experts, plain modules) learn too: with the loss
// the manifest names (cross-entropy on logits and classes, mse on a base model's features), eight
// AdamW steps on one fixed batch lower it. Gradients reach the parameters through GatherND (the
// experts' weights), 1-D convolutions lowered to 2-D, and the attention forms each exporter writes.
TEST(ImportedTraining, Torch2ExportsLearnAFixedBatch)
{
    EXPECT_GE(manifestModelsLearn(fs::path(PS_SOURCE_DIR) / "tests/data/onnx_torch2"), 27);
}

// So do the Attention and RotaryEmbedding operators' written-out forms (tests/data/onnx_ops23: 3-D
// and grouped heads, a past cache, softcap, masks, rotary tables at position ids, interleaved and
// partial rotations; a LLaMA block at opset 23; ConvTransposes with an output_shape or auto_pad).
TEST(ImportedTraining, AttentionAndRotaryEmbeddingOperatorsLearnAFixedBatch)
{
    EXPECT_GE(manifestModelsLearn(fs::path(PS_SOURCE_DIR) / "tests/data/onnx_ops23"), 8);
}

// An imported GPT (token input named 'input', not 'input_ids') with `--loss cross-entropy` is a
// language model: it samples token windows, and two CPU devices running GPipe over it give the
// single-device losses of the same micro-batches.
TEST(ImportedTraining, ImportedGptPipelinesLikeOneDevice)
{
    fs::path dir;
    const auto manifest = ps::testing::corpusManifest(dir);
    if (!manifest)
        GTEST_SKIP() << "no ONNX corpus (tests/data/make_onnx_corpus.py needs Debian's python3-torch)";
    const nlohmann::json* gpt = nullptr;
    for (const auto& e : *manifest) {
        if (e.value("name", "") == "gpt_arange" && e.value("opset", 0) == 17 && !e.contains("error"))
            gpt = &e;
    }
    ASSERT_NE(gpt, nullptr) << "the corpus has no gpt_arange at opset 17";
    const auto graph = importWithLoss(dir, *gpt);
    const auto data = [] { return TokenData::random(16, 1 << 14, 11); };
    constexpr int kMicroBatches = 2;
    TrainOptions o;
    o.accumulation = kMicroBatches;
    o.optimizer.kind = "sgd";
    o.optimizer.lr = 0.05;
    o.seed = 5;
    Trainer trainer(graph, data(), o);
    EXPECT_TRUE(trainer.tokensPerStep() > 0);
    RunConfig c;
    c.schedule = parseScheduleSpec("gpipe", 2, kMicroBatches);
    c.partition = evenCuts(graph, 2);
    c.optimizer.kind = "sgd";
    c.optimizer.lr = 0.05;
    c.seed = 5;
    TrainingRun run(graph, data(), makeDevices("cpu:2", 0), c);
    ASSERT_TRUE(run.batchSource().samplesTokens()) << run.batchSource().describe();
    for (int s = 0; s < 3; ++s) {
        const double single = trainer.step().loss;
        const double piped = run.step().loss;
        EXPECT_NEAR(single, piped, 1e-5 * std::max(1.0, std::abs(single))) << "step " << s + 1;
    }
}

// The CUDA backend on users' models (issue P14's GPU checks): every opset-17 corpus model whose
// file is here (tests/gpu/make_bundle.sh ships the smaller ones) and whose ops all have CUDA
// kernels takes one forward and backward on cuda:0 and on the CPU, same weights and batch: the
// losses agree to 1e-4 and every parameter gradient to 1e-3 (relative L2, on the model's scale
// where a gradient is zero in exact arithmetic; long chains of fp32 convolutions in another
// summation order). Models with an op the GPU lacks are listed, not run.
TEST(GpuSelfTest, CorpusModelsMatchTheCpuBackend)
{
    const auto probe = engine::cuda::probeGpus();
    if (probe.devices.empty())
        GTEST_SKIP() << "no CUDA device: " << probe.status;
    fs::path dir;
    const auto manifest = ps::testing::corpusManifest(dir);
    if (!manifest)
        GTEST_SKIP() << "no ONNX corpus in PS_ONNX_CORPUS (tests/gpu/make_bundle.sh ships one)";
    const auto ops = engine::cuda::cudaKernelOps();
    int compared = 0;
    for (const auto& e : *manifest) {
        if (e.contains("error") || e.value("opset", 0) != 17 || !fs::exists(dir / e["file"].get<std::string>()))
            continue;
        const auto stem = e["file"].get<std::string>();
        SCOPED_TRACE(stem);
        try {
            auto graph = importWithLoss(dir, e);
            std::string missing;
            for (const auto& node : graph.nodes()) {
                if (std::find(ops.begin(), ops.end(), node.op) == ops.end())
                    missing = std::string(toString(node.op));
            }
            if (!missing.empty()) {
                std::cout << "[ NOTE ] " << stem << ": not run, no CUDA kernel for " << missing << "\n";
                continue;
            }
            BatchSource source(graph, TokenData::random(2, 1 << 12, 3), 7);
            const auto batch = source.next();
            GraphExecutor cpu(graph, ExecutorOptions { 3, 0, true });
            GraphExecutor gpu(std::move(graph), ExecutorOptions { 3, 0, true }, engine::cuda::cudaBackend(0));
            setBatch(cpu, batch);
            setBatch(gpu, batch);
            const double want = cpu.forward();
            const double got = gpu.forward();
            EXPECT_NEAR(got, want, 1e-4 * std::max(1.0, std::abs(want))) << "loss";
            cpu.backward();
            gpu.backward();
            // Relative L2 per parameter, on the model's scale where a gradient is mathematically
            // zero (a key bias under softmax, a Linear bias before BatchNorm): there both backends
            // return rounding noise, so the difference is held against sqrt(n) times the RMS
            // element of the whole model's gradient instead of the tensor's own norm.
            std::vector<std::pair<double, double>> diffAndNorm; // squared, per parameter
            std::vector<std::size_t> sizes;
            double totalSquares = 0;
            std::size_t totalElements = 0;
            for (const auto id : cpu.parameterIds()) {
                const auto a = asFloats(gpu.backend().toHost(gpu.gradient(id)));
                const auto b = asFloats(cpu.backend().toHost(cpu.gradient(id)));
                double diff = 0;
                double norm = 0;
                for (std::size_t i = 0; i < a.size(); ++i) {
                    diff += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
                    norm += double(b[i]) * double(b[i]);
                }
                diffAndNorm.emplace_back(diff, norm);
                sizes.push_back(b.size());
                totalSquares += norm;
                totalElements += b.size();
            }
            const double rms = std::sqrt(totalSquares / double(std::max<std::size_t>(1, totalElements)));
            double worst = 0;
            std::string worstName;
            for (std::size_t p = 0; p < sizes.size(); ++p) {
                const double scale = std::max(std::sqrt(diffAndNorm[p].second), std::sqrt(double(sizes[p])) * rms);
                const auto rel = std::sqrt(diffAndNorm[p].first) / std::max(1e-30, scale);
                if (rel > worst) {
                    worst = rel;
                    worstName = cpu.graph().tensor(cpu.parameterIds()[p]).name;
                }
            }
            EXPECT_LT(worst, 1e-3) << "gradient of " << worstName;
            std::cout << "[ NOTE ] " << stem << ": loss cpu " << want << " cuda " << got
                      << ", largest relative gradient difference " << worst << " (" << worstName << ")\n";
            ++compared;
        } catch (const std::exception& ex) {
            ADD_FAILURE() << stem << ": " << ex.what();
        }
    }
    EXPECT_GE(compared, 20) << "too few corpus models here to call the check run";
}
