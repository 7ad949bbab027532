#include "cpu/ndarray.h"

#include <fmt/format.h>

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
    std::string owner;
    std::mutex mutex;
    std::unordered_map<std::size_t, std::vector<std::byte*>> cache; // by rounded size
    std::size_t cachedBytes = 0;

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

    std::string formatMiB(std::int64_t bytes)
    {
        return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    }

} // namespace

struct NdArray::Storage
{
    Storage(std::shared_ptr<Allocator::State> s, std::int64_t n)
        : state(std::move(s))
        , size(n)
    {
        {
            const std::lock_guard lock(state->mutex);
            if (state->capacity > 0 && state->current + size > state->capacity)
                throw OutOfMemoryError(fmt::format("out of memory on {}: {} needs {} more, {} of {} in use",
                    state->device, state->owner.empty() ? std::string("the engine") : "node '" + state->owner + "'",
                    formatMiB(size), formatMiB(state->current), formatMiB(state->capacity)));
            state->current += size;
            state->peak = std::max(state->peak, state->current);
        }
        // 64-byte alignment for vector loads; at least one line so empty arrays have an address.
        rounded = static_cast<std::size_t>((std::max<std::int64_t>(size, 1) + 63) / 64 * 64);
        data = state->take(rounded);
        if (data == nullptr)
            data = static_cast<std::byte*>(std::aligned_alloc(64, rounded));
        if (data == nullptr) {
            release();
            throw OutOfMemoryError(fmt::format("out of host memory on {} allocating {} for {}", state->device,
                formatMiB(size), state->owner.empty() ? std::string("the engine") : "node '" + state->owner + "'"));
        }
    }
    ~Storage()
    {
        state->give(data, rounded);
        release();
    }
    Storage(const Storage&) = delete;
    Storage& operator=(const Storage&) = delete;

    void release()
    {
        const std::lock_guard lock(state->mutex);
        state->current -= size;
    }

    std::shared_ptr<Allocator::State> state;
    std::int64_t size;
    std::size_t rounded = 0;
    std::byte* data = nullptr;
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

void Allocator::resetPeak()
{
    const std::lock_guard lock(m_state->mutex);
    m_state->peak = m_state->current;
}

void Allocator::setOwner(std::string_view owner)
{
    const std::lock_guard lock(m_state->mutex);
    m_state->owner = owner;
}

NdArray NdArray::empty(Allocator& allocator, Shape shape, DType dtype)
{
    if (dtype != DType::F32 && dtype != DType::I64)
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

float* NdArray::f32()
{
    return reinterpret_cast<float*>(m_storage->data);
}

const float* NdArray::f32() const
{
    return reinterpret_cast<const float*>(m_storage->data);
}

std::int64_t* NdArray::i64()
{
    return reinterpret_cast<std::int64_t*>(m_storage->data);
}

const std::int64_t* NdArray::i64() const
{
    return reinterpret_cast<const std::int64_t*>(m_storage->data);
}

NdArray NdArray::view(Shape shape) const
{
    if (numElements(shape) != numel())
        throw Error("view " + formatShape(shape) + " of " + formatShape(m_shape) + " changes the element count");
    NdArray a = *this;
    a.m_shape = std::move(shape);
    return a;
}

NdArray NdArray::clone() const
{
    NdArray a;
    a.m_storage = std::make_shared<Storage>(m_storage->state, m_storage->size);
    std::memcpy(a.m_storage->data, m_storage->data, static_cast<std::size_t>(m_storage->size));
    a.m_shape = m_shape;
    a.m_dtype = m_dtype;
    return a;
}

} // namespace ps::engine
