// Internal to the ONNX importer: overflow-safe size arithmetic shared by fixed_shapes.cpp and
// input_dims.cpp (sizes from a malformed file can be anything).
// Depends on: the standard library only.
#pragma once

#include <cstdint>
#include <vector>

namespace ps::onnximport::arith {

// a * b, or -1 when it overflows (sizes are never negative: a failed comparison, not UB on the
// huge dimensions a malformed file can hold).
inline std::int64_t mul(std::int64_t a, std::int64_t b)
{
    std::int64_t r = 0;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

inline std::int64_t product(const std::vector<std::int64_t>& d, std::size_t begin, std::size_t end)
{
    std::int64_t p = 1;
    for (std::size_t i = begin; i < end && i < d.size(); ++i)
        p = mul(p, d[i]);
    return p;
}

// Whether a1 / a0 == to / from, all positive.
inline bool sameRatio(std::int64_t a1, std::int64_t a0, std::int64_t to, std::int64_t from)
{
    const auto l = mul(a1, from);
    return l > 0 && l == mul(a0, to);
}

} // namespace ps::onnximport::arith
