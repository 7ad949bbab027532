// Internal to the CPU kernels: the per-family entry points runForward/runBackward dispatch to, and
// the broadcasting helpers they share.
#pragma once

#include "cpu/kernels.h"

#include <functional>

namespace ps::engine::detail {

struct Backward
{
    const std::vector<NdArray>& gradOut;
    const std::vector<bool>& needGrad;
    std::vector<NdArray>& gradIn;
};

// For every element of `out`: the flat offsets into operands of shapes `a` and `b` broadcast to it.
void forEachBroadcast(const Shape& out, const Shape& a, const Shape& b,
    const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn);
// Sums a gradient of the broadcast shape back to `target` (the operand's shape).
[[nodiscard]] NdArray reduceToShape(const NdArray& grad, const Shape& target, Allocator& allocator);
[[nodiscard]] std::vector<std::int64_t> stridesOf(const Shape& shape);
// A zero array where a gradient is undefined (an unused output).
[[nodiscard]] NdArray gradOrZeros(const NdArray& grad, const Shape& shape, Allocator& allocator);

void mathForward(const Node& node, NodeValues& v, KernelContext& ctx);
void mathBackward(const Node& node, const NodeValues& v, Backward& b, KernelContext& ctx);
void nnForward(const Node& node, NodeValues& v, KernelContext& ctx);
void nnBackward(const Node& node, const NodeValues& v, Backward& b, KernelContext& ctx);
void layoutForward(const Node& node, NodeValues& v, KernelContext& ctx);
void layoutBackward(const Node& node, const NodeValues& v, Backward& b, KernelContext& ctx);
void convForward(const Node& node, NodeValues& v, KernelContext& ctx);
void convBackward(const Node& node, const NodeValues& v, Backward& b, KernelContext& ctx);

} // namespace ps::engine::detail
