// `pipestudio train`: trains the project's model on this machine's CPU, with per-step metrics and
// checkpoints written to the project.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "store/project_store.h"
#include "trainer.h"
#include "util/error.h"
#include "zoo/model_config.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <csignal>
#include <cstring>

namespace ps::app {
namespace {

    std::atomic<bool> g_interrupted { false };

    extern "C" void onInterrupt(int /*signal*/)
    {
        g_interrupted = true;
    }

    struct TrainCommandOptions
    {
        std::string project;
        std::string device = "cpu";
        std::int64_t steps = 200;
        std::int64_t microBatch = 0; // 0: the project's
        std::int64_t accumulate = 1;
        std::string data; // text file; empty: the default corpus
        std::string dataFormat = "text";
        std::int64_t vocab = 0;
        std::string optimizer = "adamw";
        double lr = 1e-3;
        double weightDecay = 0.01;
        double beta2 = 0.999;
        std::uint64_t seed = 0;
        int threads = 0;
        std::string memory;
        std::int64_t checkpointEvery = 0;
        std::int64_t warmup = 0;
        bool cosine = false;
        bool resume = false;
    };

    // The project's graph at the requested micro-batch (zoo models are rebuilt; imported graphs
    // keep theirs), with the newest checkpoint's values when resuming.
    Graph trainingGraph(const ProjectStore& store, const TrainCommandOptions& o, std::int64_t& resumedStep)
    {
        auto graph = store.loadGraph();
        if (o.microBatch > 0)
            graph = buildAtMicroBatch(graph, o.microBatch);
        resumedStep = 0;
        if (!o.resume)
            return graph;
        const auto checkpoint = store.latestCheckpoint();
        if (!checkpoint)
            throw Error("'" + o.project + "' has no checkpoint to resume from");
        for (const auto& [id, bytes] : checkpoint->tensors) {
            if (id.index() >= graph.tensorCount())
                throw Error("checkpoint " + std::to_string(checkpoint->id) + " does not fit the project's model");
            graph.setParameterValues(id, std::make_shared<const std::vector<std::byte>>(bytes));
        }
        resumedStep = checkpoint->step;
        return graph;
    }

    engine::TokenData trainingData(const TrainCommandOptions& o)
    {
        if (o.dataFormat == "random")
            return engine::TokenData::random(o.vocab > 0 ? o.vocab : 256, 1 << 20, o.seed);
        if (o.data.empty())
            return engine::TokenData::defaultCorpus();
        if (o.dataFormat == "text")
            return engine::TokenData::fromTextFile(o.data);
        if (o.dataFormat == "u16" || o.dataFormat == "u32")
            return engine::TokenData::fromTokenFile(
                o.data, o.dataFormat == "u16" ? 2 : 4, o.vocab > 0 ? o.vocab : 65536);
        throw Error("unknown --data-format '" + o.dataFormat + "' (text, u16, u32, random)");
    }

