// A PatrickStar-style chunk manager for one pipeline stage (Fang et al., "PatrickStar: Parallel
// Training of Pre-trained Models via Chunk-based Memory Management"), the runtime twin of core's
// plan/chunk_plan.h. The engine trains in fp32, so a chunk list holds fp32 parameters, and the
// gradients and optimizer moments (AdamW m and v, SGD momentum) have lists of the same layout.
//
// Owns: the chunk-tensor mapping (§6.1, via core's buildChunkLayout), each chunk's home (device or
// host, §8.2: chunks go to the device while its margin has room, the rest stay on the host), the
// Access/Release of a host chunk's parameters around each op that reads them (§6.2: uploaded
// before, released after), eviction of the uploaded chunk whose next use is latest when the
// device is full (§8.3, over the stage's known op order), gradients accumulated into the chunk's
// home, the optimizer step where the optimizer-state chunk lives (CPU Adam for host chunks), and
// counts of moves, bytes and optimizer elements on each side.
// Callers pin chunks from the device's worker thread only; a manager is not shared.
// Depends on: backend.h, cpu/ndarray.h, core (plan/chunk_plan.h); no Qt, no CUDA.
#pragma once

#include "backend.h"
#include "plan/chunk_plan.h"

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace ps::engine {

// A chunk manager's counts. Moves and bytes are per iteration (takeIterationCounts resets them);
// the placement fields describe the chunks as they are now.
struct ChunkStats
{
    int chunks = 0;
    int hostChunks = 0; // chunks whose parameters, gradients and optimizer states live on the host
    std::int64_t chunkElements = 0;
    std::int64_t deviceChunkBytes = 0; // model data placed on the device (not counting uploads)
    std::int64_t hostChunkBytes = 0; // model data on the host
    std::int64_t uploads = 0; // host -> device chunk moves (Access)
    std::int64_t evictions = 0; // device -> host chunk moves (§8.3, and before CPU Adam)
    std::int64_t bytesUp = 0;
    std::int64_t bytesDown = 0; // evictions and gradients accumulated into host chunks
    std::int64_t hostOptimizerElements = 0; // parameters updated by CPU Adam/SGD
    std::int64_t deviceOptimizerElements = 0;

    ChunkStats& operator+=(const ChunkStats& o);
};

// `pipestudio train --chunks`: stages keep their model data in chunk managers.
struct ChunkOptions
{
    bool enabled = false;
    std::int64_t chunkElements = 0; // 0: chosen per stage from its largest parameter (ChunkManager)
};

struct ChunkParameterShape
{
    TensorId id;
    Shape shape;
};

class ChunkManager
{
public:
    static constexpr std::size_t kNoUse = std::numeric_limits<std::size_t>::max();

    // `parameters` in the order the stage's ops first read them (§6.1's initialisation order);
    // `chunkElements` 0: the smallest size from the largest parameter to four times it that
    // wastes at most a tenth of the chunk space (else the least wasteful). `optimizerSlots`: 2
    // for AdamW (m, v), 1 for SGD (momentum). Every chunk starts on the host; parameters are zero.
    ChunkManager(std::span<const ChunkParameterShape> parameters, std::int64_t chunkElements, int optimizerSlots,
        const Backend& backend, Allocator& device, Allocator& host);

    [[nodiscard]] const ChunkLayout& layout() const
    {
        return m_layout;
    }
    [[nodiscard]] int chunkCount() const
    {
        return m_layout.chunkCount();
    }
    [[nodiscard]] int optimizerSlots() const
    {
        return static_cast<int>(m_states.size());
    }
    [[nodiscard]] int chunkOf(std::size_t parameter) const
    {
        return m_layout.slots[parameter].chunk;
    }
    // Views into the chunks, by parameter index (the constructor's order).
    [[nodiscard]] const NdArray& parameter(std::size_t k) const
    {
        return m_params[k];
    }
    [[nodiscard]] const NdArray& gradient(std::size_t k) const
    {
        return m_grads[k];
    }
    [[nodiscard]] const NdArray& optimizerState(int slot, std::size_t k) const
    {
        return m_states[static_cast<std::size_t>(slot)][k];
    }
    [[nodiscard]] bool onHost(int chunk) const
    {
        return !m_onDevice[static_cast<std::size_t>(chunk)];
    }
    // A host chunk whose parameters are uploaded now.
    [[nodiscard]] bool uploaded(int chunk) const;

    // The chunks each moment (one op's forward, backward or recompute) accesses, in the order of an
    // iteration; next uses for §8.3 are looked up in it.
    void setMoments(std::vector<std::vector<int>> moments);
    // Bytes of uploaded host chunks kept on the device between their accesses (their parameters
    // stay until evicted); past it, Access evicts. 0: only the chunks an op computes on.
    void setCacheBytes(std::int64_t bytes)
    {
        m_cacheBytes = bytes;
    }
    // The most host-chunk parameter bytes one moment pins: the device must hold them with its
    // non-model data.
    [[nodiscard]] std::int64_t pinnedBytesPerMoment() const;

    // §6.2 Access: pins the chunks and uploads those on the host (evicting per §8.3 first when
    // the cache is full, and again when the device allocator is). Throws OutOfMemoryError when
    // nothing is left to evict. Release unpins; the parameters stay until evicted.
    void access(std::span<const int> chunks, std::size_t moment);
    void release(std::span<const int> chunks);
    // Evicts every uploaded host chunk (the end of an iteration: CPU Adam reads them on the host).
    void evictAll();

    // §8.2: makes a host chunk a device chunk (parameters, gradients and optimizer states moved to
    // the device). Returns the device bytes it took. Throws OutOfMemoryError when they do not fit.
    std::int64_t moveHome(int chunk);
    // The device bytes moveHome(chunk) would take.
    [[nodiscard]] std::int64_t moveHomeBytes(int chunk) const;

    // grad_k += grad, in the chunk's home (a gradient of a host chunk goes down to the host).
    void accumulateGradient(std::size_t k, const NdArray& grad);
    // One update of every parameter, each where its optimizer-state chunk lives (host chunks
    // evicted first), then every gradient zeroed.
    void adamw(const AdamWUpdate& update);
    void sgd(const SgdUpdate& update);

    // Placement now and the moves since the last call.
    [[nodiscard]] ChunkStats takeIterationCounts();
    [[nodiscard]] std::size_t nextUse(int chunk, std::size_t moment) const;

private:
    [[nodiscard]] std::int64_t chunkBytes() const
    {
        return m_layout.chunkElements * 4;
    }
    void upload(int chunk, std::size_t moment);
    // §8.3: the uploaded, unpinned chunk used latest after `moment`; -1 when none.
    [[nodiscard]] int victim(std::size_t moment) const;
    void evict(int chunk);
    template <typename Update> void step(Update&& update);

    const Backend& m_backend;
    Allocator& m_device;
    Allocator& m_host;
    ChunkLayout m_layout;
    std::vector<NdArray> m_paramChunks, m_gradChunks; // by chunk
    std::vector<std::vector<NdArray>> m_stateChunks; // by optimizer slot, by chunk
    std::vector<NdArray> m_params, m_grads; // by parameter: views into the chunks
    std::vector<std::vector<NdArray>> m_states; // by optimizer slot, by parameter
    std::vector<char> m_onDevice; // by chunk: its home is the device
    std::vector<int> m_pins; // by chunk
    std::vector<std::vector<std::size_t>> m_uses; // by chunk: the moments accessing it, ascending
    std::vector<std::vector<int>> m_moments; // by moment: the chunks it accesses
    std::int64_t m_cacheBytes = 0;
    std::int64_t m_uploadedBytes = 0;
    ChunkStats m_counts;
};

} // namespace ps::engine
