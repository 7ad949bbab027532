// The project file: one SQLite database per project (*.pstudio).
//
// Owns: the schema and its forward migrations, checks that a file is a PipeStudio project before
// anything is written to it, and transactional save/load of the model graph (later: profiles,
// cluster, plans, simulations, runs). WAL mode so the engine can append while the GUI reads.
// Depends on: graph/, store/sqlite.h (no Qt, no CUDA).
#pragma once

#include "cluster/cluster.h"
#include "cost/profile.h"
#include "graph/graph.h"
#include "plan/planner.h"
#include "sim/simulator.h"

#include <filesystem>
#include <memory>
#include <optional>

namespace ps {

namespace sql {
    class Database;
}

// PRAGMA application_id of every project file: "PStd".
inline constexpr std::int32_t kProjectApplicationId = 0x50537464;
// Newest schema this build writes; older files are migrated forward when opened for writing.
inline constexpr int kProjectSchemaVersion = 9;

class ProjectStore
{
public:
    enum class Access { ReadOnly, ReadWrite };

    // Creates a new, empty project; fails if the file exists. `schemaVersion` below the newest is
    // only for migration tests.
    static ProjectStore create(const std::filesystem::path& path, int schemaVersion = kProjectSchemaVersion);
    // Opens an existing project after verifyProjectFile(); with ReadWrite, migrates older schemas.
    static ProjectStore open(const std::filesystem::path& path, Access access = Access::ReadWrite);

    ProjectStore(ProjectStore&&) noexcept;
    ProjectStore& operator=(ProjectStore&&) noexcept;
    ~ProjectStore();

    [[nodiscard]] const std::filesystem::path& path() const;
    [[nodiscard]] int schemaVersion() const;
    [[nodiscard]] bool hasModel() const;

    // Replaces the stored model (graph, tensors, edges) in one transaction.
    void saveGraph(const Graph& graph);
    // Loads and validates the stored model; throws naming the file if there is none.
    [[nodiscard]] Graph loadGraph() const;

    // Replaces the rows of `profile`'s device kind and source: each node at two micro-batch sizes,
    // which is what the linear model needs.
    void saveProfile(const Profile& profile, double microBatchA, double microBatchB);
    // The profile of `deviceKind` from `source`, or nullopt if none was saved.
    // With several thread counts stored (CPU profiles), the one measured with the most threads;
    // `threads` >= 0 asks for exactly that count.
    [[nodiscard]] std::optional<Profile> loadProfile(
        const std::string& deviceKind, const std::string& source, int threads = -1) const;
    // The thread counts `source`'s profiles of `deviceKind` were measured with, ascending (0: not
    // recorded); empty when there is none.
    [[nodiscard]] std::vector<int> profileThreads(const std::string& deviceKind, const std::string& source) const;
    void saveCluster(const Cluster& cluster);
    [[nodiscard]] std::vector<Cluster> loadClusters() const;
    // Stores a simulation's metrics and events; returns its id.
    std::int64_t saveSimulation(const SimulationResult& result, const std::string& configJson);
    [[nodiscard]] std::int64_t simulationCount() const;
    // Stores a plan (its JSON, predicted slowest stage and feasibility); returns its id.
    std::int64_t savePlan(const Plan& plan, const std::string& name, const SimulationResult* simulation = nullptr);
    void renamePlan(std::int64_t id, const std::string& name);
    void deletePlan(std::int64_t id);
    struct PlanRow
    {
        std::int64_t id = 0;
        std::string name;
        std::string algorithm;
        std::string json;
        double slowestStageNs = 0;
        bool feasible = false;
    };
    // Stored plans, fastest feasible first.
    [[nodiscard]] std::vector<PlanRow> loadPlans() const;

