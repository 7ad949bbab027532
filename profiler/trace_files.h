// Traces of a user's run imported into a project, as `pipestudio import-trace` (and the studio's
// Import profiler trace dialog, through it) does it: one trace, or one per pipeline rank with the
// cuts that say where each rank's stage starts, each aligned with its stage's nodes and merged; the
// imported profile stored, and the traces' timeline (their iterations' forward, backward and
// optimizer passes) stored as a run that `compare` and the Predicted vs measured view set beside
// the simulation. Everything is read and checked before the project is written.
// Depends on: trace_import.h, store/project_store.h.
#pragma once

#include "graph/graph.h"
#include "trace_import.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ps::profiler {

struct TraceFilesRequest
{
    std::string project;
    std::vector<std::string> traces; // one, or one per pipeline rank (stage order)
    std::string cuts; // with several traces: the first node (index or name) of stages 1..S-1
    std::string device; // empty: the trace's (traceDevice)
    std::int64_t microBatch = 0; // 0: the project's
    bool dryRun = false; // read and check only
    double minCoverage = 0.5; // of the forward and backward work's time, attributed to nodes
};

struct TraceFilesImport
{
    Graph graph; // the project's model
    std::string traceLine; // the traces as one line, for reports
    std::vector<NodeWindow> windows; // each trace's stage
    std::string cuts; // the stages' cuts as node indices ("" for one trace)
    std::vector<TraceImport> stages; // each trace over its stage
    TraceImport merged; // the profile's source: the one trace, or the stages merged
    std::string device; // the profile rows' device
    std::int64_t microBatch = 1;
    bool timeline = false; // every trace has iterations (forward or backward passes matched)
    // Why the timeline is not (to be) stored as a run; empty: it is.
    std::string timelineNote;
    std::int64_t runId = 0; // the stored run, after saveTraceFiles (0: none)
};

// The device kind of a trace's rows where the request names none: the CPU for a CPU-only trace, the
// catalog GPU its device properties match, else "cuda".
[[nodiscard]] std::string traceDevice(const TraceImport& trace);

// Micro-batches (forward passes) per iteration and whether they run F B F B ("1f1b": gradient
// accumulation, 1F1B on one stage) or F F B B ("gpipe"). Throws ps::Error when iterations disagree.
[[nodiscard]] std::pair<int, std::string> timelineShape(const std::vector<TraceIteration>& iterations);

// Reads and aligns every trace with the project's nodes and decides what would be stored; writes
// nothing. Throws ps::Error naming the file: a trace that maps onto nothing, one under the request's
// minimum coverage (unless a dry run), cuts that do not fit the traces or the model.
[[nodiscard]] TraceFilesImport readTraceFiles(const TraceFilesRequest& request);

// Stores `read`'s imported profile and, where its timelineNote is empty, its timeline as a finished
// run (one device per trace); sets and returns read.runId (0: no run). Not for a dry run.
std::int64_t saveTraceFiles(const TraceFilesRequest& request, TraceFilesImport& read);

} // namespace ps::profiler
