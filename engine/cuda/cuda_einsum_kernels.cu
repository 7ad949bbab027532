// CUDA kernels of Einsum over one or two f32 operands, with the CPU's semantics: the plan (letters,
// sizes, the batched-GEMM form) is engine/einsum_plan.h's and each element of a general contraction
// is its math::contractElement (summed in double, the last summed letter fastest), which the CPU
// kernels call. A contraction of batched-GEMM form runs as one strided batched GEMM through cuBLAS
// (at the run's GEMM precision), its operands permuted first where their letters are out of order;
// the backward contracts dy with the other operand, as the CPU's.
#include "cuda/cuda_common.cuh"
#include "einsum_plan.h"

#include <limits>

namespace ps::engine::cuda {
namespace {

    __global__ void contractKernel(math::EinsumLoop loop, const float* a, const float* b, float* out, long long n)
    {
        for (auto r = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; r < n;
             r += static_cast<long long>(gridDim.x) * blockDim.x)
            out[r] = static_cast<float>(math::contractElement(loop, a, b, r));
    }

    struct Term
    {
        std::string letters;
        const NdArray* array;
    };

    NdArray contractLoop(const Node& node, const std::vector<Term>& terms, const std::string& result,
        const EinsumPlan& plan, Allocator& allocator)
    {
        const auto loop = einsumLoopOf(node, terms, result, plan);
        auto out = NdArray::empty(allocator, einsumShape(result, plan));
        const auto n = out.numel();
        if (n > 0)
            contractKernel<<<blocksFor(n), kThreads>>>(
                loop, f32(*terms[0].array), terms.size() > 1 ? f32(*terms[1].array) : nullptr, f32(out), n);
        checkLaunch(label(node));
        return out;
    }

    // A GEMM operand (batch, rows, cols): the term as stored, transposed when stored (batch, cols,
    // rows), else a permuted copy.
    struct Operand
    {
        NdArray array;
        bool trans = false;
    };

    Operand operandOf(const Node& node, const Term& t, const std::string& batch, const std::string& rows,
        const std::string& cols, const EinsumPlan& plan, Allocator& allocator)
    {
        if (t.letters == batch + rows + cols)
            return { *t.array, false };
        if (t.letters == batch + cols + rows)
            return { *t.array, true };
        return { contractLoop(node, { t }, batch + rows + cols, plan, allocator), false };
    }

    int asInt(const Node& node, std::int64_t v)
    {
        if (v > std::numeric_limits<int>::max())
            throw Error(label(node) + ": a GEMM size of " + std::to_string(v) + " is above cuBLAS's int range");
        return static_cast<int>(v);
    }

    NdArray contractGemm(const Node& node, const std::vector<Term>& terms, const EinsumGemm& g,
        const std::string& result, const EinsumPlan& plan, KernelContext& ctx)
    {
        const auto& a = terms[g.swapped ? 1 : 0];
        const auto& b = terms[g.swapped ? 0 : 1];
        const auto order = g.batch + g.m + g.n;
        const auto size = [&](const std::string& letters) { return numElements(einsumShape(letters, plan)); };
        const auto nb = size(g.batch), nm = size(g.m), nn = size(g.n), nk = size(g.k);
        const auto pa = operandOf(node, a, g.batch, g.m, g.k, plan, ctx.allocator); // (batch, M, K)
        const auto pb = operandOf(node, b, g.batch, g.k, g.n, plan, ctx.allocator); // (batch, K, N)
        auto c = NdArray::zeros(ctx.allocator, einsumShape(order, plan)); // (batch, M, N)
        if (nb > 0 && nm > 0 && nn > 0 && nk > 0) {
            const auto ga = gemmOperand(pa.array, ctx, node);
            const auto gb = gemmOperand(pb.array, ctx, node);
            gemm(ctx.gemm, pa.trans, pb.trans, asInt(node, nm), asInt(node, nn), asInt(node, nk), ga.at(0),
                asInt(node, pa.trans ? nm : nk), nm * nk, gb.at(0), asInt(node, pb.trans ? nk : nn), nk * nn, 0.0F,
                f32(c), asInt(node, nn), nm * nn, asInt(node, nb));
        }
        return order == result ? c : contractLoop(node, { { order, &c } }, result, plan, ctx.allocator);
    }

    NdArray contract(const Node& node, const std::vector<Term>& terms, const std::string& result,
        const EinsumPlan& plan, KernelContext& ctx)
    {
        if (terms.size() == 2) {
            if (const auto g = einsumGemm(terms[0].letters, terms[1].letters, result))
                return contractGemm(node, terms, *g, result, plan, ctx);
        }
        return contractLoop(node, terms, result, plan, ctx.allocator);
    }

    EinsumPlan planOf(const Node& node, const std::vector<NdArray>& in)
    {
        std::vector<Shape> shapes;
        for (const auto& a : in) {
            requireF32(node, a);
            shapes.push_back(a.shape());
        }
        return einsumPlan(node, shapes);
    }

    void einsumForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto plan = planOf(node, v.in);
        std::vector<Term> terms;
        for (std::size_t t = 0; t < v.in.size(); ++t)
            terms.push_back({ plan.inputs[t], &v.in[t] });
        v.out = { contract(node, terms, plan.output, plan, ctx) };
    }

    // d operand t = einsum(dOut, the other operand -> operand t's letters).
    void einsumBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto plan = planOf(node, v.in);
        const auto dy =
            g.gradOut[0].defined() ? g.gradOut[0] : NdArray::zeros(ctx.allocator, einsumShape(plan.output, plan));
        for (std::size_t t = 0; t < v.in.size(); ++t) {
            if (!g.needGrad[t])
                continue;
            std::vector<Term> terms { { plan.output, &dy } };
            if (v.in.size() == 2)
                terms.push_back({ plan.inputs[1 - t], &v.in[1 - t] });
            g.gradIn[t] = contract(node, terms, plan.inputs[t], plan, ctx);
        }
    }

} // namespace

void registerCudaEinsumKernels(KernelTable& table)
{
    table.add(OpType::Einsum, { einsumForward, einsumBackward });
}

} // namespace ps::engine::cuda
