// MatMul (OpenBLAS sgemm, batched and broadcast), broadcasting binary ops, activations, ReduceMean.
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"
#include "cpu/vector_loops.h"
#include "kernel_math.h"
#include "op_rules.h"

#include <array>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <vector>

namespace ps::engine::detail {
namespace {

    // ---- MatMul: a (..., M, K) x b (..., K, N) (or b (..., N, K) with trans_b) [+ bias (N)] ----

    struct MatMulDims
    {
        std::int64_t m, k, n;
        bool transB;
        Shape batch; // broadcast batch dims of the output
        Shape batchA, batchB;
    };

    MatMulDims matmulDims(const Node& node, const Shape& a, const Shape& b, const Shape& out)
    {
        MatMulDims d {};
        d.transB = node.intAttr("trans_b", 0) != 0;
        d.m = a[a.size() - 2];
        d.k = a.back();
        d.n = out.back();
        d.batch.assign(out.begin(), out.end() - 2);
        d.batchA.assign(a.begin(), a.end() - 2);
        d.batchB.assign(b.begin(), b.end() - 2);
        return d;
    }

    // Which matrices a batched GEMM loop writes: the output's (one per batch index, always
    // distinct), or A's or B's gradient (distinct only when that operand is not broadcast).
    enum class Writes : std::uint8_t { Output, GradA, GradB };

    // Calls fn(batch index, offset of A's matrix, offset of B's matrix) for every output matrix.
    // Where every call writes its own matrix and there are enough of them (attention's heads times
    // the batch), whole matrices are shared across the device's GEMM team, each a single-threaded
    // GEMM, instead of every small GEMM being split across the team and waking it (the same
    // values: a matrix's rows are computed alike either way).
    template <typename Fn> void forEachMatrix(const MatMulDims& d, Writes writes, Fn&& fn)
    {
        const auto aSize = d.m * d.k;
        const auto bSize = d.k * d.n;
        const auto count = numElements(d.batch);
        const bool distinct = writes == Writes::Output || (writes == Writes::GradA && numElements(d.batchA) == count)
            || (writes == Writes::GradB && numElements(d.batchB) == count);
        if (!distinct || count < 4) {
            forEachBroadcast(d.batch, d.batchA, d.batchB,
                [&](std::int64_t i, std::int64_t ia, std::int64_t ib) { fn(i, ia * aSize, ib * bSize); });
            return;
        }
        std::vector<std::array<std::int64_t, 3>> matrices;
        matrices.reserve(static_cast<std::size_t>(count));
        forEachBroadcast(d.batch, d.batchA, d.batchB, [&](std::int64_t i, std::int64_t ia, std::int64_t ib) {
            matrices.push_back({ i, ia * aSize, ib * bSize });
        });
        shareAcrossTeam(static_cast<std::int64_t>(matrices.size()), 2, [&](std::int64_t first, std::int64_t last) {
            for (auto j = first; j < last; ++j) {
                const auto& [i, oa, ob] = matrices[static_cast<std::size_t>(j)];
                fn(i, oa, ob);
            }
        });
    }

