#include "runtime/chunk_manager.h"

#include "util/error.h"

#include <algorithm>

namespace ps::engine {

ChunkStats& ChunkStats::operator+=(const ChunkStats& o)
{
    chunks += o.chunks;
    hostChunks += o.hostChunks;
    chunkElements = std::max(chunkElements, o.chunkElements);
    deviceChunkBytes += o.deviceChunkBytes;
    hostChunkBytes += o.hostChunkBytes;
    uploads += o.uploads;
    evictions += o.evictions;
    bytesUp += o.bytesUp;
    bytesDown += o.bytesDown;
    hostOptimizerElements += o.hostOptimizerElements;
    deviceOptimizerElements += o.deviceOptimizerElements;
    return *this;
}

namespace {

    // §6.1 leaves the size open; a chunk must hold the largest parameter. As PatrickStar's
    // reference script (best_chunk_size_search.py), try sizes from the largest parameter up to
    // four times it: the smallest (the finest placement) that wastes at most a tenth of its
    // space, else the least wasteful.
    std::int64_t defaultChunkElements(std::span<const ChunkParameter> parameters)
    {
        constexpr double kGoodWaste = 0.1;
        std::int64_t largest = 1;
        for (const auto& p : parameters)
            largest = std::max(largest, p.elements);
        const auto base = (largest + 1023) / 1024 * 1024;
        std::int64_t best = base;
        double bestWaste = 2;
        for (std::int64_t eighths = 8; eighths <= 32 && bestWaste > kGoodWaste; ++eighths) {
            const auto size = (base * eighths / 8 + 1023) / 1024 * 1024;
            const auto waste = buildChunkLayout(parameters, size, 1).wasteFraction();
            if (waste < bestWaste - 1e-9) {
                best = size;
                bestWaste = waste;
            }
        }
        return best;
    }

