// Values on a device: n-dimensional arrays of fp32 (activations, parameters, gradients) or int64
// (token ids, labels), and the allocator that accounts for them.
//
// Owns: the byte budget of one device (capacity, current, peak) and the out-of-memory error that
// names the node asking. Arrays share storage by reference count (views share it with a new shape).
// Where the bytes live is the allocator's MemoryResource: host memory by default, a device's
// memory when its backend supplies one (engine/cuda). Only host-accessible memory can be read
// through f32()/i64()/u8(); device memory is reached by its backend's kernels through data().
// Depends on: core (Shape, DType, ps::Error); no Qt, no CUDA.
#pragma once

#include "graph/types.h"
#include "util/error.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ps::engine {

// Thrown when an allocation would pass the device's capacity. The message names the device, the
// node (or optimizer state) asking, the request and the usage.
class OutOfMemoryError : public Error
{
public:
    using Error::Error;
};

// What an allocation is for: the measured side of the memory model's breakdown. Each thread
// labels its own allocations (a pipeline worker works for one device at a time; a channel's
// sender labels the copies it makes on the receiving device as messages).
enum class MemoryUse : std::uint8_t {
    Parameters, // weights, and the older versions PipeDream stashes
    Gradients, // parameter gradients
    OptimizerStates,
    Activations, // kept for a later pass: forward values for B, output gradients for W, inputs
    Workspace, // backward's activation gradients and every kernel's scratch
    Messages, // boundary tensors received and not yet used
};
inline constexpr std::size_t kMemoryUses = 6;
[[nodiscard]] std::string_view toString(MemoryUse use);

// The calling thread's allocation label: its innermost MemoryUseScope's, Workspace outside any.
[[nodiscard]] MemoryUse currentMemoryUse();

// Sets the calling thread's allocation label for its lifetime (Workspace outside any scope).
class MemoryUseScope
{
public:
    explicit MemoryUseScope(MemoryUse use);
    ~MemoryUseScope();
    MemoryUseScope(const MemoryUseScope&) = delete;
    MemoryUseScope& operator=(const MemoryUseScope&) = delete;

private:
    MemoryUse m_previous;
};

using MemoryByUse = std::array<std::int64_t, kMemoryUses>;

// Where an allocator's blocks live and how bytes reach them: the device-neutral seam below
// NdArray. Host memory is the default; a device backend supplies its own (cudaMalloc'd memory,
// copied with cudaMemcpy). Blocks are cached by the allocator, so allocate/release see only the
// first use of each size and the blocks the cache does not keep.
class MemoryResource
{
public:
    virtual ~MemoryResource() = default;
    [[nodiscard]] virtual std::string_view name() const = 0; // "host", "cuda:0"
    // True when host code may read and write the blocks through a pointer (f32(), i64(), u8()).
    [[nodiscard]] virtual bool hostAccessible() const = 0;
    // A block of `bytes` (a multiple of 64), aligned to 64 bytes; nullptr when the memory is full.
    [[nodiscard]] virtual std::byte* allocate(std::size_t bytes) = 0;
    virtual void release(std::byte* block, std::size_t bytes) = 0;
    virtual void zero(std::byte* block, std::size_t bytes) = 0;
    // Copies `bytes` where one side is this resource's memory and the other this resource's or
    // host-accessible memory (device to host, host to device, device to device).
    virtual void copy(std::byte* dst, const std::byte* src, std::size_t bytes) = 0;
    // How many freed bytes an allocator keeps for reuse before it returns blocks here. Host
    // memory: 4 GiB (the process's footprint stays near its peak). A device overrides it.
    [[nodiscard]] virtual std::size_t cacheLimitBytes() const
    {
        return std::size_t { 4 } << 30;
    }
};

// The process's host memory (aligned_alloc, memcpy).
[[nodiscard]] const std::shared_ptr<MemoryResource>& hostMemory();

class Allocator
{
public:
    // `capacity` 0: unlimited (only peak accounting). `memory`: where the blocks live.
    explicit Allocator(
        std::string device = "cpu", std::int64_t capacity = 0, std::shared_ptr<MemoryResource> memory = hostMemory());

    [[nodiscard]] const std::string& device() const;
    [[nodiscard]] MemoryResource& memory() const;
    [[nodiscard]] std::int64_t capacity() const;
    [[nodiscard]] std::int64_t current() const;
    [[nodiscard]] std::int64_t peak() const;
    // The bytes of each use at the moment of the peak.
    [[nodiscard]] MemoryByUse peakByUse() const;
    // The most bytes held at once for anything but parameters, gradients and optimizer states:
    // PatrickStar's non-model data (§8.1), what a chunk manager must leave room for.
    [[nodiscard]] std::int64_t peakNonModel() const;
    // The most bytes held at once for anything but messages waiting at this device: a maximum of
    // its own (it may fall at another moment than peak()'s) that does not depend on how far the
    // device's senders run ahead.
    [[nodiscard]] std::int64_t peakWithoutMessages() const;
    void resetPeak();

