// Trace import: a measured timeline recorded by another tool, mapped onto the nodes of a graph.
//
// Owns: reading Nsight Systems SQLite exports (`nsys export --type sqlite`) and PyTorch profiler
// JSON traces (`prof.export_chrome_trace()`, Kineto or the legacy array form), checking their
// schema, and attributing each measured activity to a node:
// - Activities are device kernels, memcpys and memsets when the trace has any (their time is
//   device time); in a CPU-only trace they are the self times of the CPU events, so nested ops
//   are never counted twice (a ProfilerStep range's self time, Python's and the profiler's own
//   between operators, is no activity).
// - An activity belongs to the innermost range enclosing its launch (the CUDA API call of a
//   kernel, on that call's thread; the CPU event itself in a CPU-only trace) whose name, or the
//   name less a phase suffix, is a node name (`h.3.attn.c_proj.matmul`) or a scope (`h.3.attn`,
//   every node under it, split by the op formulas' FLOPs). Innermost wins.
// - Backward when the range name ends in `.backward`, `:backward`, `/backward`, `.bwd`, `:bwd` or
//   `_bwd`; or an enclosing range is a backward marker (`backward`, an autograd function such as
//   `AddmmBackward0`, `autograd::engine::evaluate_function: ...`); or the launching thread is
//   PyTorch's autograd thread (`pt_autograd_*`). Forward otherwise (or with `.forward`, `:fwd`...).
// - A backward op outside every node range (PyTorch runs backward outside the forward's
//   record_function ranges) is linked to its forward op by the autograd sequence number (Kineto
//   args "Sequence number" / "Fwd thread id") and takes that op's node.
// - Communication (c10d/gloo/NCCL collectives and point-to-point ops, `record_param_comms`, NCCL
//   kernels) outside every node is counted as such, with the optimizer's work: neither is node work
//   nor unmatched (a pipeline rank's trace waits in its receives).
// - Activities left without a node are counted, with their time and most frequent names.
// A node's time is the mean per occurrence (distinct ranges that fed it), so a trace of several
// iterations or micro-batches gives the time of one micro-batch.
// Depends on: core (Graph, Profile, op costs, sqlite wrapper); no Qt, no CUDA.
#pragma once

#include "cost/profile.h"
#include "graph/graph.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace ps::profiler {

struct ImportedNodeTime
{
    double forwardNs = 0; // mean per occurrence
    double backwardNs = 0;
    std::int64_t forwardOccurrences = 0;
    std::int64_t backwardOccurrences = 0;
};

struct UnmatchedName
{
    std::string name;
    std::int64_t count = 0;
    double totalNs = 0;
};

// The trace as a measured timeline of one device: per iteration (a `ProfilerStep#N` range of the
// PyTorch profiler's schedule; else the whole trace), its forward and backward passes (micro-batches
// of gradient accumulation) and its optimizer step. Built by trace_timeline.h's rules.
enum class TraceActionKind : std::uint8_t { Forward, Backward, Optimizer };

struct TraceAction
{
    TraceActionKind kind = TraceActionKind::Forward;
    int microBatch = 0; // forwards and backwards counted separately from 0; the optimizer: 0
    double startNs = 0; // first activity attributed to it
    double endNs = 0; // last one's end
};

struct TraceIteration
{
    double startNs = 0;
    double endNs = 0;
    // Delimited by a ProfilerStep range; else by the optimizer steps (from the previous one's end to
    // its own), or, with fewer than two, first to last action.
    bool marked = false;
    std::vector<TraceAction> actions; // by start time
};

// What operator alignment (op_alignment.h) did, when a trace's ranges covered under half of it.
struct AlignmentStats
{
    std::int64_t passes = 0; // forward passes aligned
    std::int64_t passesTooLarge = 0; // passes left unaligned: over 64 million cells with the graph
    std::int64_t operators = 0; // forward operators that launch work or compute (views left out)
    std::int64_t alignedOperators = 0;
    std::size_t nodesCovered = 0; // graph nodes (views left out) matched in at least one pass
    std::size_t nodes = 0; // graph nodes that compute (views left out)
};

