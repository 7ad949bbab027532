// `pipestudio train`: trains the project's model on this machine, on one CPU device or as a
// pipeline over several (the plan's stages, schedule and memory actions executed by the engine),
// with per-step metrics, per-device peak memory, the measured timeline and checkpoints written to
// the project; `--json` prints one JSON object per line for the GUI and scripts.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/train_chunks.h"
#include "cli/train_link.h"
#include "cli/validators.h"
#include "kernel_timeline.h"
#include "runtime/training_job.h"
#include "store/project_store.h"
#include "util/error.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

namespace ps::app {
namespace {

    std::atomic<bool> g_interrupted { false };

    // The measured timeline's clock (`--timeline`), and in `why` what it is: on GPUs, each action's
    // kernels in a CUPTI trace (auto: where CUPTI loads, else the device synchronized after each
    // action); on CPUs the host clock around each action, whose calls return when done.
    std::unique_ptr<profiler::KernelTimelineTracer> kernelTimeline(
        const std::string& mode, const std::string& devices, std::string& why)
    {
        if (!engine::parseDeviceSpec(devices).cuda) {
            if (mode == "cupti")
                throw Error("--timeline cupti traces GPU kernels; " + devices + " runs on the CPU");
            why = "host clock around each action";
            return nullptr;
        }
        if (mode != "synchronized") {
            try {
                why = "kernels of each action (CUPTI)";
                return profiler::makeCuptiKernelTimeline();
            } catch (const Error& e) {
                if (mode == "cupti")
                    throw;
                why = "device synchronized after each action (no kernel trace: " + std::string(e.what()) + ")";
                return nullptr;
            }
        }
        why = "device synchronized after each action";
        return nullptr;
    }

    extern "C" void onInterrupt(int /*signal*/)
    {
        g_interrupted = true;
    }

    // The command's options: the job's own, bound directly, and what only the command reads.
    struct TrainCommandOptions
    {
        std::string project;
        engine::TrainingJobOptions job; // devices, schedule, data, optimizer, ... (train's defaults)
        std::string device = "cpu"; // legacy single-device form of --devices
        std::string timeline = "auto"; // GPUs: auto | cupti | synchronized
        std::string memory; // --device-memory as written
        bool json = false;
        LinkOptions link; // the emulated link and kfkb:auto's pace
        ChunkCliOptions chunks; // PatrickStar chunk managers
    };

    // The job's options, completed from the command's own forms of them.
    engine::TrainingJobOptions jobOptions(const TrainCommandOptions& o)
    {
        auto j = o.job;
        if (j.devices.empty())
            j.devices = o.device;
        j.memoryText = o.memory;
        j.deviceMemoryBytes = o.memory.empty() ? 0 : static_cast<std::int64_t>(parseBytes(o.memory, "--device-memory"));
        j.link = linkEmulation(o.link);
        j.adaptEvery = o.link.adaptEvery;
        j.chunks = chunkOptions(o.chunks);
        return j;
    }

    nlohmann::json stepJson(const engine::RunStepResult& r)
    {
        std::vector<double> busyMs;
        for (double ns : r.deviceBusyNs)
            busyMs.push_back(ns / 1e6);
        return { { "step", r.step }, { "loss", r.loss }, { "lr", r.learningRate }, { "step_ms", r.seconds * 1e3 },
            { "tokens_per_s", r.tokensPerSecond }, { "peak_bytes", r.devicePeakBytes }, { "busy_ms", busyMs },
            { "traced_actions", r.tracedActions } };
    }

