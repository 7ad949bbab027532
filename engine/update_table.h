// The table a fused optimizer launch reads its parameters from (engine/cuda: AdamW over every
// parameter of a stage in one launch, however many): for `count` slots, the weights', gradients',
// first and second moments' pointers and each slot's end offset in the flat range of all their
// elements, as one block of 8-byte words, so one host-to-device copy moves it. Host code packs it;
// the kernel (and the CPU test of the layout) reads it through UpdateTable.
// Depends on: kernel_math.h.
#pragma once

#include "kernel_math.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace ps::engine {

static_assert(sizeof(void*) == sizeof(std::uint64_t), "an update table holds 64-bit pointers");

// One parameter of a fused update: its n elements in w, g, m and v.
struct UpdateSlot
{
    float* w = nullptr;
    const float* g = nullptr;
    float* m = nullptr;
    float* v = nullptr;
    long long n = 0;
};

// Views of a packed table, at a host or device address.
struct UpdateTable
{
    float* const* w = nullptr;
    const float* const* g = nullptr;
    float* const* m = nullptr;
    float* const* v = nullptr;
    const long long* end = nullptr; // increasing; an empty slot repeats the previous end
    int count = 0;

    // All the slots' elements.
    [[nodiscard]] PS_HOST_DEVICE long long total() const
    {
        return count > 0 ? end[count - 1] : 0;
    }
    // The slot holding flat element e (0 <= e < total()) and e's index in it.
    PS_HOST_DEVICE void locate(long long e, int& slot, long long& index) const
    {
        slot = math::slotOf(end, count, e);
        index = e - (slot > 0 ? end[slot - 1] : 0);
    }
};

// 8-byte words of a table of `count` slots: w, g, m, v pointers, then the ends.
constexpr std::size_t updateTableWords(std::size_t count)
{
    return 5 * count;
}

// The views of a table of `count` slots packed at `base`.
PS_HOST_DEVICE inline UpdateTable updateTableAt(const void* base, int count)
{
    const auto* words = static_cast<const std::uint64_t*>(base);
    const auto n = static_cast<std::size_t>(count);
    return { reinterpret_cast<float* const*>(words), reinterpret_cast<const float* const*>(words + n),
        reinterpret_cast<float* const*>(words + 2 * n), reinterpret_cast<float* const*>(words + 3 * n),
        reinterpret_cast<const long long*>(words + 4 * n), count };
}

// Packs `slots` into `words` (updateTableWords(slots.size()) of them).
inline void packUpdateTable(std::span<const UpdateSlot> slots, std::uint64_t* words)
{
    const auto n = slots.size();
    long long end = 0;
    for (std::size_t s = 0; s < n; ++s) {
        const void* pointers[4] = { slots[s].w, slots[s].g, slots[s].m, slots[s].v };
        for (std::size_t k = 0; k < 4; ++k)
            std::memcpy(words + k * n + s, &pointers[k], sizeof(std::uint64_t));
        end += slots[s].n;
        std::memcpy(words + 4 * n + s, &end, sizeof(std::uint64_t));
    }
}

} // namespace ps::engine