struct TraceImport
{
    std::string format; // "nsys-sqlite", "kineto-json"
    std::string schemaVersion; // nsys EXPORT_SCHEMA_VERSION, Kineto schemaVersion or "legacy"
    bool deviceActivity = false; // kernels (true) or CPU self times (false)
    std::string gpuName; // the GPU the trace's properties name for its work ("" where it names none)
    std::int64_t gpuMemoryBytes = 0;
    std::vector<ImportedNodeTime> nodes; // by node id
    std::size_t nodesMatched = 0; // nodes with a forward or backward time
    std::int64_t activities = 0;
    std::int64_t matchedActivities = 0;
    std::int64_t unmatchedActivities = 0; // matched + unmatched + the kinds below = activities
    double totalNs = 0;
    double matchedNs = 0;
    double unmatchedNs = 0;
    std::int64_t optimizerActivities = 0; // inside optimizer ranges (Optimizer.step, zero_grad), no node's
    double optimizerNs = 0;
    std::int64_t communicationActivities = 0; // sends, receives, collectives: no node's
    double communicationNs = 0;
    // Host-to-device copies, and work of operators that initialise or copy tensors (`aten::uniform_`,
    // `normal_`, `rand`, `zeros`, `to`, `copy_`, ...), launched before the first range that maps onto
    // nodes: set-up such as the parameters' initialisation and their copy to the device
    // (`model.to("cuda")`), or a random input made on the device.
    std::int64_t setupActivities = 0;
    double setupNs = 0;
    // Host-to-device copies no node ran, after that: the input batches (data loading).
    std::int64_t inputCopyActivities = 0;
    double inputCopyNs = 0;
    std::int64_t ranges = 0; // ranges whose name is a node or scope
    // Module calls named after the graph's modules (with_stack traces, module_ranges.h): how many,
    // the module instances they stand for, and the calls not named (with why).
    std::int64_t moduleRanges = 0;
    std::size_t modules = 0;
    std::vector<std::string> modulesNotNamed;
    std::vector<UnmatchedName> unmatched; // most time first, at most 10
    std::vector<TraceIteration> iterations; // empty when no activity matched a node
    bool aligned = false; // the operators were aligned to nodes by order (op_alignment.h)
    AlignmentStats alignment;

    // The share of the forward and backward work (everything but the optimizer's, the
    // communication's, the set-up's and the input copies' time) attributed to nodes.
    [[nodiscard]] double coverage() const
    {
        const double work = totalNs - optimizerNs - communicationNs - setupNs - inputCopyNs;
        return work > 0 ? matchedNs / work : 0.0;
    }
};

// The nodes [first, end) in the graph's topological order a trace's operators may align with: a
// pipeline stage's, for the trace of the rank that ran it.
struct NodeWindow
{
    std::size_t first = 0;
    std::size_t end = static_cast<std::size_t>(-1);
};

// Reads `path` (kind detected from its content) and maps it onto `graph`. Throws ps::Error naming
// the file when it is not a trace this build reads (random bytes, a PipeStudio project, an SQLite
// file that is not an Nsight Systems export, an export of an unknown schema or without the tables
// needed, JSON that is not a trace). Only reads the file.
[[nodiscard]] TraceImport importTrace(const Graph& graph, const std::filesystem::path& path, NodeWindow window = {});

// One trace per pipeline rank, each imported over its stage's window, as one: every node's times
// from its own stage's trace, the counts and times summed, the unmatched names merged; iterations
// left to each stage's import. Throws when the counts differ.
[[nodiscard]] TraceImport mergeStageTraces(
    const std::vector<TraceImport>& stages, const std::vector<NodeWindow>& windows);

// The imported times as a profile (source "imported") for `deviceKind`, proportional to the
// micro-batch size the trace was recorded at; bytes follow the op formulas. Nodes the trace
// did not cover get zero time. The optimizer's time per parameter is the median of the
// iterations' optimizer steps, where the trace has Optimizer.step ranges.
[[nodiscard]] Profile toImportedProfile(
    const Graph& graph, const TraceImport& trace, const std::string& deviceKind, std::int64_t microBatch);

} // namespace ps::profiler
