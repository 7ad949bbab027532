// Per-element math of the comparison, logic, extremum, ranking and running-sum ops (Equal .. Or,
// Max/Min, TopK, CumSum), shared by the CPU kernels (cpu/kernels_elementwise.cpp,
// cpu/kernels_reduce.cpp, cpu/kernels_index.cpp) and the CUDA ones (cuda/cuda_compare_kernels.cu,
// cuda/cuda_scan_kernels.cu): each function is __host__ __device__ under nvcc (kernel_math.h's
// PS_HOST_DEVICE), so the CPU tests cover what the GPU runs.
// Depends on: kernel_math.h (PS_HOST_DEVICE).
#pragma once

#include "kernel_math.h"

#include <cstdint>
#include <type_traits>

namespace ps::engine::math {

// NaN test for f32 or i64 values (an integer is never NaN); no library call, so both sides agree.
template <typename T> PS_HOST_DEVICE inline bool isNanValue(T value)
{
    return value != value; // NOLINT(misc-redundant-expression): true for NaN only
}

// A bool or a condition: nonzero is true.
template <typename T> PS_HOST_DEVICE inline bool truthyValue(T value)
{
    return value != T {};
}

// ONNX's comparison and logic ops; each gives 0 or 1.
enum class Predicate { Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or };

// pred(x, y) over f32 and i64 operands in any mix: the same types compare as they are (i64 stays
// exact), mixed ones as double; And and Or take each side's truth.
template <typename A, typename B> PS_HOST_DEVICE inline bool predicate(Predicate p, A x, B y)
{
    using C = std::conditional_t<std::is_same_v<A, B>, A, double>;
    const auto a = static_cast<C>(x);
    const auto b = static_cast<C>(y);
    switch (p) {
    case Predicate::Equal:
        return a == b;
    case Predicate::Less:
        return a < b;
    case Predicate::LessOrEqual:
        return a <= b;
    case Predicate::Greater:
        return a > b;
    case Predicate::GreaterOrEqual:
        return a >= b;
    case Predicate::And:
        return truthyValue(x) && truthyValue(y);
    case Predicate::Or:
        return truthyValue(x) || truthyValue(y);
    }
    return false;
}

// Max (isMax) or Min of a and b: true when a is the result. NaN propagates as in torch.maximum (a
// NaN a wins; a NaN b loses every comparison, so b wins), and a wins ties.
template <typename T> PS_HOST_DEVICE inline bool takesA(T a, T b, bool isMax)
{
    return isNanValue(a) || (isMax ? a >= b : a <= b);
}

// ReduceMax's scan in row-major order: `candidate` replaces the maximum so far (the first maximum
// stays; NaN wins over numbers).
template <typename T> PS_HOST_DEVICE inline bool replacesMaximum(T candidate, T current)
{
    return candidate > current || (isNanValue(candidate) && !isNanValue(current));
}

// TopK's order: NaN ranks above every number (as torch), then by value; `largest` false reverses
// the values' order. Equal values are ordered by index elsewhere (lower first).
PS_HOST_DEVICE inline bool ranksBefore(float a, float b, bool largest)
{
    const bool nanA = isNanValue(a);
    const bool nanB = isNanValue(b);
    if (nanA || nanB)
        return largest ? nanA && !nanB : nanB && !nanA;
    return largest ? a > b : a < b;
}

// Element `index` at value `value` goes before the element (`otherIndex`, `other`) in TopK's output.
PS_HOST_DEVICE inline bool topKBefore(float value, long long index, float other, long long otherIndex, bool largest)
{
    return ranksBefore(value, other, largest) || (!ranksBefore(other, value, largest) && index < otherIndex);
}

// CumSum along one line of `length` elements `stride` apart: y[i] = the sum of x up to i (exclusive:
// before i), from the line's end when `reverse`.
template <typename T>
PS_HOST_DEVICE inline void cumsumLine(
    const T* x, T* y, long long length, long long stride, bool exclusive, bool reverse)
{
    T run {};
    for (long long s = 0; s < length; ++s) {
        const long long at = (reverse ? length - 1 - s : s) * stride;
        const T value = x[at];
        y[at] = exclusive ? run : run + value;
        run += value;
    }
}

} // namespace ps::engine::math