    void matmulForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        auto outShape = a.shape();
        outShape.back() = node.intAttr("trans_b", 0) != 0 ? b.shape()[b.shape().size() - 2] : b.shape().back();
        {
            Shape batchA(a.shape().begin(), a.shape().end() - 2);
            Shape batchB(b.shape().begin(), b.shape().end() - 2);
            const auto rank = std::max(batchA.size(), batchB.size());
            Shape batch(rank, 1);
            for (std::size_t i = 0; i < rank; ++i) {
                const auto da = i < rank - batchA.size() ? 1 : batchA[i - (rank - batchA.size())];
                const auto db = i < rank - batchB.size() ? 1 : batchB[i - (rank - batchB.size())];
                batch[i] = std::max(da, db);
            }
            batch.push_back(a.shape()[a.shape().size() - 2]);
            batch.push_back(outShape.back());
            outShape = batch;
        }
        auto out = NdArray::empty(ctx.allocator, outShape);
        const auto d = matmulDims(node, a.shape(), b.shape(), outShape);
        const auto trans = d.transB ? CblasTrans : CblasNoTrans;
        const auto ldb = d.transB ? d.k : d.n;
        if (d.batchB.empty() || numElements(d.batchB) == 1) {
            // One GEMM over all rows of A: (rows, K) x (K, N).
            const auto rows = numElements(outShape) / d.n;
            if (numElements(d.batchA) * d.m == rows) {
                sgemm(false, trans == CblasTrans, static_cast<int>(rows), static_cast<int>(d.n), static_cast<int>(d.k),
                    1.0F, a.f32(), static_cast<int>(d.k), b.f32(), static_cast<int>(ldb), 0.0F, out.f32(),
                    static_cast<int>(d.n));
            } else { // A broadcast against a batched B of size 1: still one matrix per output batch
                forEachMatrix(d, Writes::Output, [&](std::int64_t i, std::int64_t oa, std::int64_t ob) {
                    sgemm(false, trans == CblasTrans, static_cast<int>(d.m), static_cast<int>(d.n),
                        static_cast<int>(d.k), 1.0F, a.f32() + oa, static_cast<int>(d.k), b.f32() + ob,
                        static_cast<int>(ldb), 0.0F, out.f32() + i * d.m * d.n, static_cast<int>(d.n));
                });
            }
        } else {
            forEachMatrix(d, Writes::Output, [&](std::int64_t i, std::int64_t oa, std::int64_t ob) {
                sgemm(false, trans == CblasTrans, static_cast<int>(d.m), static_cast<int>(d.n), static_cast<int>(d.k),
                    1.0F, a.f32() + oa, static_cast<int>(d.k), b.f32() + ob, static_cast<int>(ldb), 0.0F,
                    out.f32() + i * d.m * d.n, static_cast<int>(d.n));
            });
        }
        if (v.in.size() == 3) { // Gemm's bias over the last dim
            const float* bias = v.in[2].f32();
            float* o = out.f32();
            const auto rows = out.numel() / d.n;
            for (std::int64_t r = 0; r < rows; ++r) {
                for (std::int64_t j = 0; j < d.n; ++j)
                    o[r * d.n + j] += bias[j];
            }
        }
        v.out = { out };
    }

