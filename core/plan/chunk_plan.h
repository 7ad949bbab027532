// PatrickStar (Fang et al., "PatrickStar: Parallel Training of Pre-trained Models via Chunk-based
// Memory Management") as a planning model: what a chunk-based heterogeneous (CPU + GPU) memory
// manager does over one training iteration of a graph, and what that costs.
//
// Owns: the chunk-tensor mapping (§6.1: four mirrored chunk lists, 2+4+4+4 = 14 B/param, grad
// fp16 reusing the param fp16 chunk), the chunk-size search, the tensor states of §6.2 and the
// Access/Release replay of Algorithms 1-4 over the op order (forward, then backward with
// activation recomputation, then ADAM), the warm-up statistics of §8.1 (non-model memory per
// moment), eviction of the chunk needed latest (§8.3), optimizer-state chunks in the GPU margin
// (§8.2), the host-memory limit and ZeRO-style sharding over data-parallel GPUs (§7).
// The replay stands for rank 0; every rank owns the same number of equal-sized chunks.
// Depends on: graph/, cost/profile.h, cluster/cluster.h.
#pragma once

#include "cluster/cluster.h"
#include "cost/profile.h"
#include "cost/runtime_memory.h"
#include "graph/graph.h"

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

// §6.1: four chunk lists with the same (chunk, offset) layout. Grad fp16 has no list: a
// parameter's gradient is copied into its param fp16 slot once the parameter is no longer needed.
enum class ChunkList : std::uint8_t { ParamFp16, ParamFp32, Momentum, Variance };
inline constexpr std::array<double, 4> kChunkListElementBytes { 2, 4, 4, 4 };
inline constexpr double kChunkBytesPerParameter = 14; // 2 + 4 + 4 + 4
inline constexpr double kOptimizerChunkBytesPerParameter = 12; // param fp32 + momentum + variance
inline constexpr double kHostParameterBytes = 16; // a CPU embedding in fp32 with ADAM (§8.2)

struct ChunkParameter
{
    TensorId tensor;
    std::int64_t elements = 0;
};

// Where a parameter lives in every list.
struct ChunkSlot
{
    TensorId tensor;
    std::int32_t chunk = 0;
    std::int64_t offset = 0; // elements from the chunk's start
    std::int64_t elements = 0;
};

struct ChunkLayout
{
    std::int64_t chunkElements = 0; // 0: no layout
    int processes = 1; // data-parallel ranks (nproc)
    std::vector<ChunkSlot> slots; // in parameter order
    std::vector<std::int64_t> usedElements; // per chunk of one list; padding chunks hold 0

    [[nodiscard]] int chunkCount() const
    {
        return static_cast<int>(usedElements.size());
    }
    // §7: a communication group is `processes` consecutive chunks, chunk i owned by rank i mod p.
    [[nodiscard]] int groupOf(int chunk) const
    {
        return chunk / processes;
    }
    [[nodiscard]] int ownerOf(int chunk) const
    {
        return chunk % processes;
    }
    [[nodiscard]] int localChunkCount() const
    {
        return chunkCount() / processes;
    }
    [[nodiscard]] double chunkBytes(ChunkList list) const
    {
        return static_cast<double>(chunkElements) * kChunkListElementBytes[static_cast<int>(list)];
    }
    [[nodiscard]] std::int64_t parameterElements() const;
    // Share of the allocated elements no parameter uses (tails and padding chunks).
    [[nodiscard]] double wasteFraction() const;
};

// §6.1 BUILD_CHUNK_LISTS: parameters in order, a new chunk when the next one does not fit the
// current chunk's remaining space; the chunk count is padded to a multiple of `processes` so
// every communication group is complete. Throws ps::Error naming a parameter larger than a chunk.
[[nodiscard]] ChunkLayout buildChunkLayout(
    std::span<const ChunkParameter> parameters, std::int64_t chunkElements, int processes);

// The parameters of a graph in the order ops first read them. With `embeddingOnCpu` (§8.2)
// the parameters an Embedding op reads stay out of the chunks, in `host`.
struct ChunkParameters
{
    std::vector<ChunkParameter> chunked;
    std::vector<ChunkParameter> host;
};
[[nodiscard]] ChunkParameters chunkParameters(const Graph& graph, bool embeddingOnCpu);