    // Training runs: a row per run (its options as JSON), per-step metrics, checkpoints.
    struct RunMetric
    {
        std::int64_t step = 0;
        double loss = 0;
        double stepNs = 0;
        double tokensPerSecond = 0;
    };
    // Records the calling process (pid, host, boot, start time) as the run's writer.
    std::int64_t beginRun(const std::string& json);
    void appendRunMetrics(std::int64_t runId, const std::vector<RunMetric>& metrics);
    // status: "finished", "interrupted" or "failed" (with the error).
    void endRun(std::int64_t runId, const std::string& status, const std::string& error = {});
    // Ends the run only while it is still "running" (a supervisor's verdict after its process died,
    // which must not overwrite what the process itself wrote); returns whether it changed.
    bool endRunIfRunning(std::int64_t runId, const std::string& status, const std::string& error);
    struct RunRow
    {
        std::int64_t id = 0;
        std::int64_t planId = 0; // from the run's options; 0: planned at launch
        std::string startedAt;
        std::string endedAt;
        std::string status; // running, finished, interrupted, failed
        std::string error;
        std::string json; // the options it was started with
        std::int64_t steps = 0; // metric rows stored
        double lastLoss = 0;
        double lastTokensPerSecond = 0;
    };
    // Every run, newest first, with its last stored step's loss and throughput.
    [[nodiscard]] std::vector<RunRow> loadRuns() const;
    // Runs still marked "running" whose writing process no longer exists on this machine (killed,
    // crashed, power lost: another boot) become "interrupted"; returns their ids. A run written by
    // a process on another host is left alone, as is one whose process is alive.
    std::vector<std::int64_t> markStaleRunsInterrupted();
    [[nodiscard]] std::vector<RunMetric> loadRunMetrics(std::int64_t runId) const;
    [[nodiscard]] std::string runStatus(std::int64_t runId) const;
    // The options a run was started with (its JSON), or throws naming the file when there is no such run.
    [[nodiscard]] std::string runConfig(std::int64_t runId) const;
    using TensorBytes = std::vector<std::pair<TensorId, std::vector<std::byte>>>;
    // Per parameter: the optimizer's moment buffers (AdamW m and v; SGD momentum), fp32 bytes.
    using OptimizerStateBytes = std::vector<std::pair<TensorId, std::vector<std::vector<std::byte>>>>;
    // Parameter values (fp32 bytes by tensor id) at `step`, with the optimizer's state and step
    // count when given; one transaction.
    std::int64_t saveCheckpoint(std::int64_t runId, std::int64_t step, const TensorBytes& tensors,
        const OptimizerStateBytes& optimizerState = {}, int optimizerSteps = 0);
    struct Checkpoint
    {
        std::int64_t id = 0;
        std::int64_t runId = 0;
        std::int64_t step = 0;
        TensorBytes tensors;
        OptimizerStateBytes optimizerState; // empty for checkpoints of older builds
        int optimizerSteps = 0;
    };
    // A run's measured timeline of one iteration (the simulator's event format).
    void saveRunEvents(std::int64_t runId, std::int64_t iteration, const std::vector<SimEvent>& events);
    [[nodiscard]] std::vector<std::int64_t> runEventIterations(std::int64_t runId) const;
    [[nodiscard]] std::vector<SimEvent> loadRunEvents(std::int64_t runId, std::int64_t iteration) const;
    struct RunDeviceMetric
    {
        std::int64_t step = 0;
        int device = 0;
        std::string name;
        std::int64_t peakBytes = 0;
        double busyNs = 0;
        // What the peak was for: a JSON object of bytes by use (parameters, gradients, ...).
        std::string peakByUse = "{}";
    };
    void appendRunDeviceMetrics(std::int64_t runId, const std::vector<RunDeviceMetric>& metrics);
    [[nodiscard]] std::vector<RunDeviceMetric> loadRunDeviceMetrics(std::int64_t runId) const;
    // The newest run's id, or 0 when the project has none.
    [[nodiscard]] std::int64_t latestRunId() const;
    // The newest checkpoint, or nullopt.
    [[nodiscard]] std::optional<Checkpoint> latestCheckpoint() const;

    // Names of the tables in the file (for tests and `info --tables`).
    [[nodiscard]] std::vector<std::string> tableNames() const;

private:
    explicit ProjectStore(std::unique_ptr<sql::Database> db);
    std::unique_ptr<sql::Database> m_db;
};

// Throws ps::Error with a message naming the file unless it is a readable PipeStudio project
// this build can open. Reads only: the file is never modified.
void verifyProjectFile(const std::filesystem::path& path);

// Writes `graph` as a new project at `path` via a temporary file and an atomic rename, so a
// failure leaves no half-written project. Refuses to replace an existing file unless `overwrite`.
void writeNewProject(const std::filesystem::path& path, const Graph& graph, bool overwrite);

// Copies the project at `from` whole (graph, profiles, plans, runs, checkpoints) to `to`, via a
// temporary file and an atomic rename (File > Save As). `from` is only read.
void copyProject(const std::filesystem::path& from, const std::filesystem::path& to);

} // namespace ps
