// One pipeline stage on one device: the nodes [begin, end) of the graph's order, the tensors that
// cross its boundaries, its parameters, gradients and optimizer state, and the values of every
// micro-batch between its forward and its backward (1F1B keeps several in flight).
//
// Boundaries: the stage receives every activation produced before `begin` and read at or after it
// (a tensor read two stages later is relayed through the stage between, as the planner's cut
// bytes count it) and sends on every activation produced before `end` and read after it. Graph
// inputs (token ids, labels) come from the micro-batch's data on whichever stage reads them.
// Tied parameters (GPT-2's wte read by the embedding and the lm_head) have a copy in each stage
// that reads them; the runner sums their gradients across those stages before every update.
//
// Memory plans act on storages: a swapped storage is copied to the host pool after forward and
// back before backward (on the device's copy streams when it has them, else in the caller); a
// recomputed one is dropped after forward and refilled by re-running its producer (and,
// recursively, any dropped producer input) before backward. Dropout masks are drawn from a
// generator seeded by (run seed, iteration, micro-batch, node), so a recompute reproduces them
// and the values do not depend on which stage or device ran the node.
//
// With chunks (useChunks), parameters, gradients and optimizer states live in a ChunkManager
// (PatrickStar): every node that reads a parameter accesses its chunks around the kernel, in
// forward, recompute and backward, and the optimizer step runs where each chunk lives.
// Depends on: backend.h, runtime/copy_stream.h, runtime/chunk_manager.h, core (Graph,
// StageMemoryPlan); no Qt, no CUDA.
#pragma once

#include "backend.h"
#include "data.h"
#include "fusion.h"
#include "graph/graph.h"
#include "runtime/chunk_manager.h"
#include "runtime/copy_stream.h"
#include "sim/memory_model.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace ps::engine {

enum class BackwardMode { Full, InputOnly }; // InputOnly: zero-bubble's B; W follows later

// One micro-batch's graph inputs on the host by input name: int64 ones (token ids, labels) and
// fp32 ones (attention masks, features), each matched to the graph input's dtype.

struct StageOptimizerConfig
{
    std::string kind = "adamw"; // "adamw" or "sgd"
    double lr = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weightDecay = 0.01;
    double momentum = 0.9;
};

class StageExecutor
{
public:
    StageExecutor(const Graph& graph, StageId id, std::size_t begin, std::size_t end, const Backend& backend,
        Allocator& device, Allocator& hostPool, StageMemoryPlan memory, std::uint64_t seed);
    ~StageExecutor();
    StageExecutor(const StageExecutor&) = delete;
    StageExecutor& operator=(const StageExecutor&) = delete;

    [[nodiscard]] StageId id() const
    {
        return m_id;
    }
    [[nodiscard]] std::size_t begin() const
    {
        return m_begin;
    }
    [[nodiscard]] std::size_t end() const
    {
        return m_end;
    }
    // Activations received from the previous stage / sent to the next, in tensor-id order.
    [[nodiscard]] const std::vector<TensorId>& boundaryIn() const
    {
        return m_boundaryIn;
    }
    [[nodiscard]] const std::vector<TensorId>& boundaryOut() const
    {
        return m_boundaryOut;
    }
    [[nodiscard]] const std::vector<TensorId>& parameterIds() const
    {
        return m_paramIds;
    }
    [[nodiscard]] bool hasLoss() const
    {
        return m_lossSlot >= 0;
    }
    [[nodiscard]] Allocator& allocator()
    {
        return m_device;
    }

    // Parameter values from the host (fp32 bytes), before the first forward.
    void setParameter(TensorId id, std::span<const std::byte> bytes);
    [[nodiscard]] std::vector<std::byte> parameterBytes(TensorId id) const;
    // Chunk-managed model data from setOptimizer on (before it; synchronous schedules only).
    // `chunkElements` 0: the manager's default.
    void useChunks(std::int64_t chunkElements);
    void setOptimizer(const StageOptimizerConfig& config, bool weightStashing);
    // What the GEMMs compute with, where the backend has the choice (KernelContext::gemm).
    void setGemmPrecision(GemmPrecision precision)
    {
        m_gemm = precision;
    }
    // This stage's F/B/I/W actions of an iteration in schedule order: the op order the chunk
    // manager's eviction looks ahead in (§8.3). Without it, evictions take the first chunk.
    void setChunkActions(const std::vector<ActionType>& actions);
    // The chunk manager (null without chunks).
    [[nodiscard]] ChunkManager* chunks() const
    {
        return m_chunks.get();
    }
    // Optimizer moments (AdamW m and v, SGD momentum) of a parameter, for checkpoints.
    [[nodiscard]] std::vector<std::vector<std::byte>> optimizerState(TensorId id) const;
    void setOptimizerState(TensorId id, const std::vector<std::vector<std::byte>>& state, int steps);
    [[nodiscard]] int optimizerSteps() const
    {
        return m_optimizerSteps;
    }

