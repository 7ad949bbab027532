// The op cases of tests/engine/cuda_kernels_test.cpp: one op on given host inputs, run on the CPU
// and the CUDA backend and compared. This header holds the cases of the comparison, logic,
// extremum, reduction, running-sum, top-k, scatter and Einsum kernels (cuda_compare_kernels.cu,
// cuda_scan_kernels.cu, cuda_scatter_kernels.cu, cuda_einsum_kernels.cu): ties, NaNs, repeated
// and negative indices, mixed element types, every Einsum path (direct, transposed and permuted
// GEMM operands, a permuted result, the general loop); and how a GPU result is compared with the
// CPU's (relativeError) and host inputs uploaded (upload).
#pragma once

#include "kernel_test_support.h" // makeNode, RandomArrays

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

namespace ps::engine::testing {

// Largest |a - b| over the largest |b| (at least 1e-3): one number per compared array; infinite
// where one side is NaN and the other not (std::max would drop a NaN).
inline double relativeError(const NdArray& gpu, const NdArray& cpu, const Backend& backend)
{
    const auto bytes = backend.toHost(gpu);
    if (cpu.dtype() == DType::I64) {
        return std::memcmp(bytes.data(), cpu.i64(), bytes.size()) == 0 ? 0.0 : 1.0;
    }
    const auto* g = reinterpret_cast<const float*>(bytes.data());
    double worst = 0;
    double scale = 1e-3;
    for (std::int64_t i = 0; i < cpu.numel(); ++i) {
        const double a = g[i];
        const double b = cpu.f32()[i];
        if (std::isnan(a) || std::isnan(b)) { // NaN where the other is not: as far off as can be
            if (std::isnan(a) != std::isnan(b))
                return std::numeric_limits<double>::infinity();
            continue;
        }
        worst = std::max(worst, std::abs(a - b));
        scale = std::max(scale, std::abs(b));
    }
    return worst / scale;
}

inline NdArray upload(const Backend& backend, Allocator& allocator, const NdArray& host)
{
    const auto bytes =
        std::span(reinterpret_cast<const std::byte*>(host.dtype() == DType::I64 ? static_cast<const void*>(host.i64())
                                                                                : static_cast<const void*>(host.f32())),
            static_cast<std::size_t>(host.numel()) * (host.dtype() == DType::I64 ? 8U : 4U));
    return backend.fromHost(allocator, host.shape(), host.dtype(), bytes);
}

struct OpCase
{
    Node node;
    std::vector<NdArray> inputs; // host
    std::vector<bool> differentiable;
    double tolerance = 1e-5; // relative to the largest CPU value of each compared array
};

// Values on a grid of `levels` steps in [-1, 1): ties in every row.
inline NdArray steps(RandomArrays& make, Shape shape, int levels)
{
    auto a = make.random(std::move(shape));
    for (std::int64_t i = 0; i < a.numel(); ++i)
        a.f32()[i] = std::floor(a.f32()[i] * static_cast<float>(levels)) / static_cast<float>(levels);
    return a;
}

inline void addOrderCases(RandomArrays& make, std::vector<OpCase>& c)
{
    const Attributes none;
    const auto add = [&](OpType op, Attributes attrs, std::vector<NdArray> in, std::vector<bool> diff,
                         double tol = 1e-5) {
        c.push_back({ makeNode(op, std::move(attrs)), std::move(in), diff, tol });
    };
    const auto i64 = [](std::int64_t v) { return v; };
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const auto withNan = make.floats({ 2, 3 }, { nan, 1.0F, 2.0F, nan, 0.0F, -1.0F });
    // Max and Min: broadcasts, ties (the gradient to a), NaN, integers.
    add(OpType::Max, none, { steps(make, { 2, 3, 4 }, 3), steps(make, { 3, 1 }, 3) }, { true, true });
    add(OpType::Min, none, { steps(make, { 4, 5 }, 3), steps(make, { 5 }, 3) }, { true, true });
    add(OpType::Max, none, { withNan, make.floats({ 3 }, { 0.0F, nan, 2.0F }) }, { true, true });
    add(OpType::Min, none, { make.ints({ 3, 4 }, 9), make.ints({ 4 }, 9) }, { false, false });
    // Comparisons and logic over f32, i64 and mixed operands.
    add(OpType::Equal, none, { steps(make, { 3, 4 }, 2), steps(make, { 4 }, 2) }, { false, false });
    add(OpType::Less, none, { make.ints({ 2, 5 }, 3), make.random({ 5 }, -1.0F, 3.0F) }, { false, false });
    add(OpType::LessOrEqual, none, { make.ints({ 4, 3 }, 5), make.ints({ 4, 1 }, 5) }, { false, false });
    add(OpType::Greater, none, { make.random({ 3, 6 }, 0.0F, 4.0F), make.ints({ 6 }, 4) }, { false, false });
    add(OpType::GreaterOrEqual, none, { steps(make, { 2, 3, 4 }, 2), steps(make, { 3, 1 }, 2) }, { false, false });
    add(OpType::And, none, { make.ints({ 3, 4 }, 2), steps(make, { 4 }, 1) }, { false, false });
    add(OpType::Or, none, { steps(make, { 2, 4 }, 1), steps(make, { 2, 4 }, 1) }, { false, false });
    add(OpType::Not, none, { make.ints({ 3, 5 }, 2) }, { false });
    add(OpType::Not, none, { steps(make, { 3, 5 }, 1) }, { false });
    add(OpType::IsNaN, none, { withNan }, { false });
    // Reductions: axes, keepdims, all axes, no-op, integers, ties and NaN for the maximum.
    add(OpType::ReduceSum, { { "axes", Shape { 1, 3 } } }, { make.random({ 2, 3, 4, 5 }) }, { true });
    add(OpType::ReduceSum, { { "axes", Shape { -1 } }, { "keepdims", i64(0) } }, { make.random({ 3, 700 }) },
        { true }); // chunked column sums
    add(OpType::ReduceSum, none, { make.random({ 4, 6 }) }, { true });
    add(OpType::ReduceSum, { { "noop_with_empty_axes", i64(1) } }, { make.random({ 2, 3 }) }, { true });
    add(OpType::ReduceSum, { { "axes", Shape { 0 } } }, { make.ints({ 5, 3 }, 100) }, { false });
    add(OpType::ReduceMax, { { "axes", Shape { 1 } } }, { steps(make, { 3, 5, 4 }, 2) }, { true });
    add(OpType::ReduceMax, { { "axes", Shape { 0, 2 } }, { "keepdims", i64(0) } }, { make.ints({ 3, 4, 2 }, 7) },
        { false });
    add(OpType::ReduceMax, { { "axes", Shape { 1 } } }, { withNan }, { true });
    add(OpType::ReduceMax, { { "axes", Shape { 1 } } }, // a NaN after a number replaces it
        { make.floats({ 2, 3 }, { 1.0F, nan, 2.0F, 3.0F, 0.0F, nan }) }, { true });
    // CumSum: along an inner axis, exclusive and reverse, integers.
    add(OpType::CumSum, { { "axis", i64(1) } }, { make.random({ 3, 6, 4 }) }, { true });
    add(OpType::CumSum, { { "axis", i64(-1) }, { "exclusive", i64(1) }, { "reverse", i64(1) } },
        { make.random({ 2, 9 }) }, { true });
    add(OpType::CumSum, { { "axis", i64(0) } }, { make.ints({ 5, 3 }, 9) }, { false });
    // TopK: ties (lower index first), smallest, every element, k as an input, NaN.
    add(OpType::TopK, { { "k", i64(3) } }, { steps(make, { 4, 9 }, 3) }, { true });
    add(OpType::TopK, { { "k", i64(7) }, { "axis", i64(1) }, { "largest", i64(0) } }, { make.random({ 2, 7, 3 }) },
        { true });
    add(OpType::TopK, { { "axis", i64(0) } }, { make.random({ 6, 5 }), make.indices({ 1 }, { 2 }) }, { true, false });
    add(OpType::TopK, { { "k", i64(2) } }, { withNan }, { true });
    // ScatterND: repeated and negative indices (the last update wins), deeper tuples, integers.
    add(OpType::ScatterND, none,
        { make.random({ 5, 3 }), make.indices({ 4, 1 }, { 1, 3, -4, -1 }), make.random({ 4, 3 }) },
        { true, false, true });
    add(OpType::ScatterND, none,
        { make.random({ 3, 4, 2 }), make.indices({ 3, 2 }, { 0, 1, 2, -1, 0, 1 }), make.random({ 3, 2 }) },
        { true, false, true });
    add(OpType::ScatterND, none, { make.ints({ 4, 2 }, 9), make.indices({ 2, 1 }, { 3, 0 }), make.ints({ 2, 2 }, 9) },
        { false, false, false });
    add(OpType::ScatterND, none, { make.random({ 5, 0 }), make.indices({ 2, 1 }, { 1, 1 }), make.random({ 2, 0 }) },
        { true, false, true }); // slots of no elements
    // ScatterElements: written (repeats: the last wins) and added, integers.
    add(OpType::ScatterElements, { { "axis", i64(1) } },
        { make.random({ 3, 5 }), make.indices({ 3, 2 }, { 4, 4, 0, -1, 2, 1 }), make.random({ 3, 2 }) },
        { true, false, true });
    add(OpType::ScatterElements, { { "axis", i64(0) }, { "add", i64(1) } },
        { make.random({ 4, 3 }), make.indices({ 3, 3 }, { 0, 1, 3, 0, 1, 3, 2, 2, 0 }), make.random({ 3, 3 }) },
        { true, false, true });
    add(OpType::ScatterElements, { { "axis", i64(-1) } },
        { make.ints({ 2, 4 }, 9), make.indices({ 2, 1 }, { 3, -4 }), make.ints({ 2, 1 }, 9) }, { false, false, false });
    // Einsum: every path of einsum_plan.h.
    const auto einsum = [&](const char* equation, std::vector<NdArray> in) {
        const std::vector<bool> diff(in.size(), true);
        add(OpType::Einsum, { { "equation", std::string(equation) } }, std::move(in), diff, 1e-4);
    };
    einsum("bij,bjk->bik", { make.random({ 2, 5, 7 }), make.random({ 2, 7, 3 }) }); // direct
    einsum("bhqd,bhkd->bhqk", { make.random({ 2, 2, 5, 4 }), make.random({ 2, 2, 6, 4 }) }); // transposed b
    einsum("ij,jk->ki", { make.random({ 4, 6 }), make.random({ 6, 3 }) }); // swapped operands
    einsum("bnd,dh->bhn", { make.random({ 2, 5, 4 }), make.random({ 4, 3 }) }); // a permuted result
    einsum("jbi,kj->bik", { make.random({ 4, 2, 3 }), make.random({ 5, 4 }) }); // a permuted operand
    einsum("i,i->", { make.random({ 9 }), make.random({ 9 }) });
    einsum("ijk->j", { make.random({ 3, 4, 5 }) }); // one term: the loop
    einsum("ij,kj->ikj", { make.random({ 3, 4 }), make.random({ 2, 4 }) }); // a batch of outer products
    einsum("ij,jk->", { make.random({ 3, 4 }), make.random({ 4, 2 }) }); // no GEMM form: the loop
}

} // namespace ps::engine::testing