    int runTrain(const TrainCommandOptions& o)
    {
        if (o.device != "cpu")
            throw Error("device '" + o.device + "': this build trains on the CPU backend only (--device cpu)");
        auto store = ProjectStore::open(o.project);
        std::int64_t resumedStep = 0;
        auto graph = trainingGraph(store, o, resumedStep);
        engine::TrainOptions t;
        t.accumulation = o.accumulate;
        t.optimizer.kind = o.optimizer;
        t.optimizer.lr = o.lr;
        t.optimizer.weightDecay = o.weightDecay;
        t.optimizer.beta2 = o.beta2;
        t.warmupSteps = o.warmup;
        t.decaySteps = o.cosine ? o.steps : 0;
        t.seed = o.seed;
        t.threads = o.threads;
        t.capacityBytes = o.memory.empty() ? 0 : static_cast<std::int64_t>(parseBytes(o.memory));
        auto data = trainingData(o);
        const auto source = data.source();
        engine::Trainer trainer(std::move(graph), std::move(data), t);
        const nlohmann::json config { { "device", o.device }, { "steps", o.steps }, { "micro_batch", o.microBatch },
            { "accumulate", o.accumulate }, { "data", source }, { "optimizer", o.optimizer }, { "lr", o.lr },
            { "weight_decay", o.weightDecay }, { "beta2", o.beta2 }, { "warmup", o.warmup }, { "cosine", o.cosine },
            { "seed", o.seed }, { "threads", o.threads }, { "resumed_from_step", resumedStep } };
        const auto runId = store.beginRun(config.dump());
        fmt::print("Training {} on cpu: {} steps of {} tokens, data {}, run {}\n", o.project, o.steps,
            trainer.tokensPerStep(), source, runId);
        g_interrupted = false;
        const auto previous = std::signal(SIGINT, onInterrupt);
        std::int64_t step = resumedStep;
        try {
            for (std::int64_t i = 0; i < o.steps && !g_interrupted; ++i) {
                const auto r = trainer.step();
                step = resumedStep + r.step;
                fmt::print("step {:>5}  loss {:.4f}  lr {:.2e}  {:>8.0f} tokens/s  {:7.1f} ms  peak {:.1f} MiB\n", step,
                    r.loss, r.learningRate, r.tokensPerSecond, r.seconds * 1e3,
                    static_cast<double>(r.peakBytes) / (1024.0 * 1024.0));
                std::fflush(stdout);
                store.appendRunMetrics(runId, { { step, r.loss, r.seconds * 1e9, r.tokensPerSecond } });
                if (o.checkpointEvery > 0 && r.step % o.checkpointEvery == 0)
                    store.saveCheckpoint(runId, step, trainer.parameterBytes());
            }
        } catch (const std::exception& e) {
            std::signal(SIGINT, previous);
            store.endRun(runId, "failed", e.what());
            throw;
        }
        std::signal(SIGINT, previous);
        store.saveCheckpoint(runId, step, trainer.parameterBytes());
        store.endRun(runId, g_interrupted ? "interrupted" : "finished");
        fmt::print("{} at step {}; checkpoint saved to {} (run {})\n", g_interrupted ? "Interrupted" : "Finished", step,
            o.project, runId);
        return g_interrupted ? 130 : 0;
    }

} // namespace

void addTrainCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<TrainCommandOptions>();
    auto* cmd = app.add_subcommand("train", "Train the project's model on this machine (CPU backend)");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("--device", o->device, "cpu");
    cmd->add_option("--steps", o->steps, "Optimizer steps")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 40));
    cmd->add_option("--micro-batch", o->microBatch, "Samples per micro-batch (zoo models; default: the project's)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--accumulate", o->accumulate, "Micro-batches per optimizer step (gradient accumulation)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option(
        "--data", o->data, "Training text (bytes as tokens) or token file; default: /usr/share/common-licenses");
    cmd->add_option("--data-format", o->dataFormat, "text | u16 | u32 | random");
    cmd->add_option("--vocab", o->vocab, "Vocabulary of u16/u32/random data");
    cmd->add_option("--optimizer", o->optimizer, "adamw | sgd");
    cmd->add_option("--lr", o->lr, "Learning rate");
    cmd->add_option("--weight-decay", o->weightDecay, "Weight decay");
    cmd->add_option("--beta2", o->beta2, "AdamW's second-moment decay (0.99 suits small models)");
    cmd->add_option("--seed", o->seed, "Seed of initialisation, dropout and sampling");
    cmd->add_option("--threads", o->threads, "BLAS threads (0: OpenBLAS's default)");
    cmd->add_option(
        "--memory", o->memory, "Device memory budget, e.g. 2GiB (an allocation past it fails naming the node)");
    cmd->add_option(
        "--checkpoint-every", o->checkpointEvery, "Also checkpoint every N steps (always at the end and on Ctrl-C)");
    cmd->add_flag("--resume", o->resume, "Start from the project's newest checkpoint");
    cmd->add_option("--warmup", o->warmup, "Linear learning-rate warm-up steps");
    cmd->add_flag("--cosine", o->cosine, "Cosine decay to 10% of --lr over the run");
    cmd->callback([o, &action] { action = [o] { return runTrain(*o); }; });
}

} // namespace ps::app
