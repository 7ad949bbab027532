#include "cpu/ndarray.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ps::engine {

// Freed blocks are kept by size and handed out again, as PyTorch's caching allocators do: a
// training step allocates the same sizes every micro-batch, and returning large blocks to the
// system each time costs a page fault per 4 KiB on the next step.
struct Allocator::State
{
    std::string device;
    std::int64_t capacity = 0;
    std::int64_t current = 0;
    std::int64_t peak = 0;
    MemoryByUse byUse {};
    MemoryByUse peakByUse {};
    std::int64_t peakNonModel = 0;
    std::mutex mutex;
    std::unordered_map<std::size_t, std::vector<std::byte*>> cache; // by rounded size
    std::size_t cachedBytes = 0;

    [[nodiscard]] std::int64_t nonModel() const
    {
        return current - byUse[static_cast<std::size_t>(MemoryUse::Parameters)]
            - byUse[static_cast<std::size_t>(MemoryUse::Gradients)]
            - byUse[static_cast<std::size_t>(MemoryUse::OptimizerStates)];
    }

    ~State()
    {
        for (auto& [size, blocks] : cache) {
            for (auto* b : blocks)
                std::free(b);
        }
    }

    std::byte* take(std::size_t rounded)
    {
        const std::lock_guard lock(mutex);
        auto it = cache.find(rounded);
        if (it == cache.end() || it->second.empty())
            return nullptr;
        auto* b = it->second.back();
        it->second.pop_back();
        cachedBytes -= rounded;
        return b;
    }

    void give(std::byte* b, std::size_t rounded)
    {
        constexpr std::size_t kMaxCached = std::size_t { 4 } << 30;
        const std::lock_guard lock(mutex);
        if (cachedBytes + rounded > kMaxCached) {
            std::free(b);
            return;
        }
        cache[rounded].push_back(b);
        cachedBytes += rounded;
    }
};

namespace {

    thread_local MemoryUse tCurrentUse = MemoryUse::Workspace;
    // What the calling thread allocates for (a node, "parameters", ...): per thread, as a channel's
    // sender allocates on the receiving device while that device's worker runs its own node.
    thread_local std::string tOwner;

    std::string ownerText()
    {
        return tOwner.empty() ? std::string("the engine") : "node '" + tOwner + "'";
    }

    constexpr std::array<std::string_view, kMemoryUses> kUseNames = { "parameters", "gradients", "optimizer_states",
        "activations", "workspace", "messages" };

    std::string formatMiB(std::int64_t bytes)
    {
        return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    }

} // namespace

std::string_view toString(MemoryUse use)
{
    return kUseNames[static_cast<std::size_t>(use)];
}

MemoryUseScope::MemoryUseScope(MemoryUse use)
    : m_previous(tCurrentUse)
{
    tCurrentUse = use;
}

MemoryUseScope::~MemoryUseScope()
{
    tCurrentUse = m_previous;
}

struct NdArray::Storage
{
    Storage(std::shared_ptr<Allocator::State> s, std::int64_t n)
        : state(std::move(s))
        , size(n)
        , use(tCurrentUse)
        // 64-byte alignment for vector loads; at least one line so empty arrays have an address.
        , rounded(static_cast<std::size_t>((std::max<std::int64_t>(n, 1) + 63) / 64 * 64))
    {
        data = acquire(*state);
    }
    ~Storage()
    {
        if (data != nullptr) {
            state->give(data, rounded);
            unaccount(*state);
        }
        if (hostData != nullptr) {
            host->give(hostData, rounded);
            unaccount(*host);
        }
    }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    // Counts the bytes on `on` (throwing past its capacity) and returns a block for them.
    std::byte* acquire(Allocator::State& on)
    {
        {
            const std::lock_guard lock(on.mutex);
            if (on.capacity > 0 && on.current + size > on.capacity)
                throw OutOfMemoryError(fmt::format("out of memory on {}: {} needs {} more, {} of {} in use", on.device,
                    ownerText(), formatMiB(size), formatMiB(on.current), formatMiB(on.capacity)));
            on.current += size;
            on.byUse[static_cast<std::size_t>(use)] += size;
            if (on.current > on.peak) {
                on.peak = on.current;
                on.peakByUse = on.byUse;
            }
            on.peakNonModel = std::max(on.peakNonModel, on.nonModel());
        }
        auto* block = on.take(rounded);
        if (block == nullptr)
            block = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
        if (block == nullptr) {
            unaccount(on);
            throw OutOfMemoryError(
                fmt::format("out of host memory on {} allocating {} for {}", on.device, formatMiB(size), ownerText()));
        }
        return block;
    }

