// An imported trace's activities as a measured timeline (trace_import.h's TraceIteration).
//
// Rules:
// - Iterations are the PyTorch profiler's `ProfilerStep#N` ranges (torch.profiler.schedule with
//   prof.step()); an activity belongs to the one its start falls in, a kernel to the one its launch
//   falls in (the host runs ahead of the GPU). A trace without them is one
//   iteration from its first to its last attributed activity, except where all of its work is
//   forward passes (a forward benchmark, inference): then each pass is an iteration.
// - Within an iteration, node activities in start order form passes: a new action starts when the
//   phase changes (forward/backward) or the pass starts over: a forward activity at or before the
//   first node of the current forward (in graph order), a backward one at or after the last node
//   of the current backward. So F0 B0 F1 B1 (gradient accumulation) and F0 F1 B0 B1 both read as
//   two micro-batches.
// - Activities under an optimizer step range (`Optimizer.step#AdamW.step`) form the iteration's
//   one optimizer action (zero_grad, at the iteration's start, is not part of it).
// Depends on: trace_import.h.
#pragma once

#include "trace_import.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace ps::profiler {

struct TimedActivity
{
    double startNs = 0;
    double endNs = 0;
    TraceActionKind kind = TraceActionKind::Forward;
    // Graph order of the node it belongs to (a scope's first node forward, its last backward);
    // unused for the optimizer.
    std::size_t node = 0;
    double anchorNs = -1; // host time that places it in an iteration (a kernel's launch); <0: startNs
};

// `steps` are the ProfilerStep ranges (start, end), any order; without them the `Optimizer.step`
// ranges (host time) end the iterations where there are two or more.
[[nodiscard]] std::vector<TraceIteration> buildTraceTimeline(std::vector<TimedActivity> activities,
    std::vector<std::pair<double, double>> steps, std::vector<std::pair<double, double>> optimizerRanges = {});

// "ProfilerStep#3" and the like.
[[nodiscard]] bool isProfilerStep(std::string_view name);
// "Optimizer.step#AdamW.step", "optimizer.step".
[[nodiscard]] bool isOptimizerRange(std::string_view name);

// Whether a range, operator or kernel is communication: c10d's ops (`c10d::send`, `c10d::recv_`,
// `c10d::allreduce_`), the process group's ranges (`gloo:recv`, `nccl:all_reduce`,
// `record_param_comms`) and NCCL's kernels (`ncclKernel_*`, `ncclDevKernel_*`).
[[nodiscard]] bool isCommunication(std::string_view name);

// Whether a device activity is a copy from host to device memory: Kineto's "Memcpy HtoD (Pageable ->
// Device)", CUPTI's and the Nsight export's "memcpy HtoD" (case-insensitive).
[[nodiscard]] bool isHostToDeviceCopy(std::string_view name);

// A kernel's name as a person reads it in a table: a C++ signature (a leading "void " or a "::")
// without that "void ", each template argument list written "<...>", the parameter list dropped
// ("(anonymous namespace)" kept); any name at most 100 characters.
// "void at::native::elementwise_kernel<128, 2, ...>(int, ...)" is "at::native::elementwise_kernel<...>".
[[nodiscard]] std::string shortKernelName(std::string_view name);

} // namespace ps::profiler