    // One step's line: JSON (with the chunk counts where chunks run) or text.
    void printStep(const engine::RunStepResult& r, const std::string& unit, const engine::TrainingRun& run, bool json)
    {
        if (json) {
            auto line = stepJson(r);
            if (!r.deviceChunks.empty())
                line["chunks"] = chunksJson(r);
            fmt::print("{}\n", line.dump());
            return;
        }
        std::int64_t peak = 0;
        for (auto b : r.devicePeakBytes)
            peak = std::max(peak, b);
        fmt::print("step {:>5}  loss {:.4f}  lr {:.2e}  {:>8.0f} {}/s  {:7.1f} ms  peak {:.1f} MiB\n", r.step, r.loss,
            r.learningRate, r.tokensPerSecond, unit, r.seconds * 1e3, static_cast<double>(peak) / (1024.0 * 1024.0));
        fmt::print("{}", chunksText(r, run.devices()));
    }

    // The run's first lines: its id and recorded options (JSON) or what it trains, how and where.
    void printRunStart(const TrainCommandOptions& o, engine::TrainingJob& job)
    {
        if (o.json) {
            fmt::print("{}\n", nlohmann::json { { "run", job.runId() }, { "config", job.config() } }.dump());
            return;
        }
        auto& run = job.run();
        fmt::print("Training {}: {} steps of {} {}, data {}, run {}\n  {}\n", o.project, o.job.steps,
            run.tokensPerStep(), job.throughputUnit(), job.config()["data"].get<std::string>(), job.runId(),
            job.scheduleLine());
        fmt::print("  timeline: {}\n", job.config()["timeline"].get<std::string>());
        if (o.job.resume)
            fmt::print("  resumed from step {}{}\n", job.resumedStep(),
                job.resumedMoments() ? " with the optimizer's state"
                                     : " (parameters only: the optimizer starts fresh)");
    }

    // The run's last line: how it ended, at which step, where its checkpoint is.
    void printRunEnd(const TrainCommandOptions& o, std::int64_t runId, const engine::TrainingOutcome& outcome)
    {
        if (o.json)
            fmt::print("{}\n",
                nlohmann::json { { "summary", true }, { "run", runId },
                    { "status", outcome.interrupted ? "interrupted" : "finished" }, { "step", outcome.step },
                    { "loss", outcome.loss }, { "tokens_per_s", outcome.tokensPerSecond } }
                    .dump());
        else
            fmt::print("{} at step {}; checkpoint saved to {} (run {})\n",
                outcome.interrupted ? "Interrupted" : "Finished", outcome.step, o.project, runId);
    }

    // Each of kfkb:auto's decisions after a step (switched or not): a JSON line ("group_size",
    // "micro_batch") or a text line with the predicted iteration of each candidate.
    void printAdaptation(const engine::GroupAdaptation& a, bool json)
    {
        const auto* d = &a.decision;
        nlohmann::ordered_json predicted = nlohmann::ordered_json::array();
        std::string text;
        for (const auto& [c, ns] : d->predictedIterationNs) {
            predicted.push_back({ { "k", c.k }, { "micro_batch", c.microBatch }, { "micro_batches", c.microBatches },
                { "ms", ns / 1e6 } });
            text += fmt::format(" {}:{:.0f}", c.label(), ns / 1e6);
        }
        if (json)
            fmt::print("{}\n",
                nlohmann::ordered_json { { "group_size", d->chosen.k }, { "micro_batch", d->chosen.microBatch },
                    { "micro_batches", d->chosen.microBatches }, { "previous_group_size", a.before.k },
                    { "previous_micro_batch", a.before.microBatch }, { "after_step", d->step },
                    { "measured_bandwidth", d->measuredBandwidth }, { "predicted_iteration_ms", predicted } }
                    .dump());
        else
            fmt::print("  {} -> {} (M {} -> {}) after step {}: links measured at {:.3g} MB/s (moving average); "
                       "predicted ms:{}\n",
                a.before.label(), d->chosen.label(), a.before.microBatches, d->chosen.microBatches, d->step,
                d->measuredBandwidth / 1e6, text);
    }