    void unaccount(Allocator::State& on) const
    {
        const std::lock_guard lock(on.mutex);
        on.current -= size;
        on.byUse[static_cast<std::size_t>(use)] -= size;
    }

    std::shared_ptr<Allocator::State> state;
    std::int64_t size;
    MemoryUse use;
    std::size_t rounded = 0;
    std::byte* data = nullptr; // on the device; null while swapped out or dropped
    std::shared_ptr<Allocator::State> host; // the host pool holding hostData
    std::byte* hostData = nullptr;
};

Allocator::Allocator(std::string device, std::int64_t capacity)
    : m_state(std::make_shared<State>())
{
    m_state->device = std::move(device);
    m_state->capacity = capacity;
}

const std::string& Allocator::device() const
{
    return m_state->device;
}

std::int64_t Allocator::capacity() const
{
    return m_state->capacity;
}

std::int64_t Allocator::current() const
{
    const std::lock_guard lock(m_state->mutex);
    return m_state->current;
}

std::int64_t Allocator::peak() const
{
    const std::lock_guard lock(m_state->mutex);
    return m_state->peak;
}

MemoryByUse Allocator::peakByUse() const
{
    const std::lock_guard lock(m_state->mutex);
    return m_state->peakByUse;
}

std::int64_t Allocator::peakNonModel() const
{
    const std::lock_guard lock(m_state->mutex);
    return m_state->peakNonModel;
}

void Allocator::resetPeak()
{
    const std::lock_guard lock(m_state->mutex);
    m_state->peak = m_state->current;
    m_state->peakByUse = m_state->byUse;
    m_state->peakNonModel = m_state->nonModel();
}

void Allocator::setOwner(std::string_view owner)
{
    tOwner = owner;
}

NdArray NdArray::empty(Allocator& allocator, Shape shape, DType dtype)
{
    // U8 holds masks a kernel saves for its backward (dropout), never a value of the graph.
    if (dtype != DType::F32 && dtype != DType::I64 && dtype != DType::U8)
        throw Error("the CPU engine computes in fp32 and int64, not " + std::string(toString(dtype)));
    NdArray a;
    a.m_storage = std::make_shared<Storage>(allocator.state(), numBytes(shape, dtype));
    a.m_shape = std::move(shape);
    a.m_dtype = dtype;
    return a;
}

NdArray NdArray::zeros(Allocator& allocator, Shape shape, DType dtype)
{
    auto a = empty(allocator, std::move(shape), dtype);
    std::memset(a.m_storage->data, 0, static_cast<std::size_t>(a.bytes()));
    return a;
}

std::int64_t NdArray::numel() const
{
    return numElements(m_shape);
}

std::int64_t NdArray::bytes() const
{
    return numBytes(m_shape, m_dtype);
}

namespace {

    [[noreturn]] void notResident()
    {
        throw NotResident("internal: a kernel read a value that is swapped out or dropped (the memory plan released it "
                          "before its last use)");
    }

} // namespace

float* NdArray::f32()
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return reinterpret_cast<float*>(m_storage->data + m_offset);
}

const float* NdArray::f32() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return reinterpret_cast<const float*>(m_storage->data + m_offset);
}

std::int64_t* NdArray::i64()
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return reinterpret_cast<std::int64_t*>(m_storage->data + m_offset);
}

const std::int64_t* NdArray::i64() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return reinterpret_cast<const std::int64_t*>(m_storage->data + m_offset);
}

std::uint8_t* NdArray::u8()
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return reinterpret_cast<std::uint8_t*>(m_storage->data + m_offset);
}

const std::uint8_t* NdArray::u8() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return reinterpret_cast<const std::uint8_t*>(m_storage->data + m_offset);
}

NdArray NdArray::view(Shape shape) const
{
    if (numElements(shape) != numel())
        throw Error("view " + formatShape(shape) + " of " + formatShape(m_shape) + " changes the element count");
    NdArray a = *this;
    a.m_shape = std::move(shape);
    return a;
}

