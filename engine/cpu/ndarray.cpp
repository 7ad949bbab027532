#include "cpu/ndarray.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ps::engine {

namespace {

    class HostMemory final : public MemoryResource
    {
    public:
        [[nodiscard]] std::string_view name() const override
        {
            return "host";
        }
        [[nodiscard]] bool hostAccessible() const override
        {
            return true;
        }
        [[nodiscard]] std::byte* allocate(std::size_t bytes) override
        {
            return static_cast<std::byte*>(std::aligned_alloc(64, bytes));
        }
        void release(std::byte* block, std::size_t /*bytes*/) override
        {
            std::free(block);
        }
        void zero(std::byte* block, std::size_t bytes) override
        {
            std::memset(block, 0, bytes);
        }
        void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override
        {
            std::memcpy(dst, src, bytes);
        }
    };

} // namespace

const std::shared_ptr<MemoryResource>& hostMemory()
{
    static const std::shared_ptr<MemoryResource> memory = std::make_shared<HostMemory>();
    return memory;
}

// Freed blocks are kept by size and handed out again, as PyTorch's caching allocators do: a
// training step allocates the same sizes every micro-batch, and returning large blocks to the
// system each time costs a page fault per 4 KiB on the next step.
struct Allocator::State
{
    std::string device;
    std::shared_ptr<MemoryResource> memory;
    std::int64_t capacity = 0;
    std::int64_t current = 0;
    std::int64_t peak = 0;
    MemoryByUse byUse {};
    MemoryByUse peakByUse {};
    std::int64_t peakNonModel = 0;
    std::int64_t peakWithoutMessages = 0;
    std::mutex mutex;
    std::unordered_map<std::size_t, std::vector<std::byte*>> cache; // by rounded size
    std::size_t cachedBytes = 0;

    // The two peaks of a part of the bytes, after `current` or a use's bytes changed (the
    // overall peak changes only when `current` grows, in acquire).
    void notePartPeaks()
    {
        peakNonModel = std::max(peakNonModel, nonModel());
        peakWithoutMessages = std::max(peakWithoutMessages, current - of(MemoryUse::Messages));
    }

    [[nodiscard]] std::int64_t of(MemoryUse use) const
    {
        return byUse[static_cast<std::size_t>(use)];
    }

    [[nodiscard]] std::int64_t nonModel() const
    {
        return current - of(MemoryUse::Parameters) - of(MemoryUse::Gradients) - of(MemoryUse::OptimizerStates);
    }

    ~State()
    {
        releaseCached();
    }

    // Returns every cached block to the memory (the caller holds the mutex, or owns the state).
    void releaseCached()
    {
        for (auto& [size, blocks] : cache) {
            for (auto* b : blocks)
                memory->release(b, size);
        }
        cache.clear();
        cachedBytes = 0;
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

    // Returns every cached block to the memory (an allocation found the memory full: the cache
    // may hold what it needs in blocks of other sizes).
    void trim()
    {
        const std::lock_guard lock(mutex);
        releaseCached();
    }

    void give(std::byte* b, std::size_t rounded)
    {
        const std::lock_guard lock(mutex);
        if (cachedBytes + rounded > memory->cacheLimitBytes()) {
            memory->release(b, rounded);
            return;
        }
        cache[rounded].push_back(b);
        cachedBytes += rounded;
    }
};

namespace {

    // What the calling thread allocates for (a node, "parameters", ...): per thread, as a channel's
    // sender allocates on the receiving device while that device's worker runs its own node.
    thread_local std::string tOwner;

    std::string ownerText()
    {
        return tOwner.empty() ? std::string("the engine") : "node '" + tOwner + "'";
    }

    std::string formatMiB(std::int64_t bytes)
    {
        return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    }