    // Ctrl-C, and SIGTERM (logout, shutdown, the GUI's Stop), finish the step under way and
    // checkpoint; the previous handlers come back however the steps end.
    class InterruptScope
    {
    public:
        InterruptScope()
            : m_int((g_interrupted = false, std::signal(SIGINT, onInterrupt))) // cleared before a signal can set it
            , m_term(std::signal(SIGTERM, onInterrupt))
        {
        }
        ~InterruptScope()
        {
            std::signal(SIGINT, m_int);
            std::signal(SIGTERM, m_term);
        }
        InterruptScope(const InterruptScope&) = delete;
        InterruptScope& operator=(const InterruptScope&) = delete;

    private:
        void (*m_int)(int);
        void (*m_term)(int);
    };

    int runTrain(const TrainCommandOptions& o)
    {
        auto store = ProjectStore::open(o.project);
        auto options = jobOptions(o);
        const auto timeline = kernelTimeline(o.timeline, options.devices, options.timeline);
        if (engine::parseDeviceSpec(options.devices).cuda)
            options.timeline += "; timed on the steps whose timeline is stored (--trace-iterations, --trace-every), "
                                "the others run untimed";
        options.tracer = timeline.get();
        // A run whose process was killed is "interrupted" before this one begins (and resumes it),
        // said here so that it is said even when this run cannot start.
        for (const auto id : store.markStaleRunsInterrupted()) {
            if (!o.json)
                fmt::print(
                    "Run {} of {} ended without finishing (its process is gone): marked interrupted\n", id, o.project);
        }
        engine::TrainingJob job(store, std::move(options));
        for (const auto& w : job.warnings())
            fmt::print(stderr, "warning: {}\n", w);
        printRunStart(o, job);
        std::fflush(stdout);
        engine::TrainingOutcome outcome;
        try {
            const InterruptScope interrupts;
            outcome = job.runSteps(
                [&](const engine::RunStepResult& r) {
                    printStep(r, job.throughputUnit(), job.run(), o.json);
                    if (timeline)
                        for (const auto& w : timeline->takeWarnings())
                            fmt::print(stderr, "warning: step {}: {}\n", r.step, w);
                    std::fflush(stdout);
                },
                [&](const engine::GroupAdaptation& a) { printAdaptation(a, o.json); }, &g_interrupted);
        } catch (const std::exception& e) {
            if (o.json) { // a parent reading the lines learns why, then the usual error and exit code
                fmt::print("{}\n", nlohmann::json { { "error", e.what() }, { "run", job.runId() } }.dump());
                std::fflush(stdout);
            }
            throw;
        }
        printRunEnd(o, job.runId(), outcome);
        if (!job.onGpu() && !o.json)
            noteBlasPin();
        return outcome.interrupted ? 130 : 0;
    }

    // Training data (text, token files or random tokens) and the optimizer's settings.
    void addDataAndOptimizerOptions(CLI::App* cmd, TrainCommandOptions& o)
    {
        cmd->add_option("--data", o.job.data.path,
            "Training text (bytes as tokens) or token file; default: /usr/share/common-licenses");
        cmd->add_option("--data-format", o.job.data.format, "text | u16 | u32 | random")
            ->check(CLI::IsMember(std::vector<std::string> { "text", "u16", "u32", "random" }));
        cmd->add_option(
               "--vocab", o.job.data.vocab, "Vocabulary of u16/u32/random data (random: the model's by default)")
            ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 32));
        cmd->add_option("--optimizer", o.job.optimizer.kind, "adamw | sgd")
            ->check(CLI::IsMember(std::vector<std::string> { "adamw", "sgd" }));
        cmd->add_option("--lr", o.job.optimizer.lr, "Learning rate")->check(positiveUpTo(1e3));
        cmd->add_option("--weight-decay", o.job.optimizer.weightDecay, "Weight decay")->check(numberIn(0, 1e3));
        cmd->add_option("--beta2", o.job.optimizer.beta2, "AdamW's second-moment decay (0.99 suits small models)")
            ->check(numberIn(0, 0.999999999));
        cmd->add_option("--seed", o.job.seed, "Seed of initialisation, dropout and sampling");
    }

} // namespace

void addTrainCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<TrainCommandOptions>();
    o->job.devices.clear(); // --devices, else --device
    auto* cmd = app.add_subcommand("train", "Train the project's model on this machine: one CPU device or a pipeline");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("--devices", o->job.devices,
        "cpu (one device), cpu:N (N devices sharing the cores), or GPUs with the CUDA backend (ran on one H200 and one "
        "H100; "
        "several GPUs not yet): cuda:G, cuda:0,cuda:1, cuda:GxK (GPU G as K stage devices)");
    cmd->add_option("--device", o->device, "Same as --devices (cpu)");
    cmd->add_option("--precision", o->job.precision,
        "fp32 (default); on GPUs tf32 (GEMM inputs rounded to TF32) or bf16 (GEMM inputs cast to bf16, as "
        "torch.autocast does); fp32 accumulation, values and master weights in every mode");
    cmd->add_option("--timeline", o->timeline,
           "GPUs: how actions are timed: auto (default: the kernels each launched, from a CUPTI trace, where CUPTI "
           "loads; else synchronized) | cupti | synchronized (the device waited for after each action)")
        ->check(CLI::IsMember(std::vector<std::string> { "auto", "cupti", "synchronized" }));
    cmd->add_option("--stages", o->job.stages, "Pipeline stages (default: one per device)")->check(CLI::Range(1, 4096));
    cmd->add_option("--schedule", o->job.schedule,
        "gpipe | 1f1b | kfkb:K | kfkb:auto (Ada-Grouper: k, and with --device-memory the micro-batch size, "
        "chosen from the measured transfers) | interleaved:V | zb-h1 | pipedream | ftpipe-async[:A]");
    cmd->add_option("--micro-batches", o->job.microBatches,
           "Micro-batches per step (pipeline; on one stage: gradient accumulation, as --accumulate)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--plan", o->job.plan, "A stored plan's id, or 'best': its cuts, schedule and memory actions")
        ->check(CLI::Validator(
            [](const std::string& text) {
                const bool id = !text.empty() && text.size() < 19
                    && std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
                return id || text == "best" ? std::string() : "'" + text + "' is neither a plan id nor 'best'";
            },
            "ID|best"));
    cmd->add_option("--algo", o->job.algorithm, "Planner for the cuts when no --plan is given (default dawnpiper)");
    cmd->add_option("--steps", o->job.steps, "Optimizer steps")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 40));
    cmd->add_option("--micro-batch", o->job.microBatch, "Samples per micro-batch (zoo models; default: the project's)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--accumulate", o->job.accumulate, "Micro-batches per optimizer step (gradient accumulation)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    addDataAndOptimizerOptions(cmd, *o);
    cmd->add_option("--device-memory,--memory", o->memory,
        "Memory capacity of each device, e.g. 512MiB (an allocation past it fails naming device, stage and node)");
    cmd->add_option("--checkpoint-every", o->job.checkpointEvery,
           "Also checkpoint every N steps (always at the end and on Ctrl-C)")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->add_flag(
        "--resume", o->job.resume, "Continue from the project's newest checkpoint (parameters, optimizer, step)");
    cmd->add_option("--warmup", o->job.warmup, "Linear learning-rate warm-up steps")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->add_flag("--cosine", o->job.cosine, "Cosine decay to 10% of --lr over the run");
    cmd->add_flag("--json", o->json,
        "One JSON object per line: the run, each step, a final summary (or {\"error\": ...} when a step fails)");
    addLinkOptions(cmd, o->link);
    addChunkOptions(cmd, o->chunks);
    cmd->add_option("--trace-iterations", o->job.traceIterations,
           "Store the measured timeline of the first N steps (on GPUs only these steps and --trace-every's are timed)")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->add_option("--trace-every", o->job.traceEvery, "... and of every Nth step after them (0: never)")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->callback([o, &action] { action = [o] { return runTrain(*o); }; });

    addTraceCommand(app, action);
}

} // namespace ps::app