    void matmulBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& a = v.in[0];
        const auto& b = v.in[1];
        const auto& dy = g.gradOut[0];
        const auto d = matmulDims(node, a.shape(), b.shape(), dy.shape());
        const bool flat = d.batchB.empty() && numElements(d.batchA) * d.m == dy.numel() / d.n;
        if (g.needGrad[0]) {
            auto da = NdArray::zeros(ctx.allocator, a.shape());
            // dA = dY B^T (B (K, N)) or dY B (B (N, K)).
            const auto transB = d.transB ? CblasNoTrans : CblasTrans;
            const auto ldb = d.transB ? d.k : d.n;
            if (flat) {
                const auto rows = dy.numel() / d.n;
                sgemm(false, transB == CblasTrans, static_cast<int>(rows), static_cast<int>(d.k), static_cast<int>(d.n),
                    1.0F, dy.f32(), static_cast<int>(d.n), b.f32(), static_cast<int>(ldb), 0.0F, da.f32(),
                    static_cast<int>(d.k));
            } else {
                forEachMatrix(d, Writes::GradA, [&](std::int64_t i, std::int64_t oa, std::int64_t ob) {
                    sgemm(false, transB == CblasTrans, static_cast<int>(d.m), static_cast<int>(d.k),
                        static_cast<int>(d.n), 1.0F, dy.f32() + i * d.m * d.n, static_cast<int>(d.n), b.f32() + ob,
                        static_cast<int>(ldb), 1.0F, da.f32() + oa, static_cast<int>(d.k));
                });
            }
            g.gradIn[0] = da;
        }
        if (g.needGrad[1]) {
            auto db = NdArray::zeros(ctx.allocator, b.shape());
            // dB = A^T dY (K, N), or dY^T A (N, K) with trans_b.
            if (flat) {
                const auto rows = dy.numel() / d.n;
                if (d.transB)
                    sgemm(true, false, static_cast<int>(d.n), static_cast<int>(d.k), static_cast<int>(rows), 1.0F,
                        dy.f32(), static_cast<int>(d.n), a.f32(), static_cast<int>(d.k), 0.0F, db.f32(),
                        static_cast<int>(d.k));
                else
                    sgemm(true, false, static_cast<int>(d.k), static_cast<int>(d.n), static_cast<int>(rows), 1.0F,
                        a.f32(), static_cast<int>(d.k), dy.f32(), static_cast<int>(d.n), 0.0F, db.f32(),
                        static_cast<int>(d.n));
            } else {
                forEachMatrix(d, Writes::GradB, [&](std::int64_t i, std::int64_t oa, std::int64_t ob) {
                    const float* dyi = dy.f32() + i * d.m * d.n;
                    if (d.transB)
                        sgemm(true, false, static_cast<int>(d.n), static_cast<int>(d.k), static_cast<int>(d.m), 1.0F,
                            dyi, static_cast<int>(d.n), a.f32() + oa, static_cast<int>(d.k), 1.0F, db.f32() + ob,
                            static_cast<int>(d.k));
                    else
                        sgemm(true, false, static_cast<int>(d.k), static_cast<int>(d.n), static_cast<int>(d.m), 1.0F,
                            a.f32() + oa, static_cast<int>(d.k), dyi, static_cast<int>(d.n), 1.0F, db.f32() + ob,
                            static_cast<int>(d.n));
                });
            }
            g.gradIn[1] = db;
        }
        if (v.in.size() == 3 && g.needGrad[2])
            g.gradIn[2] = reduceToShape(dy, v.in[2].shape(), ctx.allocator);
    }

    // ---- Broadcasting binary ops ----

    Shape broadcast(const Shape& a, const Shape& b)
    {
        const auto rank = std::max(a.size(), b.size());
        Shape out(rank, 1);
        for (std::size_t i = 0; i < rank; ++i) {
            const auto da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
            const auto db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
            out[i] = da == 1 ? db : da;
        }
        return out;
    }

    bool isSuffixOf(const Shape& b, const Shape& out)
    {
        return b.size() <= out.size()
            && std::equal(b.begin(), b.end(), out.end() - static_cast<std::ptrdiff_t>(b.size()));
    }

    // f(i, i mod period) for i in [0, n), without a division per element: by rows of `period` (the
    // broadcast operand's elements), or by plain ranges when nothing repeats; shared across the
    // device's GEMM team when large (element-wise: the same results however it is split).

    template <typename F> void rowBroadcast(std::int64_t n, std::int64_t period, F f)
    {
        if (period >= n) {
            shareAcrossTeam(n, kMinTeamShare, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t i = b; i < e; ++i)
                    f(i, i);
            });
            return;
        }
        const auto rows = n / period;
        shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinTeamShare / period), [&](std::int64_t r0, std::int64_t r1) {
            for (std::int64_t r = r0; r < r1; ++r) {
                const auto base = r * period;
                for (std::int64_t j = 0; j < period; ++j)
                    f(base + j, j);
            }
        });
    }

    template <typename Op> NdArray binary(const NdArray& a, const NdArray& b, KernelContext& ctx, Op op)
    {
        const auto shape = broadcast(a.shape(), b.shape());
        auto out = NdArray::empty(ctx.allocator, shape);
        float* o = out.f32();
        const float* x = a.f32();
        const float* y = b.f32();
        const auto n = out.numel();
        if (a.shape() == shape && isSuffixOf(b.shape(), shape)) { // same shape, or a bias / row broadcast
            rowBroadcast(n, b.numel(), [&](std::int64_t i, std::int64_t j) { o[i] = op(x[i], y[j]); });
        } else if (b.shape() == shape && isSuffixOf(a.shape(), shape)) {
            rowBroadcast(n, a.numel(), [&](std::int64_t i, std::int64_t j) { o[i] = op(x[j], y[i]); });
        } else {
            forEachBroadcast(shape, a.shape(), b.shape(),
                [&](std::int64_t i, std::int64_t ia, std::int64_t ib) { o[i] = op(x[ia], y[ib]); });
        }
        return out;
    }

    // Integer operands (position ids computed from a padding mask: cumsum(mask) * mask + pad): the
    // op on i64 values, as ONNX defines Add/Sub/Mul/Div for integer types (Div truncates).
    template <typename Op> NdArray integerBinary(const NdArray& a, const NdArray& b, KernelContext& ctx, Op op)
    {
        const auto shape = broadcast(a.shape(), b.shape());
        auto out = NdArray::empty(ctx.allocator, shape, DType::I64);
        std::int64_t* o = out.i64();
        const std::int64_t* x = a.i64();
        const std::int64_t* y = b.i64();
        forEachBroadcast(shape, a.shape(), b.shape(),
            [&](std::int64_t i, std::int64_t ia, std::int64_t ib) { o[i] = op(x[ia], y[ib]); });
        return out;
    }

    bool integerOperands(const Node& node, const NodeValues& v)
    {
        const bool a = v.in[0].dtype() == DType::I64;
        if (a != (v.in[1].dtype() == DType::I64))
            throw Error(nodeLabel(node) + "mixes integer and float operands");
        return a;
    }

    // d(out)/d(a) and d(out)/d(b) elementwise, then summed back to each operand's shape.
    template <typename Da, typename Db>
    void binaryBackward(const NodeValues& v, BackwardArgs& g, KernelContext& ctx, Da da, Db db)
    {
        const auto& dy = g.gradOut[0];
        const float* x = v.in[0].f32();
        const float* y = v.in[1].f32();
        const float* gy = dy.f32();
        for (int side = 0; side < 2; ++side) {
            if (!g.needGrad[static_cast<std::size_t>(side)])
                continue;
            auto full = NdArray::empty(ctx.allocator, dy.shape());
            float* o = full.f32();
            forEachBroadcast(
                dy.shape(), v.in[0].shape(), v.in[1].shape(), [&](std::int64_t i, std::int64_t ia, std::int64_t ib) {
                    o[i] = gy[i] * (side == 0 ? da(x[ia], y[ib]) : db(x[ia], y[ib]));
                });
            g.gradIn[static_cast<std::size_t>(side)] =
                reduceToShape(full, v.in[static_cast<std::size_t>(side)].shape(), ctx.allocator);
        }
    }

    // ---- Unary ops ----

    template <typename Op> NdArray unary(const NdArray& a, KernelContext& ctx, Op op)
    {
        auto out = NdArray::empty(ctx.allocator, a.shape());
        float* o = out.f32();
        const float* x = a.f32();
        shareAcrossTeam(a.numel(), kMinTeamShare, [&](std::int64_t first, std::int64_t last) {
            for (auto i = first; i < last; ++i)
                o[i] = op(x[i]);
        });
        return out;
    }

    // dx = dy * f'(k) with k the one value the backward keeps (the forward input or output, as
    // op_cost's saved tensors say: the runtime releases everything else after forward).
    template <typename Op> NdArray unaryGrad(const NdArray& dy, const NdArray& kept, KernelContext& ctx, Op op)
    {
        auto out = NdArray::empty(ctx.allocator, dy.shape());
        float* o = out.f32();
        const float* gx = dy.f32();
        const float* ks = kept.f32();
        shareAcrossTeam(dy.numel(), kMinTeamShare, [&](std::int64_t first, std::int64_t last) {
            for (auto i = first; i < last; ++i)
                o[i] = gx[i] * op(ks[i]);
        });
        return out;
    }

    bool tanhGelu(const Node& node)
    {
        const auto it = node.attrs.find("approximate");
        return it != node.attrs.end() && std::holds_alternative<std::string>(it->second)
            && std::get<std::string>(it->second) == "tanh";
    }

    // ---- Forward and backward of each op ----

    void addForward(const Node& node, NodeValues& v, KernelContext& ctx) // Add and BiasAdd
    {
        const auto op = [](auto a, auto b) { return a + b; };
        v.out = { integerOperands(node, v) ? integerBinary(v.in[0], v.in[1], ctx, op)
                                           : binary(v.in[0], v.in[1], ctx, op) };
    }

    void subForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto op = [](auto a, auto b) { return a - b; };
        v.out = { integerOperands(node, v) ? integerBinary(v.in[0], v.in[1], ctx, op)
                                           : binary(v.in[0], v.in[1], ctx, op) };
    }

    void mulForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto op = [](auto a, auto b) { return a * b; };
        v.out = { integerOperands(node, v) ? integerBinary(v.in[0], v.in[1], ctx, op)
                                           : binary(v.in[0], v.in[1], ctx, op) };
    }

    void divForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        if (integerOperands(node, v)) {
            v.out = { integerBinary(v.in[0], v.in[1], ctx, [&node](std::int64_t a, std::int64_t b) {
                if (b == 0)
                    throw Error(nodeLabel(node) + "integer division by zero");
                if (b == -1) // INT64_MIN / -1 overflows; wrap as two's complement does
                    return static_cast<std::int64_t>(0 - static_cast<std::uint64_t>(a));
                return a / b;
            }) };
            return;
        }
        v.out = { binary(v.in[0], v.in[1], ctx, [](float a, float b) { return a / b; }) };
    }

    // Add, BiasAdd and Sub: the output gradient summed back to each operand (negated for Sub's b).
    void sumBackward(const NodeValues& v, BackwardArgs& g, KernelContext& ctx, bool negateSecond)
    {
        const auto& dy = g.gradOut[0];
        for (std::size_t i = 0; i < 2; ++i) {
            if (!g.needGrad[i])
                continue;
            auto r = reduceToShape(dy, v.in[i].shape(), ctx.allocator);
            if (negateSecond && i == 1) {
                r = r.clone();
                for (std::int64_t j = 0; j < r.numel(); ++j)
                    r.f32()[j] = -r.f32()[j];
            }
            g.gradIn[i] = r;
        }
    }

    void addBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        sumBackward(v, g, ctx, false);
    }

    void subBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        sumBackward(v, g, ctx, true);
    }

    void mulBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        binaryBackward(
            v, g, ctx, [](float, float b) { return b; }, [](float a, float) { return a; });
    }

    void divBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        binaryBackward(
            v, g, ctx, [](float, float b) { return 1.0F / b; }, [](float a, float b) { return -a / (b * b); });
    }

    void scaleForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto s = static_cast<float>(node.floatAttr("scale", 1.0));
        v.out = { unary(v.in[0], ctx, [s](float a) { return a * s; }) };
    }

    void scaleBackward(const Node& node, const NodeValues&, BackwardArgs& g, KernelContext& ctx)
    {
        const auto s = static_cast<float>(node.floatAttr("scale", 1.0));
        g.gradIn[0] = unaryGrad(g.gradOut[0], g.gradOut[0], ctx, [s](float) { return s; });
    }

    void powForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto e = static_cast<float>(node.floatAttr("exponent", 1.0));
        v.out = { unary(v.in[0], ctx, [e](float a) { return math::power(a, e); }) };
    }

    void powBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto e = static_cast<float>(node.floatAttr("exponent", 1.0));
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.in[0], ctx, [e](float a) { return math::powerGrad(a, e); });
    }

    void sqrtForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return std::sqrt(a); }) };
    }

    void sqrtBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.out[0], ctx, [](float y) { return 0.5F / y; });
    }

    void reciprocalForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return 1.0F / a; }) };
    }

    void reciprocalBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.out[0], ctx, [](float y) { return -y * y; });
    }

    void sinForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return std::sin(a); }) };
    }

    void sinBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.in[0], ctx, math::sinGrad);
    }

    void cosForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return std::cos(a); }) };
    }

    void cosBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.in[0], ctx, math::cosGrad);
    }

    void erfForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return std::erf(a); }) };
    }

    void erfBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.in[0], ctx, math::erfGrad);
    }

    void reluForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return a > 0 ? a : 0.0F; }) };
    }

    void reluBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.out[0], ctx, [](float y) { return y > 0 ? 1.0F : 0.0F; });
    }

    void tanhForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        v.out = { unary(v.in[0], ctx, [](float a) { return std::tanh(a); }) };
    }

    void tanhBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        g.gradIn[0] = unaryGrad(g.gradOut[0], v.out[0], ctx, [](float y) { return 1.0F - y * y; });
    }

    // The per-element math is engine/kernel_math.h's, which the CUDA kernels share.
    void geluForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        auto out = NdArray::empty(ctx.allocator, x.shape());
        if (tanhGelu(node))
            cpu::geluTanhForward(x.f32(), out.f32(), x.numel());
        else
            cpu::geluErfForward(x.f32(), out.f32(), x.numel());
        v.out = { std::move(out) };
    }

    void geluBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& dy = g.gradOut[0];
        const auto& x = v.in[0];
        auto dx = NdArray::empty(ctx.allocator, dy.shape());
        if (tanhGelu(node))
            cpu::geluTanhBackward(dy.f32(), x.f32(), dx.f32(), dy.numel());
        else
            cpu::geluErfBackward(dy.f32(), x.f32(), dx.f32(), dy.numel());
        g.gradIn[0] = std::move(dx);
    }

    void reduceMeanForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto shapes = reduceMeanShapes(node, x.shape());
        auto sum = reduceToShape(x, shapes.kept, ctx.allocator);
        if (sum.f32() == x.f32())
            sum = sum.clone();
        const float scale = static_cast<float>(numElements(shapes.kept)) / static_cast<float>(x.numel());
        for (std::int64_t i = 0; i < sum.numel(); ++i)
            sum.f32()[i] *= scale;
        v.out = { sum.view(shapes.out) };
    }

    void reduceMeanBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto kept = reduceMeanShapes(node, x.shape()).kept;
        const auto keptGrad = g.gradOut[0].view(kept);
        auto out = NdArray::empty(ctx.allocator, x.shape());
        const float scale = static_cast<float>(numElements(kept)) / static_cast<float>(x.numel());
        const float* gy = keptGrad.f32();
        float* o = out.f32();
        forEachBroadcast(
            x.shape(), kept, kept, [&](std::int64_t i, std::int64_t ik, std::int64_t) { o[i] = gy[ik] * scale; });
        g.gradIn[0] = out;
    }

    // MatMul then its bias added in place over the product (Backend::gemmBias): the add's bits,
    // without a second array of the product's size.
    NdArray gemmBiasForward(
        const Node& matmul, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx)
    {
        NodeValues v;
        v.in = { x, w };
        matmulForward(matmul, v, ctx);
        auto& out = v.out[0];
        if (bias.shape() != Shape { out.shape().back() } || bias.dtype() != DType::F32)
            throw Error("node '" + matmul.name + "': a bias of " + formatShape(bias.shape()) + " does not add over "
                + formatShape(out.shape()));
        float* o = out.f32();
        const float* b = bias.f32();
        rowBroadcast(out.numel(), bias.numel(), [&](std::int64_t i, std::int64_t j) { o[i] = o[i] + b[j]; });
        return out;
    }

} // namespace