    // Copies between two allocators' blocks through whichever memory is not the host's (a device
    // resource copies to, from and within its device); host to host is a memcpy.
    void transfer(const Allocator::State& to, std::byte* dst, const Allocator::State& from, const std::byte* src,
        std::size_t bytes);

} // namespace

struct NdArray::Storage
{
    Storage(std::shared_ptr<Allocator::State> s, std::int64_t n)
        : state(std::move(s))
        , size(n)
        , use(currentMemoryUse())
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
            on.notePartPeaks();
        }
        auto* block = on.take(rounded);
        if (block == nullptr)
            block = on.memory->allocate(rounded);
        if (block == nullptr) { // full: give the cached blocks back and try once more
            on.trim();
            block = on.memory->allocate(rounded);
        }
        if (block == nullptr) {
            unaccount(on);
            throw OutOfMemoryError(fmt::format("out of {} memory on {} allocating {} for {}", on.memory->name(),
                on.device, formatMiB(size), ownerText()));
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

namespace {

    void transfer(const Allocator::State& to, std::byte* dst, const Allocator::State& from, const std::byte* src,
        std::size_t bytes)
    {
        auto& via = to.memory->hostAccessible() ? *from.memory : *to.memory;
        via.copy(dst, src, bytes);
    }

} // namespace

Allocator::Allocator(std::string device, std::int64_t capacity, std::shared_ptr<MemoryResource> memory)
    : m_state(std::make_shared<State>())
{
    if (!memory)
        throw Error("internal: allocator for " + device + " without a memory resource");
    m_state->device = std::move(device);
    m_state->capacity = capacity;
    m_state->memory = std::move(memory);
}

const std::string& Allocator::device() const
{
    return m_state->device;
}

MemoryResource& Allocator::memory() const
{
    return *m_state->memory;
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

std::int64_t Allocator::peakWithoutMessages() const
{
    const std::lock_guard lock(m_state->mutex);
    return m_state->peakWithoutMessages;
}

void Allocator::resetPeak()
{
    const std::lock_guard lock(m_state->mutex);
    m_state->peak = m_state->current;
    m_state->peakByUse = m_state->byUse;
    m_state->peakNonModel = 0;
    m_state->peakWithoutMessages = 0;
    m_state->notePartPeaks();
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
    a.m_storage->state->memory->zero(a.m_storage->data, a.m_storage->rounded);
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

std::byte* NdArray::data()
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return m_storage->data + m_offset;
}

const std::byte* NdArray::data() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return m_storage->data + m_offset;
}

MemoryResource& NdArray::memory() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    return *m_storage->state->memory;
}

std::byte* NdArray::hostBytes() const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    if (!m_storage->state->memory->hostAccessible())
        throw Error("internal: host code read a value held in " + m_storage->state->device + "'s "
            + std::string(m_storage->state->memory->name())
            + " memory; only that device's backend reaches it (copy it to the host first)");
    return m_storage->data + m_offset;
}

float* NdArray::f32()
{
    return reinterpret_cast<float*>(hostBytes());
}

const float* NdArray::f32() const
{
    return reinterpret_cast<const float*>(hostBytes());
}

std::int64_t* NdArray::i64()
{
    return reinterpret_cast<std::int64_t*>(hostBytes());
}

const std::int64_t* NdArray::i64() const
{
    return reinterpret_cast<const std::int64_t*>(hostBytes());
}

std::uint8_t* NdArray::u8()
{
    return reinterpret_cast<std::uint8_t*>(hostBytes());
}

const std::uint8_t* NdArray::u8() const
{
    return reinterpret_cast<const std::uint8_t*>(hostBytes());
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
    if (!m_storage)
        notResident();
    return copyOnto(m_storage->state);
}

NdArray NdArray::copyTo(Allocator& target) const
{
    return copyOnto(target.state());
}

NdArray NdArray::copyOnto(const std::shared_ptr<Allocator::State>& state) const
{
    if (!m_storage || m_storage->data == nullptr)
        notResident();
    NdArray a;
    a.m_storage = std::make_shared<Storage>(state, bytes());
    transfer(*a.m_storage->state, a.m_storage->data, *m_storage->state, m_storage->data + m_offset,
        static_cast<std::size_t>(bytes()));
    a.m_shape = m_shape;
    a.m_dtype = m_dtype;
    return a;
}

NdArray NdArray::fromBytes(Allocator& allocator, Shape shape, DType dtype, std::span<const std::byte> bytes)
{
    const auto expect = static_cast<std::size_t>(numBytes(shape, dtype));
    if (bytes.size() != expect)
        throw Error(std::to_string(bytes.size()) + " bytes for " + formatShape(shape) + " "
            + std::string(toString(dtype)) + ", expected " + std::to_string(expect));
    auto a = empty(allocator, std::move(shape), dtype);
    if (!bytes.empty())
        a.memory().copy(a.data(), bytes.data(), bytes.size());
    return a;
}

void NdArray::toBytes(std::span<std::byte> out) const
{
    if (out.size() != static_cast<std::size_t>(bytes()))
        throw Error("toBytes: " + std::to_string(out.size()) + " bytes of room for a " + std::to_string(bytes())
            + "-byte array");
    if (!out.empty())
        memory().copy(out.data(), data(), out.size());
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
    transfer(*s.host, s.hostData, *s.state, s.data, static_cast<std::size_t>(s.size));
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
    transfer(*s.state, s.data, *s.host, s.hostData, static_cast<std::size_t>(s.size));
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
        s.state->notePartPeaks();
    }
    if (s.hostData != nullptr) {
        const std::lock_guard lock(s.host->mutex);
        s.host->byUse[static_cast<std::size_t>(s.use)] -= s.size;
        s.host->byUse[static_cast<std::size_t>(use)] += s.size;
        s.host->notePartPeaks();
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
    transfer(*target.state(), block, *s.state, s.data, static_cast<std::size_t>(s.size));
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
        s.state->notePartPeaks();
    }
    s.data = f.data;
    s.rounded = f.rounded;
    f.data = nullptr;
    fresh = NdArray();
}

} // namespace ps::engine
