// `pipestudio train`: trains the project's model on this machine, on one CPU device or as a
// pipeline over several (the plan's stages, schedule and memory actions executed by the engine),
// with per-step metrics, per-device peak memory, the measured timeline and checkpoints written to
// the project; `--json` prints one JSON object per line for the GUI and scripts.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cli/train_chunks.h"
#include "cli/train_link.h"
#include "cli/validators.h"
#include "cluster/cluster.h"
#include "graph/graph_summary.h"
#include "kernel_timeline.h"
#include "plan/planner.h"
#include "runtime/run_prediction.h"
#include "runtime/training_run.h"
#include "store/project_store.h"
#include "util/error.h"
#include "zoo/model_config.h"

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

    struct TrainCommandOptions
    {
        std::string project;
        std::string device = "cpu"; // legacy single-device form
        std::string devices; // cpu, cpu:N, cuda:...
        std::string precision = "fp32"; // fp32, or tf32 on GPUs
        std::string timeline = "auto"; // GPUs: auto | cupti | synchronized
        int stages = 0; // 0: one per device
        std::string schedule = "1f1b";
        std::int64_t microBatches = 0; // 0: --accumulate
        std::string plan; // stored plan id or "best"
        std::string algorithm = "dawnpiper";
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
        std::string memory;
        std::int64_t checkpointEvery = 0;
        std::int64_t warmup = 0;
        bool cosine = false;
        bool resume = false;
        bool json = false;
        std::int64_t traceIterations = 3;
        std::int64_t traceEvery = 50;
        LinkOptions link; // the emulated link and kfkb:auto's controller
        ChunkCliOptions chunks; // PatrickStar chunk managers
    };

    // The project's graph at the requested micro-batch (zoo models are rebuilt; imported graphs
    // keep theirs).
    Graph trainingGraph(const ProjectStore& store, const TrainCommandOptions& o)
    {
        auto graph = store.loadGraph();
        if (o.microBatch > 0)
            graph = buildAtMicroBatch(graph, o.microBatch);
        return graph;
    }

    // Random tokens come from the model's own vocabulary unless --vocab says otherwise.
    engine::TokenData trainingData(const TrainCommandOptions& o, const Graph& graph)
    {
        if (o.dataFormat == "random") {
            const auto modelVocab = engine::tokenVocabulary(graph);
            return engine::TokenData::random(o.vocab > 0 ? o.vocab
                    : modelVocab > 0                     ? modelVocab
                                                         : 256,
                1 << 20, o.seed);
        }
        if (o.data.empty())
            return engine::TokenData::defaultCorpus();
        if (o.dataFormat == "text")
            return engine::TokenData::fromTextFile(o.data);
        if (o.dataFormat == "u16" || o.dataFormat == "u32")
            return engine::TokenData::fromTokenFile(
                o.data, o.dataFormat == "u16" ? 2 : 4, o.vocab > 0 ? o.vocab : 65536);
        throw Error("unknown --data-format '" + o.dataFormat + "' (text, u16, u32, random)");
    }

    // A stored plan's cuts, schedule and memory actions, used as they are.
    void applyStoredPlan(const ProjectStore& store, const std::string& which, const Graph& graph, engine::RunConfig& c,
        std::int64_t& planId)
    {
        const auto plans = store.loadPlans();
        if (plans.empty())
            throw Error("'" + store.path().string() + "' has no stored plans (run `pipestudio plan` first)");
        const ProjectStore::PlanRow* row = nullptr;
        for (const auto& p : plans) {
            if (which == "best" ? p.feasible : std::to_string(p.id) == which) {
                row = &p;
                break;
            }
        }
        if (!row)
            throw Error(
                "'" + store.path().string() + "' has no " + (which == "best" ? "feasible plan" : "plan " + which));
        planId = row->id;
        auto shape = engine::shapeFromPlanJson(row->json, graph.nodeCount());
        c.schedule = shape.schedule;
        c.partition = std::move(shape.partition);
        c.memory = std::move(shape.memory);
        c.stageDevices = std::move(shape.stageDevices);
    }

    // Cuts and memory plans from the planner for these devices, on the project's measured profile
    // of that device kind when it has one (measured-cpu, or measured-cuda on a GPU), else the
    // analytical estimate for this CPU or the GPU's catalog entry at the run's precision.
    void plannedCuts(const ProjectStore& store, const TrainCommandOptions& o, const Graph& graph, engine::RunConfig& c,
        double memoryBytes, const std::string& deviceKind)
    {
        if (c.schedule.stages == 1) {
            c.partition = Partition { { 0 } };
            return;
        }
        const bool gpu = !deviceKind.empty() && deviceKind != "cpu";
        DeviceOptions d;
        d.device = gpu ? deviceKind : "cpu";
        d.precision = gpu ? o.precision : "fp32";
        // CPU devices share the cores: the profile measured (or fitted) at their thread count.
        const auto matched = loadMatchedProfile(store, d.device, measuredSource(d.device, d),
            gpu ? 0 : engine::threadsPerDevice(static_cast<std::size_t>(c.schedule.devices())));
        auto profile = matched ? std::optional<Profile>(matched->profile) : std::nullopt;
        const auto cluster = makeCluster(resolveDevice(d, static_cast<int>(c.schedule.devices())), c.schedule.stages);
        if (!profile)
            profile = engine::engineAnalyticalProfile(graph, cluster.device, costOptions(d));
        auto spec = c.schedule;
        if (spec.kind == ScheduleKind::Interleaved)
            spec = parseScheduleSpec("1f1b", spec.stages, spec.microBatches);
        const StageModel model(
            graph, *profile, spec, cluster, static_cast<double>(graph.info().microBatch), { memoryBytes, true, true });
        PlannerOptions po;
        po.algorithm = parsePlanAlgorithm(o.algorithm);
        const auto plan = findPlan(model, po);
        if (plan.feasible) {
            c.partition = plan.partition;
            c.memory = plan.memoryPlans();
            return;
        }
        // Nothing fits: run the compute-balanced cuts, so the run fails where the memory really runs out.
        c.partition = computeBalancedPartition(nodeTimes(*profile, model.microBatch()), c.schedule.stages);
        fmt::print(stderr, "warning: {} finds no plan that fits ({}); running compute-balanced cuts\n", o.algorithm,
            plan.reason);
    }

    std::string scheduleLine(const engine::RunConfig& c, const std::vector<engine::RuntimeDevice>& devices)
    {
        return fmt::format("{} stage(s) on {} device(s), {} with {} micro-batch(es), cuts {}", c.schedule.stages,
            devices.size(), scheduleName(c.schedule), c.schedule.microBatches,
            c.partition.cutsText().empty() ? "-" : c.partition.cutsText());
    }

    nlohmann::json stepJson(const engine::RunStepResult& r, std::int64_t step)
    {
        return { { "step", step }, { "loss", r.loss }, { "lr", r.learningRate }, { "step_ms", r.seconds * 1e3 },
            { "tokens_per_s", r.tokensPerSecond }, { "peak_bytes", r.devicePeakBytes },
            { "busy_ms",
                [&] {
                    std::vector<double> ms;
                    for (double ns : r.deviceBusyNs)
                        ms.push_back(ns / 1e6);
                    return ms;
                }() },
            { "traced_actions", r.tracedActions } };
    }

    // Whether step `index` (1-based in this run: a resumed run traces its own first steps too)
    // keeps its measured timeline.
    bool tracedStep(std::int64_t index, const TrainCommandOptions& o)
    {
        return index <= o.traceIterations || (o.traceEvery > 0 && index % o.traceEvery == 0);
    }

    void record(ProjectStore& store, std::int64_t runId, const engine::RunStepResult& r, std::int64_t step,
        std::int64_t index, const std::vector<engine::RuntimeDevice>& devices, const TrainCommandOptions& o)
    {
        store.appendRunMetrics(runId, { { step, r.loss, r.seconds * 1e9, r.tokensPerSecond } });
        std::vector<ProjectStore::RunDeviceMetric> dm;
        for (std::size_t d = 0; d < r.devicePeakBytes.size(); ++d) {
            nlohmann::ordered_json uses = nlohmann::ordered_json::object();
            if (d < r.devicePeakByUse.size()) {
                for (std::size_t u = 0; u < engine::kMemoryUses; ++u)
                    uses[std::string(engine::toString(static_cast<engine::MemoryUse>(u)))] = r.devicePeakByUse[d][u];
            }
            // -1: not measured (a GPU step run untimed).
            dm.push_back({ step, static_cast<int>(d), devices[d].name, r.devicePeakBytes[d],
                d < r.deviceBusyNs.size() ? r.deviceBusyNs[d] : -1, uses.dump() });
        }
        store.appendRunDeviceMetrics(runId, dm);
        if (tracedStep(index, o))
            store.saveRunEvents(runId, step, r.events);
    }

    void saveCheckpoint(ProjectStore& store, std::int64_t runId, const engine::TrainingRun& run, std::int64_t step)
    {
        const auto c = run.checkpoint();
        store.saveCheckpoint(runId, step, c.parameters, c.optimizerState, c.optimizerSteps);
    }

    // The optimizer, warm-up, seed, link emulation and chunk options of `o` into the run's config.
    void setTrainingOptions(engine::RunConfig& c, const TrainCommandOptions& o)
    {
        c.optimizer.kind = o.optimizer;
        c.optimizer.lr = o.lr;
        c.optimizer.weightDecay = o.weightDecay;
        c.optimizer.beta2 = o.beta2;
        c.warmupSteps = o.warmup;
        c.seed = o.seed;
        c.link = linkEmulation(o.link);
        c.chunks = chunkOptions(o.chunks);
        if (o.schedule == "kfkb:auto")
            c.schedule.kind = ScheduleKind::KFKB;
    }

    // One step's line: JSON (with the chunk counts where chunks run) or text.
    void printStep(const engine::RunStepResult& r, std::int64_t step, const std::string& unit,
        const engine::TrainingRun& run, bool json)
    {
        if (json) {
            auto line = stepJson(r, step);
            if (!r.deviceChunks.empty())
                line["chunks"] = chunksJson(r);
            fmt::print("{}\n", line.dump());
            return;
        }
        std::int64_t peak = 0;
        for (auto b : r.devicePeakBytes)
            peak = std::max(peak, b);
        fmt::print("step {:>5}  loss {:.4f}  lr {:.2e}  {:>8.0f} {}/s  {:7.1f} ms  peak {:.1f} MiB\n", step, r.loss,
            r.learningRate, r.tokensPerSecond, unit, r.seconds * 1e3, static_cast<double>(peak) / (1024.0 * 1024.0));
        fmt::print("{}", chunksText(r, run.devices()));
    }

    struct StepLoop
    {
        std::int64_t resumedStep = 0;
        bool onGpu = false;
        std::string unit; // "tokens" or "samples"
        profiler::KernelTimelineTracer* timeline = nullptr;
        engine::GroupSizeController* controller = nullptr; // kfkb:auto
    };

    struct StepOutcome
    {
        std::int64_t step = 0;
        double loss = 0;
        double tokensPerSecond = 0;
    };

    // The run's steps: each recorded before it is reported, a checkpoint every --checkpoint-every
    // steps and at the end. Ctrl-C, and SIGTERM (logout, shutdown, the GUI's Stop), finish the step
    // and checkpoint (g_interrupted). A failure ends the run as failed (in JSON, saying why) before
    // it propagates.
    StepOutcome trainSteps(ProjectStore& store, std::int64_t runId, engine::TrainingRun& run,
        const TrainCommandOptions& o, const StepLoop& loop)
    {
        g_interrupted = false;
        const auto previous = std::signal(SIGINT, onInterrupt);
        const auto previousTerm = std::signal(SIGTERM, onInterrupt);
        StepOutcome out { loop.resumedStep };
        try {
            for (std::int64_t i = 0; i < o.steps && !g_interrupted; ++i) {
                // On GPUs only the steps whose timeline is kept are timed (the others do not wait for
                // the device after each action, nor trace it); CPU steps are timed for free.
                const auto r = run.step(!loop.onGpu || tracedStep(i + 1, o));
                out = { r.step, r.loss, r.tokensPerSecond };
                // Stored before it is reported: a step a reader saw survives the process being killed.
                record(store, runId, r, out.step, i + 1, run.devices(), o);
                printStep(r, out.step, loop.unit, run, o.json);
                if (loop.timeline)
                    for (const auto& w : loop.timeline->takeWarnings())
                        fmt::print(stderr, "warning: step {}: {}\n", out.step, w);
                std::fflush(stdout);
                adaptGroupSize(loop.controller, run, r, o.json);
                if (o.checkpointEvery > 0 && (i + 1) % o.checkpointEvery == 0)
                    saveCheckpoint(store, runId, run, out.step);
            }
            saveCheckpoint(store, runId, run, out.step); // a failure here (a full disk) fails the run too
        } catch (const std::exception& e) {
            std::signal(SIGINT, previous);
            std::signal(SIGTERM, previousTerm);
            try {
                store.endRun(runId, "failed", e.what());
            } catch (const std::exception&) { // NOLINT(bugprone-empty-catch): e.g. a full disk; the
                // run stays "running" until the project is next opened, which marks it interrupted
            }
            if (o.json) { // a parent reading the lines learns why, then the usual error and exit code
                fmt::print("{}\n", nlohmann::json { { "error", e.what() }, { "run", runId } }.dump());
                std::fflush(stdout);
            }
            throw;
        }
        std::signal(SIGINT, previous);
        std::signal(SIGTERM, previousTerm);
        return out;
    }

    // The run's cuts and schedule: a stored plan's (its id returned), or planned here for the
    // devices (0).
    std::int64_t setCutsAndSchedule(const ProjectStore& store, const TrainCommandOptions& o, const Graph& graph,
        engine::RunConfig& c, std::size_t deviceCount, double memoryBytes, const std::string& deviceKind)
    {
        std::int64_t planId = 0;
        if (!o.plan.empty()) {
            applyStoredPlan(store, o.plan, graph, c, planId);
            return planId;
        }
        const int stages = o.stages > 0 ? o.stages : static_cast<int>(deviceCount);
        const auto M = static_cast<int>(o.microBatches > 0 ? o.microBatches : o.accumulate);
        c.schedule = parseScheduleSpec(o.schedule == "kfkb:auto" ? "kfkb:1" : o.schedule, stages, M);
        // With chunks the planner cannot see model data leaving the device: cut for compute.
        plannedCuts(store, o, graph, c, o.chunks.enabled ? 0 : memoryBytes, deviceKind);
        return planId;
    }

    // The run's last line: how it ended, at which step, where its checkpoint is.
    void printRunEnd(const TrainCommandOptions& o, std::int64_t runId, const StepOutcome& outcome)
    {
        if (o.json)
            fmt::print("{}\n",
                nlohmann::json { { "summary", true }, { "run", runId },
                    { "status", g_interrupted ? "interrupted" : "finished" }, { "step", outcome.step },
                    { "loss", outcome.loss }, { "tokens_per_s", outcome.tokensPerSecond } }
                    .dump());
        else
            fmt::print("{} at step {}; checkpoint saved to {} (run {})\n", g_interrupted ? "Interrupted" : "Finished",
                outcome.step, o.project, runId);
    }

    // A checkpoint's parameters (and the optimizer's moments, where stored: returns whether) into
    // the run; one naming tensors the model does not have is refused.
    bool restoreCheckpoint(engine::TrainingRun& run, const ProjectStore::Checkpoint& checkpoint)
    {
        for (const auto& [id, bytes] : checkpoint.tensors) {
            if (id.index() >= run.graph().tensorCount())
                throw Error("checkpoint " + std::to_string(checkpoint.id) + " does not fit the project's model");
        }
        return run.restore(
            { checkpoint.step, checkpoint.optimizerSteps, checkpoint.tensors, checkpoint.optimizerState });
    }

    // What the run trains on: a language model on token windows of `source` (and an encoder's
    // context), any other graph on generated inputs (samples).
    std::string dataDescription(const engine::TrainingRun& run, const std::string& source)
    {
        if (!run.batchSource().samplesTokens())
            return run.batchSource().describe();
        const auto context = run.batchSource().encoderContext();
        return context.empty() ? source : source + "; encoder " + context;
    }

    int runTrain(const TrainCommandOptions& o)
    {
        auto store = ProjectStore::open(o.project);
        // A run whose process was killed is "interrupted" before this one begins (and resumes it).
        for (const auto id : store.markStaleRunsInterrupted()) {
            if (!o.json)
                fmt::print(
                    "Run {} of {} ended without finishing (its process is gone): marked interrupted\n", id, o.project);
        }
        auto graph = trainingGraph(store, o);
        const auto deviceText = o.devices.empty() ? o.device : o.devices;
        const double memoryBytes = o.memory.empty() ? 0 : parseBytes(o.memory, "--device-memory");
        auto devices = engine::makeDevices(deviceText, static_cast<std::int64_t>(memoryBytes));
        const auto deviceKind = runDeviceKind(deviceText);
        engine::RunConfig c;
        c.gemm = trainingGemmPrecision(o.precision);
        std::string timelineWhy;
        const auto timeline = kernelTimeline(o.timeline, deviceText, timelineWhy);
        const bool onGpu = engine::parseDeviceSpec(deviceText).cuda;
        if (onGpu)
            timelineWhy += "; timed on the steps whose timeline is stored (--trace-iterations, --trace-every), "
                           "the others run untimed";
        c.tracer = timeline.get();
        const auto planId = setCutsAndSchedule(store, o, graph, c, devices.size(), memoryBytes, deviceKind);
        setTrainingOptions(c, o);
        std::optional<ProjectStore::Checkpoint> checkpoint;
        if (o.resume) {
            checkpoint = store.latestCheckpoint();
            if (!checkpoint)
                throw Error("'" + o.project + "' has no checkpoint to resume from");
        }
        for (const auto& w : engine::scheduleWarnings(c))
            fmt::print(stderr, "warning: {}\n", w);
        const std::int64_t resumedStep = checkpoint ? checkpoint->step : 0;
        c.decaySteps = o.cosine ? resumedStep + o.steps : 0;
        auto data = trainingData(o, graph);
        auto source = data.source();
        const auto deviceCount = devices.size();
        engine::TrainingRun run(std::move(graph), std::move(data), std::move(devices), c);
        const auto controller = o.schedule == "kfkb:auto" ? groupController(store, o.link.adaptEvery,
                                    static_cast<std::int64_t>(memoryBytes), deviceKind, o.precision, run)
                                                          : nullptr;
        c.schedule = run.config().schedule;
        const bool moments = checkpoint && restoreCheckpoint(run, *checkpoint);
        const std::string unit = run.batchSource().samplesTokens() ? "tokens" : "samples";
        source = dataDescription(run, source);
        const nlohmann::json config { { "devices", deviceText }, { "device_count", deviceCount },
            { "stages", c.schedule.stages }, { "schedule", scheduleName(c.schedule) },
            { "micro_batches", c.schedule.microBatches }, { "cuts", c.partition.cutsText() }, { "plan_id", planId },
            { "steps", o.steps }, { "micro_batch", run.graph().info().microBatch }, { "data", source },
            { "optimizer", o.optimizer }, { "lr", o.lr }, { "weight_decay", o.weightDecay }, { "beta2", o.beta2 },
            { "warmup", o.warmup }, { "cosine", o.cosine }, { "seed", o.seed }, { "memory", o.memory },
            { "resumed_from_step", resumedStep }, { "link", nlohmann::json::parse(engine::linkToJson(c.link)) },
            { "adaptive_group_size", controller != nullptr }, { "chunks", o.chunks.enabled },
            { "chunk_elements", o.chunks.chunkElements }, { "throughput_unit", unit }, { "device_kind", deviceKind },
            { "precision", o.precision }, { "timeline", timelineWhy } };
        const auto runId = store.beginRun(config.dump());
        if (o.json) {
            fmt::print("{}\n", nlohmann::json { { "run", runId }, { "config", config } }.dump());
        } else {
            fmt::print("Training {}: {} steps of {} {}, data {}, run {}\n  {}\n", o.project, o.steps,
                run.tokensPerStep(), unit, source, runId, scheduleLine(c, run.devices()));
            fmt::print("  timeline: {}\n", timelineWhy);
            if (checkpoint)
                fmt::print("  resumed from step {}{}\n", resumedStep,
                    moments ? " with the optimizer's state" : " (parameters only: the optimizer starts fresh)");
        }
        std::fflush(stdout);
        const auto outcome =
            trainSteps(store, runId, run, o, { resumedStep, onGpu, unit, timeline.get(), controller.get() });
        store.endRun(runId, g_interrupted ? "interrupted" : "finished");
        printRunEnd(o, runId, outcome);
        if (!onGpu && !o.json)
            noteBlasPin();
        return g_interrupted ? 130 : 0;
    }

    // Training data (text, token files or random tokens) and the optimizer's settings.
    void addDataAndOptimizerOptions(CLI::App* cmd, TrainCommandOptions& o)
    {
        cmd->add_option(
            "--data", o.data, "Training text (bytes as tokens) or token file; default: /usr/share/common-licenses");
        cmd->add_option("--data-format", o.dataFormat, "text | u16 | u32 | random")
            ->check(CLI::IsMember(std::vector<std::string> { "text", "u16", "u32", "random" }));
        cmd->add_option("--vocab", o.vocab, "Vocabulary of u16/u32/random data (random: the model's by default)")
            ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 32));
        cmd->add_option("--optimizer", o.optimizer, "adamw | sgd")
            ->check(CLI::IsMember(std::vector<std::string> { "adamw", "sgd" }));
        cmd->add_option("--lr", o.lr, "Learning rate")->check(positiveUpTo(1e3));
        cmd->add_option("--weight-decay", o.weightDecay, "Weight decay")->check(numberIn(0, 1e3));
        cmd->add_option("--beta2", o.beta2, "AdamW's second-moment decay (0.99 suits small models)")
            ->check(numberIn(0, 0.999999999));
        cmd->add_option("--seed", o.seed, "Seed of initialisation, dropout and sampling");
    }

} // namespace

