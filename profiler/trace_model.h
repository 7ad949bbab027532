// The format-neutral form of an imported trace (what the Nsight Systems and PyTorch readers fill)
// and the attribution of its activities to graph nodes (the rules are in trace_import.h).
// Depends on: core (Graph); no Qt, no CUDA.
#pragma once

#include "trace_import.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace ps::profiler {

// A CPU-side interval on one thread: an NVTX or record_function range, an op, an API call.
struct TraceSpan
{
    std::string name;
    std::int64_t thread = 0;
    double startNs = 0;
    double endNs = 0;
    std::int64_t sequence = -1; // autograd sequence number (Kineto "Sequence number"); -1: none
    bool op = false; // a framework operator (Kineto cpu_op, `aten::...`): what operator alignment reads
    // A Python function or module call (Kineto python_function, from with_stack): it encloses
    // operators but is no work of its own (its self time is the interpreter's, or a wait).
    bool python = false;
    std::vector<Shape> inputDims; // Kineto "Input Dims" (record_shapes); empty without them
    std::vector<NodeId> nodes; // set by operator alignment: the nodes this range stands for
    std::int64_t pass = -1; // set by operator alignment: the forward pass (one occurrence of the nodes)
};

// A device activity (kernel, memcpy, memset) and the API call that launched it.
struct TraceWork
{
    std::string name;
    double durationNs = 0;
    std::int64_t launchThread = -1; // -1: no launch record found
    double launchNs = 0;
    double startNs = 0; // on the device, same clock as the spans (Kineto and Nsight both align them)
};

// A GPU as the trace describes it (Kineto's deviceProperties).
struct TraceGpu
{
    std::string name; // "NVIDIA A100-SXM4-40GB"
    std::int64_t memoryBytes = 0; // totalGlobalMem
};

struct TraceData
{
    std::string format;
    std::string schemaVersion;
    std::vector<TraceSpan> spans;
    std::vector<TraceWork> work; // empty: a CPU-only trace, the spans' self times are the work
    std::map<std::int64_t, std::string> threadNames;
    TraceGpu gpu; // the GPU that ran most of the work's time, where the trace describes it (else empty)

    // PyTorch's autograd thread (`pt_autograd_*`): its work is backward.
    [[nodiscard]] bool autogradThread(std::int64_t thread) const;
};

// Attributes the activities of `data` to the nodes of `graph`.
[[nodiscard]] TraceImport mapTraceToNodes(const Graph& graph, const TraceData& data);

// Readers; both throw ps::Error naming `path`.
[[nodiscard]] TraceData readNsysSqlite(const std::filesystem::path& path);
[[nodiscard]] TraceData readChromeTraceJson(const std::filesystem::path& path, const std::string& text);

} // namespace ps::profiler
