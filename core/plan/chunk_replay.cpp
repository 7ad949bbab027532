// PatrickStar's runtime side, replayed: Access/Release (Algorithms 1-2) with the remote-chunk
// all-gather and gradient reduce-scatter of §7 (Algorithms 3-4), chunk eviction (§8.3), and ADAM
// on the device that holds each chunk's optimizer states (§8.2).
#include "graph/graph_summary.h"
#include "plan/chunk_plan.h"
#include "util/error.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace ps {
namespace {

    class ChunkReplayer
    {
    public:
        ChunkReplayer(const ChunkLayout& layout, std::span<const ChunkMoment> moments, const ReplaySetup& setup)
            : m_layout(layout)
            , m_moments(moments)
            , m_setup(setup)
            , m_p(layout.processes)
            , m_fp16Bytes(layout.chunkBytes(ChunkList::ParamFp16))
            , m_osBytes(static_cast<double>(layout.chunkElements) * kOptimizerChunkBytesPerParameter)
        {
            setupSlots();
            setupNextUse();
            setupPlacement();
        }

        ReplayResult run()
        {
            for (int i = 0; i < m_setup.warmupIterations && m_result.feasible; ++i)
                runIteration(EvictionPolicy::ChunkListOrder);
            if (!m_result.feasible)
                return std::move(m_result);
            resetStatistics();
            runIteration(m_setup.policy);
            for (std::size_t c = 0; c < m_location.size(); ++c)
                m_result.finalLocations.push_back(m_location[c]);
            m_result.finalStates = m_state;
            return std::move(m_result);
        }

    private:
        bool local(int chunk) const
        {
            return m_layout.ownerOf(chunk) == 0;
        }
        int iterationLength() const
        {
            return static_cast<int>(m_moments.size()) + m_layout.localChunkCount();
        }

        void setupSlots()
        {
            std::unordered_map<TensorId, std::uint32_t> slotOf;
            m_chunkSlots.resize(static_cast<std::size_t>(m_layout.chunkCount()));
            for (std::uint32_t s = 0; s < m_layout.slots.size(); ++s) {
                slotOf[m_layout.slots[s].tensor] = s;
                m_chunkSlots[static_cast<std::size_t>(m_layout.slots[s].chunk)].push_back(s);
            }
            for (const auto& m : m_moments) {
                auto& slots = m_momentSlots.emplace_back();
                for (auto t : m.parameters) {
                    const auto it = slotOf.find(t);
                    if (it == slotOf.end())
                        throw Error("chunk replay: parameter tensor " + std::to_string(t.value)
                            + " is accessed but not in the chunk layout");
                    slots.push_back(it->second);
                }
            }
        }

        // §8.3 needs each chunk's uses on the GPU from the warm-up: its group's accesses (the
        // all-gather needs the local chunk there) and, for OS chunks on the GPU, its ADAM.
        void setupNextUse()
        {
            m_uses.resize(static_cast<std::size_t>(m_layout.chunkCount()));
            for (std::size_t m = 0; m < m_momentSlots.size(); ++m) {
                for (auto s : m_momentSlots[m]) {
                    const int owner = m_layout.groupOf(m_layout.slots[s].chunk) * m_p;
                    auto& uses = m_uses[static_cast<std::size_t>(owner)];
                    if (uses.empty() || uses.back() != static_cast<int>(m))
                        uses.push_back(static_cast<int>(m));
                }
            }
        }

        void setupPlacement()
        {
            const auto count = static_cast<std::size_t>(m_layout.chunkCount());
            m_location.assign(count, ChunkLocation::None);
            m_pinned.assign(count, 0);
            m_computing.assign(count, 0);
            m_state.assign(m_layout.slots.size(), TensorState::Free);
            int adamMoment = static_cast<int>(m_moments.size());
            for (int c = 0; c < m_layout.chunkCount(); ++c) {
                if (!local(c))
                    continue;
                // After initialisation the payload is on the host and its tensors HOLD (§6.2).
                m_location[static_cast<std::size_t>(c)] = ChunkLocation::Cpu;
                m_hostBytes += m_fp16Bytes;
                for (auto s : m_chunkSlots[static_cast<std::size_t>(c)])
                    m_state[s] = TensorState::Hold;
                const bool onGpu = static_cast<std::size_t>(c) < m_setup.optimizerOnGpu.size()
                    && m_setup.optimizerOnGpu[static_cast<std::size_t>(c)];
                (onGpu ? m_gpuBytes : m_hostBytes) += m_osBytes;
                if (onGpu)
                    m_uses[static_cast<std::size_t>(c)].push_back(adamMoment);
                ++adamMoment;
            }
        }

