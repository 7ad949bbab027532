// A training job on a project: what `pipestudio train` does between parsing its options and
// printing, callable by tests and by any front end. It opens the run (marks runs whose process is
// gone interrupted, builds the graph at the run's micro-batch, the devices, the cuts and schedule
// from a stored plan or planned here on the project's matching profile, the data, a resumed
// checkpoint, kfkb:auto's controller), records it in the project, then runs its steps: each step
// stored before it is reported, checkpoints every N steps and at the end, a failure recorded as
// the run's end before it propagates.
// Depends on: runtime/training_run.h, runtime/group_controller.h, runtime/run_prediction.h, core
// (store, plan, zoo); no Qt, no CUDA headers.
#pragma once

#include "runtime/group_controller.h"
#include "runtime/training_run.h"

#include <nlohmann/json_fwd.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ps {
class ProjectStore;
}

namespace ps::engine {

// Where the tokens come from: a text file (bytes as tokens), a u16/u32 token file, random tokens,
// or the default corpus (path empty, format "text").
struct TrainingDataOptions
{
    std::string path;
    std::string format = "text"; // text | u16 | u32 | random
    std::int64_t vocab = 0; // u16/u32: the vocabulary (default 65536); random: default the model's
};

struct TrainingJobOptions
{
    std::string devices = "cpu"; // cpu, cpu:N, cuda:..., as parseDeviceSpec reads them
    std::string precision = "fp32"; // the GEMMs: fp32, or on GPUs tf32 or bf16
    std::int64_t deviceMemoryBytes = 0; // each device's capacity; 0: no cap
    std::string memoryText; // the capacity as the user wrote it, recorded in the run ("" for none)
    int stages = 0; // 0: one per device
    std::string schedule = "1f1b"; // a schedule spec, or kfkb:auto
    std::int64_t microBatches = 0; // M; 0: `accumulate`
    std::int64_t accumulate = 1;
    std::string plan; // a stored plan's id or "best"; empty: cuts planned here
    std::string algorithm = "dawnpiper"; // the planner of those cuts
    std::int64_t steps = 200;
    std::int64_t microBatch = 0; // samples per micro-batch; 0: the project's
    TrainingDataOptions data;
    StageOptimizerConfig optimizer; // kind, lr, weight decay, beta2
    std::uint64_t seed = 0;
    std::int64_t warmup = 0;
    bool cosine = false;
    bool resume = false; // from the project's latest checkpoint
    std::int64_t checkpointEvery = 0; // 0: at the end only
    std::int64_t traceIterations = 3; // the first N steps keep their measured timeline...
    std::int64_t traceEvery = 50; // ... and every Nth after them (0: never)
    LinkEmulation link;
    int adaptEvery = 5; // kfkb:auto: steps between the controller's decisions
    ChunkOptions chunks;
    ActionTracer* tracer = nullptr; // the measured timeline's clock (GPU kernels); null: the host's
    std::string timeline = "host clock around each action"; // what that clock is, recorded in the run
};

// train --precision: fp32, tf32 or bf16; throws ps::Error for anything else.
[[nodiscard]] GemmPrecision trainingGemmPrecision(const std::string& precision);

// Random tokens (drawn from `seed`) from the model's own vocabulary unless `o.vocab` says
// otherwise; the default corpus without a path. Throws ps::Error for an unknown format or an
// unreadable file.
[[nodiscard]] TokenData trainingTokens(const TrainingDataOptions& o, const Graph& graph, std::uint64_t seed);

struct TrainingOutcome
{
    std::int64_t step = 0; // the last step done (the resumed step where none ran)
    double loss = 0;
    double tokensPerSecond = 0;
    bool interrupted = false; // `stop` ended it before its steps were done
};

class TrainingJob
{
public:
    // Opens the run as the header says. Throws ps::Error (naming the project, plan, device or file)
    // before anything is recorded when it cannot start.
    TrainingJob(ProjectStore& store, TrainingJobOptions options);
    ~TrainingJob();
    TrainingJob(const TrainingJob&) = delete;
    TrainingJob& operator=(const TrainingJob&) = delete;

    // Runs whose process was gone, marked interrupted as the job opened.
    [[nodiscard]] const std::vector<std::int64_t>& staleRuns() const
    {
        return m_staleRuns;
    }
    // What the user should know before the steps: a planner that found nothing that fits, a schedule's caveats.
    [[nodiscard]] const std::vector<std::string>& warnings() const
    {
        return m_warnings;
    }
    [[nodiscard]] std::int64_t runId() const
    {
        return m_runId;
    }
    // The run's recorded options (the store's run config): devices, stages, schedule, cuts, data, ...
    [[nodiscard]] const nlohmann::json& config() const;
    [[nodiscard]] TrainingRun& run()
    {
        return *m_run;
    }
    [[nodiscard]] std::int64_t resumedStep() const
    {
        return m_resumedStep;
    }
    // Whether a resumed checkpoint held the optimizer's state (false: parameters only).
    [[nodiscard]] bool resumedMoments() const
    {
        return m_moments;
    }
    [[nodiscard]] bool onGpu() const
    {
        return m_onGpu;
    }
    [[nodiscard]] const std::string& throughputUnit() const
    {
        return m_unit; // "tokens" or "samples"
    }
    // "4 stage(s) on 2 device(s), 1F1B with 8 micro-batch(es), cuts 3,7,11"
    [[nodiscard]] std::string scheduleLine() const;

    using StepCallback = std::function<void(const RunStepResult&)>;
    using AdaptCallback = std::function<void(const GroupAdaptation&)>;
    // The steps. `onStep` sees each after it is stored; `onAdapt` each decision of kfkb:auto's
    // controller (switched or not). `stop` set (Ctrl-C, the GUI's Stop) ends the run after the step
    // under way. A checkpoint at the end either way. A failure ends the run as failed, with its
    // message, and propagates.
    TrainingOutcome runSteps(
        const StepCallback& onStep, const AdaptCallback& onAdapt = {}, const std::atomic<bool>* stop = nullptr);

private:
    void record(const RunStepResult& r, std::int64_t index);
    void checkpoint(std::int64_t step);

    ProjectStore& m_store;
    TrainingJobOptions m_options;
    std::vector<std::int64_t> m_staleRuns;
    std::vector<std::string> m_warnings;
    std::unique_ptr<TrainingRun> m_run;
    std::unique_ptr<GroupSizeController> m_controller;
    std::unique_ptr<nlohmann::json> m_config;
    std::int64_t m_runId = 0;
    std::int64_t m_resumedStep = 0;
    bool m_moments = false;
    bool m_onGpu = false;
    std::string m_unit;
};

} // namespace ps::engine
