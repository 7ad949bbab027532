// Index ops on the CPU: Gather, ScatterND, TopK and Einsum,
// with ONNX's semantics where PyTorch's exporter emits them (the numbers match torch's). Every
// backward is the adjoint of its forward's index map: a scatter-add where forward gathers.
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"
#include "cpu/typed_arrays.h"
#include "einsum_plan.h"
#include "op_rules.h"
#include "order_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

namespace ps::engine::detail {
namespace {

    std::string where(const Node& node)
    {
        return nodeLabel(node);
    }

    std::size_t axisOf(const Node& node, std::int64_t axis, std::size_t rank)
    {
        const auto r = static_cast<std::int64_t>(rank);
        if (axis < -r || axis >= r)
            throw Error(where(node) + "axis " + std::to_string(axis) + " is out of range for a rank "
                + std::to_string(r) + " input");
        return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
    }

    // Raw elements of an f32 or i64 array (the kernels that only move data serve both).
    std::size_t elementBytes(const NdArray& a)
    {
        return a.dtype() == DType::F32 ? sizeof(float) : sizeof(std::int64_t);
    }

    // ---- Gather along an axis ----

    // The indices as positions in [0, length), negative ones counted from the end.
    std::vector<std::int64_t> positionsOf(
        const Node& node, const NdArray& indices, std::int64_t length, const std::string& what)
    {
        requireDType(node, indices, DType::I64, "the indices");
        std::vector<std::int64_t> pos(static_cast<std::size_t>(indices.numel()));
        for (std::size_t i = 0; i < pos.size(); ++i) {
            const auto raw = indices.i64()[i];
            pos[i] = raw < 0 ? raw + length : raw;
            if (pos[i] < 0 || pos[i] >= length)
                throw Error(where(node) + "index " + std::to_string(raw) + " is out of range for " + what
                    + " of length " + std::to_string(length));
        }
        return pos;
    }

    struct GatherPlan
    {
        AxisView data;
        Shape out;
        std::vector<std::int64_t> positions;
    };

    GatherPlan gatherPlan(const Node& node, const NdArray& data, const NdArray& indices)
    {
        if (data.dtype() != DType::F32 && data.dtype() != DType::I64)
            throw Error(where(node) + "data must be f32 or i64");
        const auto& ds = data.shape();
        if (ds.empty())
            throw Error(where(node) + "cannot gather from a scalar");
        const auto axis = axisOf(node, node.intAttr("axis", 0), ds.size());
        GatherPlan plan { axisView(ds, axis), Shape(ds.begin(), ds.begin() + static_cast<std::ptrdiff_t>(axis)), {} };
        plan.out.insert(plan.out.end(), indices.shape().begin(), indices.shape().end());
        plan.out.insert(plan.out.end(), ds.begin() + static_cast<std::ptrdiff_t>(axis) + 1, ds.end());
        plan.positions = positionsOf(node, indices, plan.data.length, "axis " + std::to_string(axis));
        return plan;
    }

    void gatherForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& data = v.in[0];
        const auto plan = gatherPlan(node, data, v.in[1]);
        auto out = NdArray::empty(ctx.allocator, plan.out, data.dtype());
        const auto size = elementBytes(data);
        const auto rowBytes = static_cast<std::size_t>(plan.data.inner) * size;
        const auto count = static_cast<std::int64_t>(plan.positions.size());
        for (std::int64_t o = 0; o < plan.data.outer; ++o) {
            for (std::int64_t j = 0; j < count; ++j) {
                const auto src = (o * plan.data.length + plan.positions[static_cast<std::size_t>(j)]) * plan.data.inner;
                std::memcpy(typed::rawBytes(out) + static_cast<std::size_t>((o * count + j) * plan.data.inner) * size,
                    typed::rawBytes(data) + static_cast<std::size_t>(src) * size, rowBytes);
            }
        }
        v.out = { out };
    }