    NdArray zeroChunk(const Backend& backend, Allocator& on, std::int64_t elements, MemoryUse use)
    {
        const MemoryUseScope scope(use);
        return backend.zeros(on, { elements });
    }

} // namespace

ChunkManager::ChunkManager(std::span<const ChunkParameterShape> parameters, std::int64_t chunkElements,
    int optimizerSlots, const Backend& backend, Allocator& device, Allocator& host)
    : m_backend(backend)
    , m_device(device)
    , m_host(host)
{
    std::vector<ChunkParameter> list;
    for (const auto& p : parameters)
        list.push_back({ p.id, numElements(p.shape) });
    m_layout = buildChunkLayout(list, chunkElements > 0 ? chunkElements : defaultChunkElements(list), 1);
    const auto n = static_cast<std::size_t>(chunkCount());
    const auto elements = m_layout.chunkElements;
    m_stateChunks.resize(static_cast<std::size_t>(optimizerSlots));
    m_states.resize(static_cast<std::size_t>(optimizerSlots));
    for (std::size_t c = 0; c < n; ++c) { // §8.2 starts every chunk on the host
        m_paramChunks.push_back(zeroChunk(backend, host, elements, MemoryUse::Parameters));
        m_gradChunks.push_back(zeroChunk(backend, host, elements, MemoryUse::Gradients));
        for (auto& slot : m_stateChunks)
            slot.push_back(zeroChunk(backend, host, elements, MemoryUse::OptimizerStates));
    }
    for (std::size_t k = 0; k < parameters.size(); ++k) {
        const auto& s = m_layout.slots[k];
        const auto c = static_cast<std::size_t>(s.chunk);
        m_params.push_back(m_paramChunks[c].slice(s.offset, parameters[k].shape));
        m_grads.push_back(m_gradChunks[c].slice(s.offset, parameters[k].shape));
        for (std::size_t slot = 0; slot < m_states.size(); ++slot)
            m_states[slot].push_back(m_stateChunks[slot][c].slice(s.offset, parameters[k].shape));
    }
    m_onDevice.assign(n, 0);
    m_pins.assign(n, 0);
    m_uses.assign(n, {});
}

bool ChunkManager::uploaded(int chunk) const
{
    const auto c = static_cast<std::size_t>(chunk);
    return m_onDevice[c] == 0 && m_paramChunks[c].isOn(m_device);
}

void ChunkManager::setMoments(std::vector<std::vector<int>> moments)
{
    m_moments = std::move(moments);
    for (auto& uses : m_uses)
        uses.clear();
    for (std::size_t m = 0; m < m_moments.size(); ++m) {
        for (int c : m_moments[m])
            m_uses[static_cast<std::size_t>(c)].push_back(m);
    }
}

std::int64_t ChunkManager::pinnedBytesPerMoment() const
{
    std::size_t most = 0;
    for (const auto& chunks : m_moments) {
        std::vector<int> distinct;
        for (int c : chunks) {
            if (onHost(c) && std::find(distinct.begin(), distinct.end(), c) == distinct.end())
                distinct.push_back(c);
        }
        most = std::max(most, distinct.size());
    }
    return static_cast<std::int64_t>(most) * chunkBytes();
}

std::size_t ChunkManager::nextUse(int chunk, std::size_t moment) const
{
    const auto& uses = m_uses[static_cast<std::size_t>(chunk)];
    const auto it = std::upper_bound(uses.begin(), uses.end(), moment);
    return it == uses.end() ? kNoUse : *it;
}

int ChunkManager::victim(std::size_t moment) const
{
    int best = -1;
    std::size_t bestUse = 0;
    for (int c = 0; c < chunkCount(); ++c) {
        if (!uploaded(c) || m_pins[static_cast<std::size_t>(c)] > 0)
            continue;
        const auto use = nextUse(c, moment);
        if (best < 0 || use > bestUse) { // ties (no further use): the first in chunk order
            best = c;
            bestUse = use;
        }
    }
    return best;
}

void ChunkManager::access(std::span<const int> chunks, std::size_t moment)
{
    for (int c : chunks)
        ++m_pins[static_cast<std::size_t>(c)];
    for (int c : chunks) {
        if (onHost(c) && !uploaded(c))
            upload(c, moment);
    }
}

void ChunkManager::release(std::span<const int> chunks)
{
    for (int c : chunks)
        --m_pins[static_cast<std::size_t>(c)];
}

void ChunkManager::upload(int chunk, std::size_t moment)
{
    const auto bytes = chunkBytes();
    // §8.3: the cache of uploaded chunks first, then whatever the allocator still refuses.
    for (int v = victim(moment); v >= 0 && m_uploadedBytes + bytes > m_cacheBytes; v = victim(moment))
        evict(v);
    m_device.setOwner("chunk " + std::to_string(chunk));
    for (;;) {
        try {
            m_paramChunks[static_cast<std::size_t>(chunk)].moveTo(m_device);
            break;
        } catch (const OutOfMemoryError&) {
            const int v = victim(moment);
            if (v < 0)
                throw;
            evict(v);
        }
    }
    m_device.setOwner("");
    m_uploadedBytes += bytes;
    ++m_counts.uploads;
    m_counts.bytesUp += bytes;
}

void ChunkManager::evict(int chunk)
{
    m_paramChunks[static_cast<std::size_t>(chunk)].moveTo(m_host);
    m_uploadedBytes -= chunkBytes();
    ++m_counts.evictions;
    m_counts.bytesDown += chunkBytes();
}

void ChunkManager::evictAll()
{
    for (int c = 0; c < chunkCount(); ++c) {
        if (uploaded(c))
            evict(c);
    }
}

std::int64_t ChunkManager::moveHomeBytes(int chunk) const
{
    const auto lists = 2 + static_cast<std::int64_t>(m_stateChunks.size()); // param, grad, states
    return (uploaded(chunk) ? lists - 1 : lists) * chunkBytes();
}

std::int64_t ChunkManager::moveHome(int chunk)
{
    const auto c = static_cast<std::size_t>(chunk);
    if (!onHost(chunk))
        return 0;
    const auto bytes = moveHomeBytes(chunk);
    const bool wasUploaded = uploaded(chunk);
    m_device.setOwner("chunk " + std::to_string(chunk));
    m_paramChunks[c].moveTo(m_device);
    m_gradChunks[c].moveTo(m_device);
    for (auto& slot : m_stateChunks)
        slot[c].moveTo(m_device);
    m_device.setOwner("");
    if (wasUploaded)
        m_uploadedBytes -= chunkBytes();
    m_onDevice[c] = 1;
    m_counts.bytesUp += bytes;
    return bytes;
}

void ChunkManager::accumulateGradient(std::size_t k, const NdArray& grad)
{
    m_backend.accumulate(m_grads[k], grad);
    if (onHost(chunkOf(k))) // the gradient leaves the device for its host chunk
        m_counts.bytesDown += grad.bytes();
}

template <typename Update> void ChunkManager::step(Update&& update)
{
    evictAll(); // CPU Adam reads and writes the host chunks' parameters on the host
    for (std::size_t k = 0; k < m_params.size(); ++k) {
        update(k);
        (onHost(chunkOf(k)) ? m_counts.hostOptimizerElements : m_counts.deviceOptimizerElements) += m_params[k].numel();
    }
    for (auto& g : m_gradChunks)
        m_backend.fill(g, 0.0F);
}

void ChunkManager::adamw(const AdamWUpdate& update)
{
    if (m_states.size() != 2)
        throw Error("chunk manager: AdamW needs two optimizer-state chunk lists");
    step([&](std::size_t k) { m_backend.adamw(m_params[k], m_grads[k], m_states[0][k], m_states[1][k], update); });
}

void ChunkManager::sgd(const SgdUpdate& update)
{
    if (m_states.size() != 1)
        throw Error("chunk manager: SGD needs one optimizer-state chunk list");
    step([&](std::size_t k) { m_backend.sgd(m_params[k], m_grads[k], m_states[0][k], update); });
}

ChunkStats ChunkManager::takeIterationCounts()
{
    auto out = m_counts;
    m_counts = ChunkStats();
    out.chunks = chunkCount();
    out.chunkElements = m_layout.chunkElements;
    const auto lists = 2 + static_cast<std::int64_t>(m_stateChunks.size());
    for (int c = 0; c < chunkCount(); ++c) {
        out.hostChunks += onHost(c) ? 1 : 0;
        (onHost(c) ? out.hostChunkBytes : out.deviceChunkBytes) += lists * chunkBytes();
    }
    return out;
}

} // namespace ps::engine