    // The node whose work the calling thread's next allocations are for ("" outside node
    // execution), named by an out-of-memory error.
    void setOwner(std::string_view owner);

    struct State;
    [[nodiscard]] const std::shared_ptr<State>& state() const
    {
        return m_state;
    }

private:
    std::shared_ptr<State> m_state;
};

// A kernel read data that the memory plan had released (swapped out, dropped for recompute, or
// trimmed after forward): a runtime bug, reported with the node that read it.
class NotResident : public Error
{
public:
    using Error::Error;
};

class NdArray
{
public:
    NdArray() = default;
    // Uninitialized, or zero-filled, storage from `allocator`.
    static NdArray empty(Allocator& allocator, Shape shape, DType dtype = DType::F32);
    static NdArray zeros(Allocator& allocator, Shape shape, DType dtype = DType::F32);

    [[nodiscard]] bool defined() const
    {
        return m_storage != nullptr;
    }
    [[nodiscard]] const Shape& shape() const
    {
        return m_shape;
    }
    [[nodiscard]] DType dtype() const
    {
        return m_dtype;
    }
    [[nodiscard]] std::int64_t numel() const;
    [[nodiscard]] std::int64_t bytes() const;
    [[nodiscard]] float* f32();
    [[nodiscard]] const float* f32() const;
    [[nodiscard]] std::int64_t* i64();
    [[nodiscard]] const std::int64_t* i64() const;
    [[nodiscard]] std::uint8_t* u8(); // U8 arrays: one byte per element (dropout masks)
    [[nodiscard]] const std::uint8_t* u8() const;
    // The first byte's address in its memory (a device address for device memory), for the
    // backend that owns the memory. Throws NotResident when the storage is released.
    [[nodiscard]] std::byte* data();
    [[nodiscard]] const std::byte* data() const;
    // The memory the bytes are in (throws NotResident when released).
    [[nodiscard]] MemoryResource& memory() const;
    // Same storage, another shape of the same element count.
    [[nodiscard]] NdArray view(Shape shape) const;
    // Same storage, `shape`'s elements from `offsetElements` on (a parameter inside a chunk).
    [[nodiscard]] NdArray slice(std::int64_t offsetElements, Shape shape) const;
    // No storage, only a shape: what a node's backward keeps of a value it does not read (its
    // data is released while the shape still sizes the gradient). Reading its data throws.
    static NdArray shapeOnly(Shape shape, DType dtype = DType::F32);
    // Moves the storage's bytes to another use (a received message becoming a stage's input).
    void relabel(MemoryUse use);
    // A deep copy on the same allocator.
    [[nodiscard]] NdArray clone() const;
    // A deep copy on `target` (another device's memory, a host pool), copied through whichever
    // memory is a device's.
    [[nodiscard]] NdArray copyTo(Allocator& target) const;
    // An array on `allocator` holding `bytes` (exactly the shape's), copied in through its memory.
    // Throws ps::Error when the byte count does not fit the shape.
    static NdArray fromBytes(Allocator& allocator, Shape shape, DType dtype, std::span<const std::byte> bytes);
    // The array's bytes on the host, copied out through its memory.
    [[nodiscard]] std::vector<std::byte> toBytes() const
    {
        std::vector<std::byte> out(static_cast<std::size_t>(bytes()));
        toBytes(out);
        return out;
    }
    // The same into `out`, host memory the caller keeps (exactly bytes() long; else ps::Error).
    void toBytes(std::span<std::byte> out) const;

    // Storage-level residency, seen by every array sharing the storage (views, the node values that
    // hold it): swap and recompute act on a storage, not on one reference to it.
    [[nodiscard]] bool resident() const;
    // Copies the data to `host` (a host pool's allocator) and frees the device bytes.
    void swapOut(Allocator& host);
    // Allocates on the device again (the capacity applies) and copies the host copy back.
    void swapIn();
    // Frees the device bytes without a copy (recompute will refill it).
    void drop();
    // Refills a dropped storage with `fresh`'s buffer (same byte size, same device); `fresh` is
    // left undefined.
    void refill(NdArray& fresh);
    // Moves the whole storage's bytes to `target` (a chunk going between device and host): every
    // array sharing the storage now reads it there. Throws OutOfMemoryError, leaving it where it
    // was, when `target` has no room.
    void moveTo(Allocator& target);
    // True when the storage's bytes are resident on `allocator`.
    [[nodiscard]] bool isOn(const Allocator& allocator) const;
    // True when both arrays share one storage.
    [[nodiscard]] bool sameStorage(const NdArray& other) const
    {
        return m_storage == other.m_storage;
    }

private:
    // The bytes for host code: throws when released or when the memory is a device's.
    [[nodiscard]] std::byte* hostBytes() const;
    [[nodiscard]] NdArray copyOnto(const std::shared_ptr<Allocator::State>& state) const;

    struct Storage;
    std::shared_ptr<Storage> m_storage;
    Shape m_shape;
    DType m_dtype = DType::F32;
    std::int64_t m_offset = 0; // bytes from the storage's start (slices)
};

} // namespace ps::engine