// The paper gives no chunk-size search (§9.2.1 only states the failure condition). This follows
// PatrickStar's reference script (best_chunk_size_search.py): build the layout for each size and
// keep the valid one with the least wasted chunk space. A size is valid when it holds the largest
// parameter, when one gathered fp16 communication group fits the GPU room left at peak non-model
// memory, and when this rank's 14 B/param chunks fit that room plus its host share.
struct ChunkSizeLimits
{
    double gpuChunkBytes = 0; // GPU memory minus peak non-model memory
    double hostChunkBytes = 0; // this rank's share of host memory for chunks
};
struct ChunkSizeTrial
{
    std::int64_t chunkElements = 0;
    double wasteFraction = 0;
    bool valid = false;
    std::string reason; // why not, when invalid
};
struct ChunkSizeSearch
{
    ChunkLayout layout; // the chosen size; chunkElements == 0 when none is valid
    std::vector<ChunkSizeTrial> trials;
};
[[nodiscard]] ChunkSizeSearch searchChunkSize(std::span<const ChunkParameter> parameters, int processes,
    std::span<const std::int64_t> candidates, const ChunkSizeLimits& limits);
// Multiples of 2^20 elements from the largest parameter up to 2^27 (the reference code's default
// is 2^25), or just the largest parameter when it is larger.
[[nodiscard]] std::vector<std::int64_t> defaultChunkSizeCandidates(std::int64_t largestParameter);

// §6.2 Table 1.
enum class TensorState : std::uint8_t { Free, Compute, Hold, HoldAfterFwd, HoldAfterBwd };
[[nodiscard]] std::string_view toString(TensorState state);

enum class ChunkPhase : std::uint8_t { Forward, Recompute, Backward, Adam };
[[nodiscard]] std::string_view toString(ChunkPhase phase);

// One operator of the iteration: a "moment" of §8.1 (the paper samples at each operator's start
// and finish; one moment per operator holds that operator's peak).
struct ChunkMoment
{
    ChunkPhase phase = ChunkPhase::Forward;
    NodeId node;
    std::vector<TensorId> parameters; // chunk-managed parameters the op accesses
    double nonModelBytes = 0; // activations, gradients and scratch alive during the op
    double computeNs = 0;
    double hostTrafficBytes = 0; // CPU<->GPU bytes outside chunks (CPU embedding, tied weights)
};

// §8.1's warm-up statistics, computed from the profile instead of measured: the operators of
// one iteration in execution order and the non-model memory of each.
struct WarmupTrace
{
    std::vector<ChunkMoment> moments; // forward, then backward (recompute before each segment)
    double peakNonModelBytes = 0;
    double flops = 0; // forward + backward + recomputed forward, one device
};
struct TraceOptions
{
    double microBatch = 1; // samples per device
    // §9.1: every system trains with activation checkpointing; a segment is a transformer block
    // (the nodes of one layer), its input kept and its forward re-run before its backward.
    bool activationCheckpointing = true;
    bool embeddingOnCpu = true; // §8.2: embedding ops on the CPU, only activations cross PCIe
};
[[nodiscard]] WarmupTrace traceIteration(const Graph& graph, const Profile& profile, const TraceOptions& options);

enum class EvictionPolicy : std::uint8_t {
    LatestNextUse, // §8.3: the chunk whose next use on the device is latest
    ChunkListOrder, // §8.1's warm-up rule: in the order of the chunk list
};

struct ReplaySetup
{
    double gpuBytes = 0; // the "overall GPU memory" for chunks and non-model data
    std::vector<char> optimizerOnGpu; // per chunk: its OS chunks live (and ADAM runs) on the GPU
    EvictionPolicy policy = EvictionPolicy::LatestNextUse;
    int warmupIterations = 1; // replayed first with ChunkListOrder; the next one is measured
};

struct ChunkEviction
{
    std::size_t moment = 0; // index in the measured iteration (trace moments, then ADAM)
    int chunk = 0;
};

enum class ChunkLocation : std::uint8_t { None, Cpu, Gpu };

// The measured iteration of one rank.
struct ReplayResult
{
    bool feasible = true;
    std::string reason;
    std::size_t failedMoment = 0; // the moment that did not fit, when infeasible
    double gpuPeakBytes = 0; // non-model + chunks
    double gpuChunkPeakBytes = 0;
    double hostPeakBytes = 0; // chunk payloads (fp16 and optimizer states) on the host
    double uploadBytes = 0; // CPU -> GPU chunk moves
    double downloadBytes = 0; // GPU -> CPU chunk moves (evictions, gradients for CPU ADAM)
    int moves = 0;
    int allGathers = 0;
    int reduceScatters = 0;
    double collectiveBytes = 0; // received by this rank in all-gathers and reduce-scatters
    double cpuAdamElements = 0;
    double gpuAdamElements = 0;
    std::vector<ChunkEviction> evictions;
    std::vector<double> gpuChunkBytes; // per moment, after its accesses
    std::vector<TensorState> finalStates; // per slot of the layout
    std::vector<ChunkLocation> finalLocations; // per chunk
};

