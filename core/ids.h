// Strongly typed ids for the planner's index spaces.
//
// Node, tensor, stage, device and micro-batch numbers are all small integers and the easiest thing
// to mix up in a pipeline planner; each gets its own type so the compiler rejects the mix-up.
// Owns: the id templates. Depends on: the standard library only.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>

namespace ps {

template <typename Tag> struct TypedId
{
    static constexpr std::uint32_t kInvalid = std::numeric_limits<std::uint32_t>::max();

    std::uint32_t value = kInvalid;

    constexpr TypedId() = default;
    constexpr explicit TypedId(std::uint32_t v)
        : value(v)
    {
    }

    [[nodiscard]] constexpr bool valid() const
    {
        return value != kInvalid;
    }
    [[nodiscard]] constexpr std::size_t index() const
    {
        return value;
    }
    auto operator<=>(const TypedId&) const = default;
};

using NodeId = TypedId<struct NodeTag>;
using TensorId = TypedId<struct TensorTag>;
using StageId = TypedId<struct StageTag>;
using DeviceId = TypedId<struct DeviceTag>;
using MicroBatchId = TypedId<struct MicroBatchTag>;

} // namespace ps

template <typename Tag> struct std::hash<ps::TypedId<Tag>>
{
    std::size_t operator()(const ps::TypedId<Tag>& id) const noexcept
    {
        return std::hash<std::uint32_t> {}(id.value);
    }
};