        void resetStatistics()
        {
            const bool feasible = m_result.feasible;
            m_result = ReplayResult {};
            m_result.feasible = feasible;
            m_result.gpuChunkPeakBytes = m_gpuBytes;
            m_result.hostPeakBytes = m_hostBytes;
        }

        bool fail(std::size_t moment, const std::string& why)
        {
            if (m_result.feasible) {
                m_result.feasible = false;
                m_result.reason = why;
                m_result.failedMoment = moment;
            }
            return false;
        }

        void runIteration(EvictionPolicy policy)
        {
            m_policy = policy;
            bool reset = false;
            for (std::size_t m = 0; m < m_moments.size(); ++m) {
                if (!reset && m_moments[m].phase != ChunkPhase::Forward) {
                    resetAfterForward();
                    reset = true;
                }
                if (!opMoment(m))
                    return;
            }
            if (!reset)
                resetAfterForward();
            std::size_t m = m_moments.size();
            for (int c = 0; c < m_layout.chunkCount(); ++c) {
                if (local(c) && !adamMoment(m++, c))
                    return;
            }
        }

        // §6.2: "after all operators of the model finished FWD, the states of all param fp16
        // tensors are reset to HOLD" so that recomputation in BWD is told apart.
        void resetAfterForward()
        {
            for (auto& s : m_state) {
                if (s != TensorState::Free)
                    s = TensorState::Hold;
            }
        }

        bool opMoment(std::size_t m)
        {
            const auto& moment = m_moments[m];
            // Chunkable memory at this moment (§8.1).
            const double limit = m_setup.gpuBytes - moment.nonModelBytes;
            if (limit < 0)
                return fail(m,
                    "non-model data (" + formatBytes(moment.nonModelBytes) + ") exceeds the GPU budget ("
                        + formatBytes(m_setup.gpuBytes) + ")");
            if (!makeRoom(0, m, limit))
                return false;
            for (auto s : m_momentSlots[m]) {
                if (!access(s, m, limit))
                    return false;
            }
            noteGpu(moment.nonModelBytes);
            const bool backward = moment.phase == ChunkPhase::Backward;
            for (auto s : m_momentSlots[m]) {
                if (!release(s, backward ? TensorState::HoldAfterBwd : TensorState::HoldAfterFwd,
                        moment.phase != ChunkPhase::Forward, m, limit))
                    return false;
            }
            return true;
        }

        // Algorithm 1 (line 4: Algorithm 3 when distributed).
        bool access(std::uint32_t slot, std::size_t m, double limit)
        {
            const int chunk = m_layout.slots[slot].chunk;
            if (m_p > 1 && !gather(chunk, m, limit))
                return false;
            if (!ensureOnGpu(chunk, m, limit))
                return false;
            if (m_state[slot] != TensorState::Compute)
                ++m_computing[static_cast<std::size_t>(chunk)];
            m_state[slot] = TensorState::Compute; // a FREE tensor is zeroed first (line 10)
            return true;
        }

        // Algorithm 2 (line 5: Algorithm 4 when distributed). The stage of the remote release
        // is BWD for recomputation too: releasing a group after a recomputed forward would only
        // gather it again for the backward that follows.
        bool release(std::uint32_t slot, TensorState target, bool backwardStage, std::size_t m, double limit)
        {
            const int chunk = m_layout.slots[slot].chunk;
            if (m_state[slot] == TensorState::Compute)
                --m_computing[static_cast<std::size_t>(chunk)];
            m_state[slot] = target;
            return m_p == 1 || releaseGroup(chunk, backwardStage, m, limit);
        }

        bool groupAll(int group, TensorState state) const
        {
            for (int c = group * m_p; c < (group + 1) * m_p; ++c) {
                for (auto s : m_chunkSlots[static_cast<std::size_t>(c)]) {
                    if (m_state[s] != state)
                        return false;
                }
            }
            return true;
        }