    // The iteration the next forwards belong to (seeds the dropout masks).
    void beginIteration(std::int64_t iteration)
    {
        m_iteration = iteration;
        m_chunkAction = 0;
    }
    void receiveActivations(MicroBatchId mb, std::vector<NdArray> values);
    void forward(MicroBatchId mb, const HostBatch& batch);
    // The activations to send on (after forward). The swaps and drops the memory plan makes after
    // forward wait for outboundSent(): a boundary tensor may be one of them, and the send reads it.
    [[nodiscard]] std::vector<NdArray> takeOutbound(MicroBatchId mb);
    void outboundSent(MicroBatchId mb);
    [[nodiscard]] std::optional<double> loss(MicroBatchId mb) const;

    void receiveGradients(MicroBatchId mb, std::vector<NdArray> grads);
    void backward(MicroBatchId mb, BackwardMode mode);
    void backwardWeight(MicroBatchId mb);
    // Gradients of boundaryIn() to send back (undefined where none flows).
    [[nodiscard]] std::vector<NdArray> takeInputGradients(MicroBatchId mb);

    // Copies run on these streams (SWAP_OUT queued once the outbound message is taken, SWAP_IN as
    // a prefetch) and a backward waits for its micro-batch's; null: copies run in the caller.
    void setCopyStreams(CopyStream* toHost, CopyStream* fromHost)
    {
        m_toHost = toHost;
        m_fromHost = fromHost;
    }
    void swapOut(MicroBatchId mb);
    void swapIn(MicroBatchId mb);
    void recompute(MicroBatchId mb);

    // Gradient of a parameter as accumulated so far (undefined when no micro-batch reached it).
    [[nodiscard]] const NdArray& gradient(TensorId id) const;
    // Replaces a parameter's gradient (tied parameters: the sum over the stages sharing it).
    void setGradient(TensorId id, NdArray grad);
    // One update of every parameter with its gradient times gradScale, then gradients cleared.
    void optimizerStep(double lr, float gradScale);

    // Micro-batches between forward and the end of backward, and the most weight versions held at
    // once (PipeDream's stash: the current one plus those older in-flight micro-batches read; 1
    // without a stash, however old the weights an in-flight micro-batch's forward read).
    [[nodiscard]] std::size_t inFlight() const
    {
        return m_microBatches.size();
    }
    [[nodiscard]] int peakWeightVersions() const
    {
        return m_peakVersions;
    }

private:
    struct MicroBatch;
    // §6.2 Access/Release of the chunks a node's parameters live in, around its kernel.
    class NodeAccess
    {
    public:
        NodeAccess(StageExecutor& stage, std::size_t local)
            : m_stage(stage)
            , m_local(local)
        {
            m_stage.accessNode(local);
        }
        ~NodeAccess()
        {
            m_stage.releaseNode(m_local);
        }
        NodeAccess(const NodeAccess&) = delete;
        NodeAccess& operator=(const NodeAccess&) = delete;

    private:
        StageExecutor& m_stage;
        std::size_t m_local;
    };
    [[nodiscard]] MicroBatch& state(MicroBatchId mb, const char* action);
    void loadConstant(TensorId t);
    void buildChunks(int optimizerSlots);
    void accessNode(std::size_t local);
    void releaseNode(std::size_t local);
    void startChunkAction()
    {
        ++m_chunkAction;
    }
    void writeInto(const NdArray& target, std::span<const std::byte> bytes);
    void chunkOptimizerStep(double lr, float gradScale);
    [[nodiscard]] int slotOf(TensorId id) const
    {
        return m_slot[id.index()];
    }
    void buildBoundaries();
    void buildKeepSets();
    void runNodeBackward(MicroBatch& s, std::size_t local, BackwardMode mode);
    // A node input's value in a forward: a parameter, a constant or the micro-batch's value.
    [[nodiscard]] const NdArray& forwardInput(const MicroBatch& s, const Node& node, TensorId in) const;
    // A fused chain (engine/fusion.h, stage_fusion.cpp) at its head in forward, at its Softmax in
    // backward; its inner nodes' values are left as their own kernels and keep sets would leave them.
    void forwardChain(MicroBatch& s, MicroBatchId mb, const SoftmaxChain& chain);
    void backwardChain(MicroBatch& s, const SoftmaxChain& chain);
    // A GEMM + bias chain at its MatMul in forward; both nodes' values as their kernels would leave them.
    void forwardGemmChain(MicroBatch& s, const GemmBiasChain& chain);
    // The batch's data inputs of this stage, copied to the device (throws naming a missing one).
    void loadDataInputs(MicroBatch& s, const HostBatch& batch);
    // After the last node's forward: the loss read back, the boundary outputs queued for sending,
    // the values no backward reads dropped, and the recomputed ones marked to drop.
    void finishForward(MicroBatch& s, MicroBatchId mb);
    void accumulateParameterGradient(int paramIndex, const NdArray& grad);
    // Recompute (stage_recompute.cpp): the local nodes a recompute of the micro-batch's dropped
    // storages runs, and one node's input as the recompute finds it (kept, refilled or recomputed).
    [[nodiscard]] std::vector<char> recomputeNodes(const MicroBatch& s) const;
    // `keep` (by tensor id: backward keeps it) gains the stage inputs a recompute of the planned
    // storages reads; sets m_recomputeFinds.
    void keepRecomputeInputs(std::vector<char>& keep);
    [[nodiscard]] NdArray recomputeInput(MicroBatch& s, std::size_t local, std::size_t j,
        const std::unordered_map<std::uint32_t, NdArray>& recomputed) const;
    void applyPending(MicroBatch& s, MicroBatchId mb);
    // Waits for the micro-batch's copies and brings back anything still on the host.
    void settleSwaps(MicroBatch& s);
    [[nodiscard]] std::vector<NdArray> swappedArrays(const MicroBatch& s) const;
    [[nodiscard]] std::uint64_t nodeSeed(MicroBatchId mb, NodeId node) const;
    // The engine node `node`'s forward for micro-batch `mb` draws from: m_nodeRng seeded with
    // nodeSeed where the node draws (Dropout, and Attention with its dropout), else m_idleRng.
    [[nodiscard]] std::mt19937_64& rngFor(MicroBatchId mb, const Node& node);
    void trackVersions();

