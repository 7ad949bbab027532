// Einsum's plan over one or two operands (letters only), shared by the CPU kernels
// (cpu/kernels_index.cpp) and the CUDA ones (cuda/cuda_einsum_kernels.cu): the equation and every
// letter's size (host), the contraction as a loop over index combinations whose per-element math
// (math::contractElement) is __host__ __device__, and the batched-GEMM form where one applies.
// Depends on: core graph types and op_registry.h (the equation's rules), kernel_math.h.
#pragma once

#include "graph/graph.h"
#include "kernel_math.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ps::engine {
namespace math {

    // At most this many letters in the result, and as many summed over.
    inline constexpr int kMaxEinsumLetters = 12;

    // result[r] = the sum over every summed letter's values of the product of the terms (one or two),
    // each term reached through its strides per letter (0 where the term lacks the letter).
    struct EinsumLoop
    {
        int terms = 1;
        int outRank = 0;
        long long outSize[kMaxEinsumLetters] = {};
        long long outStride[2][kMaxEinsumLetters] = {};
        int sumRank = 0;
        long long sumSize[kMaxEinsumLetters] = {};
        long long sumStride[2][kMaxEinsumLetters] = {};
        long long sumCount = 1;
    };

    // Result element `r` (row-major over the result letters), summed in double with the last summed
    // letter fastest; `b` is unused for one term.
    PS_HOST_DEVICE inline double contractElement(const EinsumLoop& l, const float* a, const float* b, long long r)
    {
        long long offA = 0;
        long long offB = 0;
        for (int d = l.outRank - 1; d >= 0; --d) {
            const long long c = r % l.outSize[d];
            r /= l.outSize[d];
            offA += c * l.outStride[0][d];
            offB += c * l.outStride[1][d];
        }
        long long index[kMaxEinsumLetters] = {};
        double sum = 0;
        for (long long s = 0; s < l.sumCount; ++s) {
            sum += l.terms == 1 ? static_cast<double>(a[offA]) : static_cast<double>(a[offA]) * b[offB];
            for (int d = l.sumRank - 1; d >= 0; --d) {
                ++index[d];
                offA += l.sumStride[0][d];
                offB += l.sumStride[1][d];
                if (index[d] < l.sumSize[d])
                    break;
                offA -= l.sumStride[0][d] * l.sumSize[d];
                offB -= l.sumStride[1][d] * l.sumSize[d];
                index[d] = 0;
            }
        }
        return sum;
    }

} // namespace math

// The equation's terms and every letter's size, read off the operands' shapes.
struct EinsumPlan
{
    std::vector<std::string> inputs;
    std::string output;
    std::array<std::int64_t, 128> sizes {}; // per letter
};

// Parses the node's `equation` (op_registry.h's rules) and checks each operand's rank and every
// letter's size across operands; errors name the node.
[[nodiscard]] EinsumPlan einsumPlan(const Node& node, const std::vector<Shape>& operands);

// The shape of a term with these letters.
[[nodiscard]] Shape einsumShape(const std::string& letters, const EinsumPlan& plan);

// result[letters] = the sum over every other letter of the product of `terms` (one or two letter
// strings): a result letter in no term replicates (the gradient of a summed-out letter). Throws
// naming the node above kMaxEinsumLetters letters either way.
[[nodiscard]] math::EinsumLoop einsumLoop(
    const Node& node, const std::vector<std::string>& terms, const std::string& result, const EinsumPlan& plan);

// The same for terms of any type with a `letters` string (the kernels' own term types).
template <typename Term>
[[nodiscard]] math::EinsumLoop einsumLoopOf(
    const Node& node, const std::vector<Term>& terms, const std::string& result, const EinsumPlan& plan)
{
    std::vector<std::string> letters;
    for (const auto& t : terms)
        letters.push_back(t.letters);
    return einsumLoop(node, letters, result, plan);
}

// Two terms where every letter is in two of (a, b, result): C (batch, M, N) = A (batch, M, K) B
// (batch, K, N), batch letters in all three, M in a and the result, N in b and the result, K in a
// and b. `swapped`: the operands trade places (the result is (batch, N, M): C^T = B^T A^T).
struct EinsumGemm
{
    bool swapped = false;
    std::string batch, m, n, k;
};
[[nodiscard]] std::optional<EinsumGemm> einsumGemm(
    const std::string& a, const std::string& b, const std::string& result);

} // namespace ps::engine