    void gatherBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (!g.needGrad[0])
            return;
        const auto& data = v.in[0];
        const auto plan = gatherPlan(node, data, v.in[1]);
        requireDType(node, data, DType::F32, "data with a gradient");
        const auto dy = gradOrZeros(g.gradOut[0], plan.out, ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, data.shape());
        const auto count = static_cast<std::int64_t>(plan.positions.size());
        const auto inner = plan.data.inner;
        for (std::int64_t o = 0; o < plan.data.outer; ++o) {
            for (std::int64_t j = 0; j < count; ++j) {
                float* dst = dx.f32() + (o * plan.data.length + plan.positions[static_cast<std::size_t>(j)]) * inner;
                const float* src = dy.f32() + (o * count + j) * inner;
                for (std::int64_t k = 0; k < inner; ++k)
                    dst[k] += src[k];
            }
        }
        g.gradIn[0] = dx;
    }

    // ---- ScatterND (reduction none) ----

    // Each update row's slot: data viewed as (slots, inner) with inner = prod(data.shape[k:]).
    struct ScatterPlan
    {
        std::int64_t inner = 1;
        std::int64_t slotCount = 0; // the product of the indexed dims (inner may be 0)
        std::vector<std::int64_t> slots;
    };

    ScatterPlan scatterPlan(const Node& node, const NodeValues& v)
    {
        if (v.in.size() != 3)
            throw Error(where(node) + "needs data, indices and updates");
        const auto& data = v.in[0];
        const auto& indices = v.in[1];
        requireDType(node, indices, DType::I64, "the indices");
        if (v.in[2].dtype() != data.dtype())
            throw Error(where(node) + "updates must have the data's dtype");
        const auto nd = scatterNdOf(node, data.shape(), indices.shape(), v.in[2].shape()); // op_rules.h
        ScatterPlan plan;
        plan.inner = nd.inner;
        plan.slotCount = nd.gather.slicesPerBatch;
        for (std::int64_t r = 0; r < nd.rows; ++r) {
            int bad = 0;
            const auto* tuple = indices.i64() + r * nd.gather.depth;
            const auto slot = math::ndGatherSlice(nd.gather, r, tuple, &bad); // gather_math.h's, as the GPU's
            if (slot < 0)
                throw Error(where(node) + "index " + std::to_string(tuple[bad]) + " is out of range for axis "
                    + std::to_string(bad) + " of length " + std::to_string(nd.gather.sliceDims[bad]));
            plan.slots.push_back(slot);
        }
        return plan;
    }

    void scatterNDForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& data = v.in[0];
        const auto plan = scatterPlan(node, v);
        auto out = NdArray::empty(ctx.allocator, data.shape(), data.dtype());
        const auto size = elementBytes(data);
        std::memcpy(typed::rawBytes(out), typed::rawBytes(data), static_cast<std::size_t>(data.numel()) * size);
        const auto rowBytes = static_cast<std::size_t>(plan.inner) * size;
        for (std::size_t r = 0; r < plan.slots.size(); ++r) // in order: the last of duplicates wins
            std::memcpy(typed::rawBytes(out) + static_cast<std::size_t>(plan.slots[r] * plan.inner) * size,
                typed::rawBytes(v.in[2]) + r * rowBytes, rowBytes);
        v.out = { out };
    }

    void scatterNDBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& data = v.in[0];
        const auto plan = scatterPlan(node, v);
        const auto dy = gradOrZeros(g.gradOut[0], data.shape(), ctx.allocator);
        // The update that forward left in each slot (duplicates: the last).
        std::vector<std::int64_t> writer(static_cast<std::size_t>(plan.slotCount), -1);
        for (std::size_t r = 0; r < plan.slots.size(); ++r)
            writer[static_cast<std::size_t>(plan.slots[r])] = static_cast<std::int64_t>(r);
        const auto rowBytes = static_cast<std::size_t>(plan.inner) * sizeof(float);
        if (g.needGrad[0]) {
            auto dx = NdArray::empty(ctx.allocator, data.shape());
            std::memcpy(dx.f32(), dy.f32(), static_cast<std::size_t>(data.numel()) * sizeof(float));
            for (auto slot : plan.slots)
                std::memset(dx.f32() + slot * plan.inner, 0, rowBytes);
            g.gradIn[0] = dx;
        }
        if (g.needGrad.size() > 2 && g.needGrad[2]) {
            auto du = NdArray::zeros(ctx.allocator, v.in[2].shape());
            for (std::size_t r = 0; r < plan.slots.size(); ++r) {
                if (writer[static_cast<std::size_t>(plan.slots[r])] == static_cast<std::int64_t>(r))
                    std::memcpy(du.f32() + static_cast<std::int64_t>(r) * plan.inner,
                        dy.f32() + plan.slots[r] * plan.inner, rowBytes);
            }
            g.gradIn[2] = du;
        }
    }

    // ---- TopK: values and their indices along an axis ----

    struct TopKPlan
    {
        AxisView x;
        std::int64_t k;
        Shape out;
    };

    // `k` < 0: from the attribute, else from ONNX's k input (forward only: backward takes k from the
    // saved indices, as the k input's data may be released by then).
    TopKPlan topKPlan(const Node& node, const NodeValues& v, std::int64_t k)
    {
        const auto& x = v.in[0];
        requireDType(node, x, DType::F32, "the input");
        if (x.shape().empty())
            throw Error(where(node) + "needs an input of rank 1 or more");
        const auto axis = axisOf(node, node.intAttr("axis", -1), x.shape().size());
        if (k < 0)
            k = node.intAttr("k", -1);
        if (k < 0 && v.in.size() > 1 && v.in[1].dtype() == DType::I64 && v.in[1].numel() == 1)
            k = v.in[1].i64()[0];
        TopKPlan plan { axisView(x.shape(), axis), k, x.shape() };
        if (k < 0 || k > plan.x.length)
            throw Error(where(node) + "k " + std::to_string(k) + " is not in [0, " + std::to_string(plan.x.length)
                + "] (axis " + std::to_string(axis) + " of " + formatShape(x.shape()) + ")");
        plan.out[axis] = k;
        return plan;
    }

    void topKForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto plan = topKPlan(node, v, -1);
        const bool largest = node.intAttr("largest", 1) != 0;
        auto values = NdArray::empty(ctx.allocator, plan.out);
        auto indices = NdArray::empty(ctx.allocator, plan.out, DType::I64);
        const auto outer = plan.x.outer;
        const auto length = plan.x.length;
        const auto inner = plan.x.inner;
        std::vector<std::int64_t> order(static_cast<std::size_t>(length));
        for (std::int64_t o = 0; o < outer; ++o) {
            for (std::int64_t i = 0; i < inner; ++i) {
                const float* line = v.in[0].f32() + o * length * inner + i;
                std::iota(order.begin(), order.end(), 0);
                std::partial_sort(order.begin(), order.begin() + plan.k, order.end(), [&](auto a, auto b) {
                    return math::topKBefore(line[a * inner], a, line[b * inner], b, largest); // order_math.h's
                });
                for (std::int64_t j = 0; j < plan.k; ++j) { // sorted whatever "sorted" says: deterministic
                    const auto at = (o * plan.k + j) * inner + i;
                    indices.i64()[at] = order[static_cast<std::size_t>(j)];
                    values.f32()[at] = line[order[static_cast<std::size_t>(j)] * inner];
                }
            }
        }
        v.out = { values, indices };
        v.saved = { indices };
    }

    void topKBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& indices = v.saved[0];
        const auto axis = axisOf(node, node.intAttr("axis", -1), indices.shape().size());
        const auto plan = topKPlan(node, v, indices.shape()[axis]);
        const auto dy = gradOrZeros(g.gradOut[0], plan.out, ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, v.in[0].shape());
        const auto inner = plan.x.inner;
        for (std::int64_t o = 0; o < plan.x.outer; ++o) {
            for (std::int64_t j = 0; j < plan.k; ++j) {
                for (std::int64_t i = 0; i < inner; ++i) {
                    const auto at = (o * plan.k + j) * inner + i;
                    dx.f32()[(o * plan.x.length + indices.i64()[at]) * inner + i] += dy.f32()[at];
                }
            }
        }
        g.gradIn[0] = dx;
    }

    // ---- Einsum over one or two operands (einsum_plan.h's plan and per-element math, which the CUDA
    // kernels share) ----

    struct Term
    {
        std::string letters;
        const float* data;
    };

    EinsumPlan planOf(const Node& node, const std::vector<NdArray>& in)
    {
        std::vector<Shape> shapes;
        for (const auto& a : in) {
            requireDType(node, a, DType::F32, "every operand");
            shapes.push_back(a.shape());
        }
        return einsumPlan(node, shapes);
    }

    // result[letters] = the sum over every other letter of the product of the terms.
    NdArray contractLoop(const Node& node, const std::vector<Term>& terms, const std::string& result,
        const EinsumPlan& plan, Allocator& allocator)
    {
        const auto loop = einsumLoopOf(node, terms, result, plan);
        auto out = NdArray::empty(allocator, einsumShape(result, plan));
        const float* b = terms.size() > 1 ? terms[1].data : nullptr;
        for (std::int64_t r = 0; r < out.numel(); ++r)
            out.f32()[r] = static_cast<float>(math::contractElement(loop, terms[0].data, b, r));
        return out;
    }

    // One GEMM operand: the term as stored when its letters are (batch, rows, cols) or (batch, cols, rows)
    // (transposed), else a permuted copy.
    struct GemmOperand
    {
        const float* data;
        bool trans;
        NdArray copy;
    };

    GemmOperand gemmOperand(const Node& node, const Term& t, const std::string& batch, const std::string& rows,
        const std::string& cols, const EinsumPlan& plan, Allocator& allocator)
    {
        if (t.letters == batch + rows + cols)
            return { t.data, false, {} };
        if (t.letters == batch + cols + rows)
            return { t.data, true, {} };
        auto copy = contractLoop(node, { t }, batch + rows + cols, plan, allocator);
        return { copy.f32(), false, copy };
    }

    NdArray contractGemm(const Node& node, const std::vector<Term>& terms, const EinsumGemm& g,
        const std::string& result, const EinsumPlan& plan, Allocator& allocator)
    {
        const auto& a = terms[g.swapped ? 1 : 0];
        const auto& b = terms[g.swapped ? 0 : 1];
        const auto order = g.batch + g.m + g.n;
        const auto size = [&](const std::string& letters) { return numElements(einsumShape(letters, plan)); };
        const auto nb = size(g.batch), nm = size(g.m), nn = size(g.n), nk = size(g.k);
        const auto pa = gemmOperand(node, a, g.batch, g.m, g.k, plan, allocator); // (batch, M, K)
        const auto pb = gemmOperand(node, b, g.batch, g.k, g.n, plan, allocator); // (batch, K, N)
        auto c = NdArray::zeros(allocator, einsumShape(order, plan)); // (batch, M, N)
        if (nm > 0 && nn > 0 && nk > 0) {
            for (std::int64_t i = 0; i < nb; ++i)
                sgemm(pa.trans, pb.trans, nm, nn, nk, 1.0F, pa.data + i * nm * nk, pa.trans ? nm : nk,
                    pb.data + i * nk * nn, pb.trans ? nk : nn, 0.0F, c.f32() + i * nm * nn, nn);
        }
        return order == result ? c : contractLoop(node, { { order, c.f32() } }, result, plan, allocator);
    }

    NdArray contract(const Node& node, const std::vector<Term>& terms, const std::string& result,
        const EinsumPlan& plan, Allocator& allocator)
    {
        if (terms.size() == 2) {
            if (const auto g = einsumGemm(terms[0].letters, terms[1].letters, result))
                return contractGemm(node, terms, *g, result, plan, allocator);
        }
        return contractLoop(node, terms, result, plan, allocator);
    }

    void einsumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto plan = planOf(node, v.in);
        std::vector<Term> terms;
        for (std::size_t t = 0; t < v.in.size(); ++t)
            terms.push_back({ plan.inputs[t], v.in[t].f32() });
        v.out = { contract(node, terms, plan.output, plan, ctx.allocator) };
    }

    // d operand t = einsum(dOut, the other operand -> operand t's letters).
    void einsumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto plan = planOf(node, v.in);
        const auto dy = gradOrZeros(g.gradOut[0], einsumShape(plan.output, plan), ctx.allocator);
        for (std::size_t t = 0; t < v.in.size(); ++t) {
            if (!g.needGrad[t])
                continue;
            std::vector<Term> terms { { plan.output, dy.f32() } };
            if (v.in.size() == 2)
                terms.push_back({ plan.inputs[1 - t], v.in[1 - t].f32() });
            g.gradIn[t] = contract(node, terms, plan.inputs[t], plan, ctx.allocator);
        }
    }

} // namespace

void registerIndexKernels(KernelTable& table)
{
    table.add(OpType::Gather, { gatherForward, gatherBackward });
    table.add(OpType::ScatterND, { scatterNDForward, scatterNDBackward });
    table.add(OpType::TopK, { topKForward, topKBackward });
    table.add(OpType::Einsum, { einsumForward, einsumBackward });
}

} // namespace ps::engine::detail