NdArray NdArray::slice(std::int64_t offsetElements, Shape shape) const
{
    const auto element = numBytes({ 1 }, m_dtype);
    const auto offset = m_offset + offsetElements * element;
    if (offsetElements < 0 || !m_storage || offset + numBytes(shape, m_dtype) > m_storage->size)
        throw Error("slice " + formatShape(shape) + " at " + std::to_string(offsetElements) + " passes the end of "
            + formatShape(m_shape));
    NdArray a = *this;
    a.m_shape = std::move(shape);
    a.m_offset = offset;
    return a;
}

NdArray NdArray::clone() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    NdArray a;
    a.m_storage = std::make_shared<Storage>(m_storage->state, bytes());
    std::memcpy(a.m_storage->data, m_storage->data + m_offset, static_cast<std::size_t>(bytes()));
    a.m_shape = m_shape;
    a.m_dtype = m_dtype;
    return a;
}

NdArray NdArray::shapeOnly(Shape shape, DType dtype)
{
    NdArray a;
    a.m_shape = std::move(shape);
    a.m_dtype = dtype;
    return a;
}

bool NdArray::resident() const
{
    return m_storage && m_storage->data != nullptr;
}

void NdArray::swapOut(Allocator& host)
{
    auto& s = *m_storage;
    if (s.data == nullptr)
        return; // already out (another view of the storage)
    s.host = host.state();
    s.hostData = s.acquire(*s.host);
    std::memcpy(s.hostData, s.data, static_cast<std::size_t>(s.size));
    s.state->give(s.data, s.rounded);
    s.data = nullptr;
    s.unaccount(*s.state);
}

void NdArray::swapIn()
{
    auto& s = *m_storage;
    if (s.data != nullptr)
        return;
    if (s.hostData == nullptr)
        throw Error("internal: swap-in of a value that was dropped, not swapped out");
    s.data = s.acquire(*s.state);
    std::memcpy(s.data, s.hostData, static_cast<std::size_t>(s.size));
    s.host->give(s.hostData, s.rounded);
    s.hostData = nullptr;
    s.unaccount(*s.host);
    s.host.reset();
}

void NdArray::relabel(MemoryUse use)
{
    auto& s = *m_storage;
    if (s.use == use)
        return;
    if (s.data != nullptr) {
        const std::lock_guard lock(s.state->mutex);
        s.state->byUse[static_cast<std::size_t>(s.use)] -= s.size;
        s.state->byUse[static_cast<std::size_t>(use)] += s.size;
    }
    if (s.hostData != nullptr) {
        const std::lock_guard lock(s.host->mutex);
        s.host->byUse[static_cast<std::size_t>(s.use)] -= s.size;
        s.host->byUse[static_cast<std::size_t>(use)] += s.size;
    }
    s.use = use;
}

void NdArray::moveTo(Allocator& target)
{
    auto& s = *m_storage;
    if (s.state == target.state())
        return;
    if (s.data == nullptr)
        throw Error("internal: move of a value that is swapped out or dropped");
    auto* block = s.acquire(*target.state()); // throws before anything changes
    std::memcpy(block, s.data, static_cast<std::size_t>(s.size));
    s.state->give(s.data, s.rounded);
    s.unaccount(*s.state);
    s.state = target.state();
    s.data = block;
}

bool NdArray::isOn(const Allocator& allocator) const
{
    return m_storage && m_storage->data != nullptr && m_storage->state == allocator.state();
}

void NdArray::drop()
{
    auto& s = *m_storage;
    if (s.data == nullptr)
        return;
    s.state->give(s.data, s.rounded);
    s.data = nullptr;
    s.unaccount(*s.state);
}

void NdArray::refill(NdArray& fresh)
{
    auto& s = *m_storage;
    auto& f = *fresh.m_storage;
    if (s.data != nullptr || s.hostData != nullptr)
        throw Error("internal: refill of a value that is not dropped");
    if (f.size != s.size || f.state != s.state || f.data == nullptr)
        throw Error("internal: recomputed value does not match the dropped one (" + formatShape(fresh.m_shape) + " vs "
            + formatShape(m_shape) + ")");
    // Take over the block and its accounting; the fresh storage is left empty and uncounted.
    if (f.use != s.use) {
        const std::lock_guard lock(s.state->mutex);
        s.state->byUse[static_cast<std::size_t>(f.use)] -= s.size;
        s.state->byUse[static_cast<std::size_t>(s.use)] += s.size;
    }
    s.data = f.data;
    s.rounded = f.rounded;
    f.data = nullptr;
    fresh = NdArray();
}

} // namespace ps::engine