        void pinGroup(int group, bool pin)
        {
            for (int c = group * m_p; c < (group + 1) * m_p; ++c)
                m_pinned[static_cast<std::size_t>(c)] = pin ? 1 : 0;
        }

        // Algorithm 3: the first access to a group with FREE (remote) chunks all-gathers it.
        bool gather(int chunk, std::size_t m, double limit)
        {
            const int group = m_layout.groupOf(chunk);
            bool present = true;
            for (int c = group * m_p; c < (group + 1) * m_p; ++c)
                present = present && m_location[static_cast<std::size_t>(c)] != ChunkLocation::None;
            if (present)
                return true;
            pinGroup(group, true);
            for (int c = group * m_p; c < (group + 1) * m_p; ++c) {
                if (local(c) ? !ensureOnGpu(c, m, limit) : !allocateRemote(c, m, limit)) {
                    pinGroup(group, false);
                    return false;
                }
            }
            ++m_result.allGathers;
            m_result.collectiveBytes += (m_p - 1) * m_fp16Bytes;
            pinGroup(group, false);
            return true;
        }

        bool allocateRemote(int chunk, std::size_t m, double limit)
        {
            if (!makeRoom(m_fp16Bytes, m, limit))
                return false;
            m_location[static_cast<std::size_t>(chunk)] = ChunkLocation::Gpu;
            m_gpuBytes += m_fp16Bytes;
            for (auto s : m_chunkSlots[static_cast<std::size_t>(chunk)])
                m_state[s] = TensorState::Hold;
            return true;
        }

        // Algorithm 4: once every tensor of the group is done with the stage, average the
        // gradients (BWD, reduce-scatter with all chunks on the GPU) and free the remote chunks.
        bool releaseGroup(int chunk, bool backwardStage, std::size_t m, double limit)
        {
            const int group = m_layout.groupOf(chunk);
            if (!groupAll(group, backwardStage ? TensorState::HoldAfterBwd : TensorState::HoldAfterFwd))
                return true;
            if (backwardStage) {
                pinGroup(group, true);
                const bool ready = ensureOnGpu(group * m_p, m, limit);
                pinGroup(group, false);
                if (!ready)
                    return false;
                ++m_result.reduceScatters;
                m_result.collectiveBytes += (m_p - 1) * m_fp16Bytes;
            }
            for (int c = group * m_p; c < (group + 1) * m_p; ++c) {
                if (local(c) || m_location[static_cast<std::size_t>(c)] == ChunkLocation::None)
                    continue;
                m_location[static_cast<std::size_t>(c)] = ChunkLocation::None;
                m_gpuBytes -= m_fp16Bytes;
                for (auto s : m_chunkSlots[static_cast<std::size_t>(c)])
                    m_state[s] = TensorState::Free;
            }
            return true;
        }

        bool ensureOnGpu(int chunk, std::size_t m, double limit)
        {
            auto& where = m_location[static_cast<std::size_t>(chunk)];
            if (where == ChunkLocation::Gpu)
                return true;
            if (!makeRoom(m_fp16Bytes, m, limit))
                return false;
            if (where == ChunkLocation::Cpu) {
                m_hostBytes -= m_fp16Bytes;
                m_result.uploadBytes += m_fp16Bytes;
                ++m_result.moves;
            }
            where = ChunkLocation::Gpu;
            m_gpuBytes += m_fp16Bytes;
            return true;
        }

        void moveToHost(int chunk)
        {
            m_location[static_cast<std::size_t>(chunk)] = ChunkLocation::Cpu;
            m_gpuBytes -= m_fp16Bytes;
            m_hostBytes += m_fp16Bytes;
            m_result.downloadBytes += m_fp16Bytes;
            ++m_result.moves;
            m_result.hostPeakBytes = std::max(m_result.hostPeakBytes, m_hostBytes);
        }