void addTrainCommand(CLI::App& app, Action& action)
{
    auto o = std::make_shared<TrainCommandOptions>();
    auto* cmd = app.add_subcommand("train", "Train the project's model on this machine: one CPU device or a pipeline");
    cmd->add_option("project", o->project, "Project file (.pstudio)")->required();
    cmd->add_option("--devices", o->devices,
        "cpu (one device), cpu:N (N devices sharing the cores), or GPUs with the CUDA backend (ran on one H200 and one "
        "H100; "
        "several GPUs not yet): cuda:G, cuda:0,cuda:1, cuda:GxK (GPU G as K stage devices)");
    cmd->add_option("--device", o->device, "Same as --devices (cpu)");
    cmd->add_option("--precision", o->precision,
        "fp32 (default); on GPUs tf32 (GEMM inputs rounded to TF32) or bf16 (GEMM inputs cast to bf16, as "
        "torch.autocast does); fp32 accumulation, values and master weights in every mode");
    cmd->add_option("--timeline", o->timeline,
           "GPUs: how actions are timed: auto (default: the kernels each launched, from a CUPTI trace, where CUPTI "
           "loads; else synchronized) | cupti | synchronized (the device waited for after each action)")
        ->check(CLI::IsMember(std::vector<std::string> { "auto", "cupti", "synchronized" }));
    cmd->add_option("--stages", o->stages, "Pipeline stages (default: one per device)")->check(CLI::Range(1, 4096));
    cmd->add_option("--schedule", o->schedule,
        "gpipe | 1f1b | kfkb:K | kfkb:auto (Ada-Grouper: k, and with --device-memory the micro-batch size, "
        "chosen from the measured transfers) | interleaved:V | zb-h1 | pipedream | ftpipe-async[:A]");
    cmd->add_option("--micro-batches", o->microBatches,
           "Micro-batches per step (pipeline; on one stage: gradient accumulation, as --accumulate)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--plan", o->plan, "A stored plan's id, or 'best': its cuts, schedule and memory actions")
        ->check(CLI::Validator(
            [](const std::string& text) {
                const bool id = !text.empty() && text.size() < 19
                    && std::all_of(text.begin(), text.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
                return id || text == "best" ? std::string() : "'" + text + "' is neither a plan id nor 'best'";
            },
            "ID|best"));
    cmd->add_option("--algo", o->algorithm, "Planner for the cuts when no --plan is given (default dawnpiper)");
    cmd->add_option("--steps", o->steps, "Optimizer steps")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 40));
    cmd->add_option("--micro-batch", o->microBatch, "Samples per micro-batch (zoo models; default: the project's)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    cmd->add_option("--accumulate", o->accumulate, "Micro-batches per optimizer step (gradient accumulation)")
        ->check(CLI::Range(std::int64_t { 1 }, std::int64_t { 1 } << 20));
    addDataAndOptimizerOptions(cmd, *o);
    cmd->add_option("--device-memory,--memory", o->memory,
        "Memory capacity of each device, e.g. 512MiB (an allocation past it fails naming device, stage and node)");
    cmd->add_option(
           "--checkpoint-every", o->checkpointEvery, "Also checkpoint every N steps (always at the end and on Ctrl-C)")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->add_flag("--resume", o->resume, "Continue from the project's newest checkpoint (parameters, optimizer, step)");
    cmd->add_option("--warmup", o->warmup, "Linear learning-rate warm-up steps")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->add_flag("--cosine", o->cosine, "Cosine decay to 10% of --lr over the run");
    cmd->add_flag("--json", o->json,
        "One JSON object per line: the run, each step, a final summary (or {\"error\": ...} when a step fails)");
    addLinkOptions(cmd, o->link);
    addChunkOptions(cmd, o->chunks);
    cmd->add_option("--trace-iterations", o->traceIterations,
           "Store the measured timeline of the first N steps (on GPUs only these steps and --trace-every's are timed)")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->add_option("--trace-every", o->traceEvery, "... and of every Nth step after them (0: never)")
        ->check(CLI::Range(std::int64_t { 0 }, std::int64_t { 1 } << 40));
    cmd->callback([o, &action] { action = [o] { return runTrain(*o); }; });

    addTraceCommand(app, action);
}

} // namespace ps::app