// Replays Algorithms 1-4 for rank 0 over `moments` (warm-up iterations, then one measured), with
// an ADAM moment per local chunk after the backward.
[[nodiscard]] ReplayResult replayChunks(
    const ChunkLayout& layout, std::span<const ChunkMoment> moments, const ReplaySetup& setup);

struct ChunkPlanOptions
{
    double microBatch = 8; // samples per GPU
    bool activationCheckpointing = true;
    bool embeddingOnCpu = true;
    bool optimizerInMargin = true; // §8.2
    // Reference-code behaviour the paper does not describe: PatrickStar's preprocessing context
    // builds the parameters in host memory and copies them into chunks there, so host memory
    // must hold every local chunk once before the warm-up moves any to the GPU.
    bool initializeOnHost = false;
    EvictionPolicy eviction = EvictionPolicy::LatestNextUse;
    // The paper leaves "overall GPU memory" open; PatrickStar's reference code uses 0.8 of the
    // device and 0.8 of the host (overall_gpu_mem_ratio, overall_cpu_mem_ratio).
    double gpuMemoryFraction = 0.8;
    double hostMemoryFraction = 0.8;
    // What a PyTorch process holds on the GPU besides its tensors, and the caching allocator's
    // rounding and fragmentation, as measured (cost/runtime_memory.h). Every system's GPU memory
    // goes through both (PatrickStar's 0.8 share binds first).
    double contextBytes = RuntimeMemory {}.contextBytes;
    double allocatorOverhead = RuntimeMemory {}.allocatorOverhead;
    // The GPU bytes the allocator can hand out to tensors of a device with `deviceBytes`.
    [[nodiscard]] double usableGpuBytes(double deviceBytes) const
    {
        return RuntimeMemory { contextBytes, allocatorOverhead }.usableBytes(deviceBytes);
    }
    std::int64_t chunkElements = 0; // 0: search (searchChunkSize)
    // Host memory traffic a vectorised CPU ADAM sustains for the whole node (the paper gives no
    // CPU figure): read grad fp16 + param fp32/m/v, write param fp32/m/v + param fp16.
    double cpuAdamBytesPerSecond = 50e9;
    double adamBytesPerParameter = 28; // 2 + 12 read, 12 + 2 written
    double gpuBandwidthEfficiency = 0.7; // of the device's memory bandwidth, for GPU ADAM
};

struct IterationEstimate
{
    double computeNs = 0; // forward + backward + recompute from the profile
    double transferNs = 0; // CPU<->GPU over the device's host link
    double collectiveNs = 0; // all-gather / reduce-scatter (and all-reduce) over the peer link
    double cpuAdamNs = 0;
    double gpuAdamNs = 0;
    [[nodiscard]] double totalNs() const
    {
        return computeNs + transferNs + collectiveNs + cpuAdamNs + gpuAdamNs;
    }
};

struct ChunkPlan
{
    ChunkLayout layout;
    std::vector<ChunkSizeTrial> chunkSizes;
    WarmupTrace trace;
    std::vector<double> chunkableBytes; // per moment: GPU memory - non-model memory (§8.1)
    double gpuBudgetBytes = 0;
    double hostBudgetBytes = 0; // for the node
    double marginBytes = 0; // §8.2: GPU memory - peak non-model - resident fp16 chunks
    int optimizerChunksOnGpu = 0; // local OS chunk sets placed in the margin
    double hostParameterBytes = 0; // per rank: non-chunk (embedding) parameters on the host
    ReplayResult replay;
    double gpuPeakBytes = 0; // per device
    double hostBytes = 0; // the node's host memory for model data
    double cpuGpuBytes = 0; // moved CPU<->GPU per iteration, per device
    IterationEstimate time;
    double tflopsPerGpu = 0;
    bool feasible = false;
    std::string reason; // why not, when infeasible
};

// The link the data-parallel collectives run over: the peer link inside one node, the slower of
// the peer and inter-node links across nodes.
[[nodiscard]] const LinkSpec& collectiveLink(const Cluster& cluster);

// PatrickStar on `cluster` (every device trains one data-parallel replica; hostMemoryBytes is
// per node). Infeasible plans say why: no chunk size fits, the GPU cannot hold the non-model
// data and the chunks an op computes on, or the host cannot hold what is kept there.
[[nodiscard]] ChunkPlan planChunks(
    const Graph& graph, const Profile& profile, const Cluster& cluster, const ChunkPlanOptions& options);

} // namespace ps