        // §8.3: evict HOLD-like local chunks (not computing, not pinned) until `need` fits.
        bool makeRoom(double need, std::size_t m, double limit)
        {
            while (m_gpuBytes + need > limit + 1e-6) {
                const int victim = pickVictim(static_cast<int>(m));
                if (victim < 0)
                    return fail(m,
                        "the GPU budget (" + formatBytes(m_setup.gpuBytes) + ") cannot hold "
                            + formatBytes(m_setup.gpuBytes - limit) + " of non-model data plus "
                            + formatBytes(m_gpuBytes + need) + " of chunks the op computes on or gathers");
                moveToHost(victim);
                m_result.evictions.push_back({ m, victim });
            }
            return true;
        }

        // The next moment the chunk is used on the GPU; a chunk not used again this iteration
        // counts from the next one (reference-code rule), one never used on the GPU goes first.
        long nextUse(int chunk, int m) const
        {
            const auto& uses = m_uses[static_cast<std::size_t>(chunk)];
            const auto it = std::lower_bound(uses.begin(), uses.end(), m);
            if (it != uses.end())
                return *it;
            return uses.empty() ? std::numeric_limits<long>::max() : iterationLength() + uses.front();
        }

        int pickVictim(int m) const
        {
            int victim = -1;
            long latest = -1;
            for (int c = 0; c < m_layout.chunkCount(); ++c) {
                const auto i = static_cast<std::size_t>(c);
                if (!local(c) || m_location[i] != ChunkLocation::Gpu || m_pinned[i] || m_computing[i] > 0)
                    continue;
                if (m_policy == EvictionPolicy::ChunkListOrder)
                    return c;
                const long key = nextUse(c, m);
                if (key > latest) {
                    latest = key;
                    victim = c;
                }
            }
            return victim;
        }

        // ADAM for one local chunk, on the device its OS chunks live on (§8.2). CPU ADAM reads
        // the gradients from the param fp16 chunk, so it comes to the host; the updated param
        // fp32 is copied back into it there, ready for the next forward.
        bool adamMoment(std::size_t m, int chunk)
        {
            const auto i = static_cast<std::size_t>(chunk);
            const double elements = static_cast<double>(m_layout.usedElements[i]);
            if (i < m_setup.optimizerOnGpu.size() && m_setup.optimizerOnGpu[i]) {
                if (!ensureOnGpu(chunk, m, m_setup.gpuBytes))
                    return false;
                m_result.gpuAdamElements += elements;
            } else {
                if (m_location[i] == ChunkLocation::Gpu)
                    moveToHost(chunk);
                m_result.cpuAdamElements += elements;
            }
            for (auto s : m_chunkSlots[i])
                m_state[s] = TensorState::Hold;
            noteGpu(0);
            return true;
        }

        void noteGpu(double nonModelBytes)
        {
            m_result.gpuChunkBytes.push_back(m_gpuBytes);
            m_result.gpuChunkPeakBytes = std::max(m_result.gpuChunkPeakBytes, m_gpuBytes);
            m_result.gpuPeakBytes = std::max(m_result.gpuPeakBytes, m_gpuBytes + nonModelBytes);
            m_result.hostPeakBytes = std::max(m_result.hostPeakBytes, m_hostBytes);
        }

        const ChunkLayout& m_layout;
        std::span<const ChunkMoment> m_moments;
        ReplaySetup m_setup;
        int m_p;
        double m_fp16Bytes;
        double m_osBytes; // one chunk of each OS list
        EvictionPolicy m_policy = EvictionPolicy::ChunkListOrder;
        std::vector<std::vector<std::uint32_t>> m_chunkSlots;
        std::vector<std::vector<std::uint32_t>> m_momentSlots;
        std::vector<std::vector<int>> m_uses; // by chunk: moments of use on the GPU, sorted
        std::vector<ChunkLocation> m_location;
        std::vector<char> m_pinned;
        std::vector<int> m_computing; // by chunk: tensors in COMPUTE
        std::vector<TensorState> m_state; // by slot
        double m_gpuBytes = 0; // chunk payloads on the GPU (fp16 and OS)
        double m_hostBytes = 0;
        ReplayResult m_result;
    };

} // namespace

ReplayResult replayChunks(const ChunkLayout& layout, std::span<const ChunkMoment> moments, const ReplaySetup& setup)
{
    if (layout.chunkElements < 1)
        throw Error("chunk replay: the layout has no chunk size");
    return ChunkReplayer(layout, moments, setup).run();
}

} // namespace ps