    const Graph& m_graph;
    StageId m_id;
    std::size_t m_begin;
    std::size_t m_end;
    const Backend& m_backend;
    Allocator& m_device;
    Allocator& m_hostPool;
    CopyStream* m_toHost = nullptr;
    CopyStream* m_fromHost = nullptr;
    StageMemoryPlan m_memory;
    std::uint64_t m_seed;
    GemmPrecision m_gemm = GemmPrecision::Fp32;
    // The engine the passes that draw nothing get (backward kernels, fused GEMMs): seeding one takes
    // about 1.7 us, which per node and micro-batch was a tenth of a small model's step.
    std::mt19937_64 m_idleRng { 0 };
    std::mt19937_64 m_nodeRng { 0 }; // rngFor's, seeded per node that draws
    std::int64_t m_iteration = 0;

    std::vector<int> m_slot; // by tensor id: local value slot, -1 if the stage never touches it
    std::vector<TensorId> m_slotTensor;
    std::vector<bool> m_requiresGrad; // by tensor id
    std::vector<TensorId> m_boundaryIn, m_boundaryOut, m_dataInputs;
    std::vector<TensorId> m_roots; // by tensor id: storage root (views followed)
    // By local node: which inputs and outputs backward reads (op_cost's saved tensors, parameters,
    // graph inputs, and what a recompute of a dropped storage re-reads); the rest is released after
    // forward so the stage holds what the memory model counts.
    std::vector<std::vector<char>> m_keepIn, m_keepOut;
    std::vector<std::vector<char>> m_keepForWeight; // inputs a split backward's W reads, by local node
    std::vector<char> m_keepValue; // by slot: stays in the micro-batch's value table after forward
    // By tensor id: a recompute finds it in place (a backward keeps it, or it is no activation of
    // this stage); the activations of this stage it does not find are recomputed from their producers.
    std::vector<char> m_recomputeFinds;
    std::vector<std::vector<int>> m_releaseAfter; // by local node: slots whose last reader it is
    FusionPlan m_fusion;
    int m_lossSlot = -1;

    std::vector<TensorId> m_paramIds;
    std::vector<int> m_paramIndex; // by tensor id: index in m_paramIds, -1 otherwise
    std::vector<NdArray> m_params, m_grads, m_first, m_second;
    std::vector<NdArray> m_constants; // by slot
    StageOptimizerConfig m_optimizer;
    bool m_weightStashing = false;
    int m_optimizerSteps = 0;
    int m_version = 0;
    int m_peakVersions = 1;

    std::map<std::uint32_t, MicroBatch> m_microBatches; // by micro-batch id

    std::int64_t m_chunkElements = -1; // -1: no chunks
    std::unique_ptr<ChunkManager> m_chunks;
    std::vector<int> m_chunkIndex; // by parameter index: index in the chunk manager
    std::vector<std::vector<int>> m_nodeChunks; // by local node: the chunks its parameters are in
    std::vector<std::vector<std::size_t>> m_momentOf; // by F/B/I/W action, by local node
    std::size_t m_chunkAction = 0; // F/B/I/W actions started this iteration
    std::size_t m_moment = 0; // the last moment accessed
};

} // namespace ps::engine