void registerMathKernels(KernelTable& table)
{
    table.setGemmBias(gemmBiasForward);
    table.add(OpType::MatMul, { matmulForward, matmulBackward });
    table.add(OpType::Add, { addForward, addBackward });
    table.add(OpType::BiasAdd, { addForward, addBackward });
    table.add(OpType::Sub, { subForward, subBackward });
    table.add(OpType::Mul, { mulForward, mulBackward });
    table.add(OpType::Div, { divForward, divBackward });
    table.add(OpType::Scale, { scaleForward, scaleBackward });
    table.add(OpType::Pow, { powForward, powBackward });
    table.add(OpType::Sqrt, { sqrtForward, sqrtBackward });
    table.add(OpType::Reciprocal, { reciprocalForward, reciprocalBackward });
    table.add(OpType::Erf, { erfForward, erfBackward });
    table.add(OpType::Sin, { sinForward, sinBackward });
    table.add(OpType::Cos, { cosForward, cosBackward });
    table.add(OpType::Relu, { reluForward, reluBackward });
    table.add(OpType::Tanh, { tanhForward, tanhBackward });
    table.add(OpType::Gelu, { geluForward, geluBackward });
    table.add(OpType::ReduceMean, { reduceMeanForward, reduceMeanBackward });
}

} // namespace ps::engine::detail
