// The CPU profiler: every node's forward and backward on the CPU backend timed inside whole
// training steps (median and spread over the repeats), plus each node alone on inputs from a real
// forward pass for its memory (and its time in isolation, for comparison), plus measured full
// training steps to check the per-node sum against. Writes profile rows with source
// "measured-cpu" for device kind "cpu".
// Depends on: engine (executor, kernels, optimizer), core (Profile, op costs); no Qt, no CUDA.
#pragma once

#include "backend.h"
#include "cost/profile.h"
#include "sample_stats.h"

#include <functional>
#include <string>
#include <vector>

namespace ps::profiler {

struct CpuProfileOptions
{
    int warmup = 2;
    int repeats = 5;
    std::uint64_t seed = 0;
    int threads = 0; // cores the GEMMs and vector loops share (a GemmTeam); 0: every allowed core
    engine::GemmPrecision gemm = engine::GemmPrecision::Fp32; // what a GPU's GEMMs compute with (CPU: fp32)
    // CPU: copies of the training step kept running meanwhile on the cores after the first `threads`
    // (`threads` each), as a pipeline's other CPU devices run beside the one measured, for machines
    // whose cores slow each other (shared caches and memory bandwidth, a lower all-core clock).
    // 0: measured alone. `pipestudio profile` runs coRunnersFor(threads, cores) of them, as many as
    // fit in memory (coRunnersThatFit), unless told --alone.
    int coRunners = 0;
};

struct NodeMeasurement
{
    SampleStats forwardNs;
    SampleStats backwardNs; // zero samples when no input needs a gradient
    std::int64_t outputBytes = 0; // new bytes the outputs hold (views: none)
    std::int64_t savedBytes = 0; // activations kept for backward plus the kernel's own state (masks, statistics)
    std::int64_t workspaceBytes = 0; // transient peak above what the node keeps
};

struct CpuProfileRun
{
    std::int64_t microBatch = 0;
    std::vector<NodeMeasurement> nodes; // by node id
    SampleStats stepNs; // whole training steps: forward, backward and an AdamW update
    double nodeSumNs = 0; // sum over nodes of median forward + backward, timed inside steps
    double isolatedSumNs = 0; // the same with each node run alone, repeatedly, on the same inputs
    double outsideNodesNs = 0; // per step, device time outside every node (GPU tracers; host clock: 0)
    SampleStats optimizerNs; // the AdamW update of every parameter, per step (no samples: no loss to train)
    int coRunners = 0; // copies of the step that ran on the other cores meanwhile
    std::int64_t stepPeakBytes = 0; // the executor's allocator peak over the whole steps timed first
};

// Throws ps::Error naming the node when one cannot run on the CPU backend. `progress` gets
// (nodes done, nodes total). options.coRunners copies of the step run on the other cores meanwhile
// (as many as they hold).
[[nodiscard]] CpuProfileRun measureOnCpu(const Graph& graph, const CpuProfileOptions& options,
    const std::function<void(std::size_t, std::size_t)>& progress = {});

// The copies of the step a profile at `threads` threads per device runs beside the measured one on
// `cores` cores: the other devices of a pipeline whose devices get `threads` cores each, so
// cores / threads - 1 (0 where one device takes every core).
[[nodiscard]] int coRunnersFor(int threads, int cores);

// An upper estimate of what one copy of `graph`'s training step on the CPU engine holds at its peak
// (checked against measured steps of a GPT-2, an MLP and a BERT in cpu_profiler_test), at the
// engine's widths (floating types as fp32, the rest as int64): each parameter eight times (its
// value, its gradient and the gradient's own buffer, a tied weight's second gradient, AdamW's two
// states, and two more for transient copies: a step of GPT-2's embeddings at a short sequence
// measured 5.8 times its parameters), every other tensor (activations, inputs, constants) twice
// (its value and its gradient, all alive at once), and every node's saved state and scratch.
[[nodiscard]] std::int64_t trainingStepBytesBound(const Graph& graph);

// How many of `wanted` co-runners of `graph` fit in half of `memoryBytes` (the other half for the
// measured copy and the rest of the machine); 0 memory (unknown): all of them.
[[nodiscard]] int coRunnersThatFit(const Graph& graph, int wanted, std::int64_t memoryBytes);

// The memory this process may still take: /proc/meminfo's MemAvailable, less where its cgroup
// (v2 memory.max less memory.current, or v1's limit less usage) leaves less; 0 where none is read.
[[nodiscard]] std::int64_t availableMemoryBytes();

// Linear models through two runs of the same graph at different micro-batch sizes (or one run,
// proportional to the micro-batch). The weight-gradient share of backward follows the op formulas.
[[nodiscard]] Profile toProfile(const Graph& graph, const CpuProfileRun& a, const CpuProfileRun& b);

} // namespace ps::profiler
