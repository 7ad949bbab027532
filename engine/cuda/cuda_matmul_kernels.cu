// CUDA kernels of MatMul (a (..., M, K) times b (..., K, N), or (..., N, K) with trans_b; ONNX Gemm's
// bias) through cuBLAS, and MatMul + bias as one cuBLASLt GEMM with the bias epilogue
// (Backend::gemmBias). GEMM operands are fp32, TF32-rounded on the tensor cores, or bf16 copies cast
// per call (gemmOperand). A GEMM over every row of x whose rows of N columns would start off a
// 16-byte boundary (a 50257-token vocabulary's logits: cuBLAS then picks its slow alignment-1
// kernels) reads and writes those rows at an aligned pitch instead (gemm_pitch.h's rule).
#include "cuda/cuda_common.cuh"
#include "gemm_pitch.h"
#include "kernel_math.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <variant>
#include <vector>

namespace ps::engine::cuda {
namespace {

    // ---- MatMul (a (..., M, K), b (..., K, N) or (..., N, K) with trans_b[, bias (N)]) ----

    struct MatmulShape
    {
        std::int64_t m = 0, k = 0, n = 0;
        bool transB = false;
        Shape batchA, batchB, batchOut; // batchA and batchB left-padded to batchOut's rank
    };

    MatmulShape matmulShape(const Node& node, const Shape& a, const Shape& b)
    {
        if (a.size() < 2 || b.size() < 2)
            throw Error("node '" + node.name + "': the CUDA MatMul takes operands of rank 2 or more, not "
                + formatShape(a) + " x " + formatShape(b));
        MatmulShape s;
        s.transB = node.intAttr("trans_b", 0) != 0;
        s.m = a[a.size() - 2];
        s.k = a.back();
        s.n = s.transB ? b[b.size() - 2] : b.back();
        Shape ba(a.begin(), a.end() - 2);
        Shape bb(b.begin(), b.end() - 2);
        s.batchOut = broadcastShapeOf(ba, bb, node);
        s.batchA = Shape(s.batchOut.size() - ba.size(), 1);
        s.batchA.insert(s.batchA.end(), ba.begin(), ba.end());
        s.batchB = Shape(s.batchOut.size() - bb.size(), 1);
        s.batchB.insert(s.batchB.end(), bb.begin(), bb.end());
        return s;
    }

    // Matrix offsets (in elements) of A and B for each output matrix, by broadcasting.
    std::vector<std::pair<std::int64_t, std::int64_t>> matrixOffsets(const MatmulShape& s)
    {
        const auto count = numElements(s.batchOut);
        std::vector<std::pair<std::int64_t, std::int64_t>> out(static_cast<std::size_t>(count));
        const auto sa = stridesOver(s.batchA, s.batchOut);
        const auto sb = stridesOver(s.batchB, s.batchOut);
        for (std::int64_t i = 0; i < count; ++i) {
            std::int64_t rest = i;
            std::int64_t oa = 0;
            std::int64_t ob = 0;
            for (int d = static_cast<int>(s.batchOut.size()) - 1; d >= 0; --d) {
                const auto coord = rest % s.batchOut[static_cast<std::size_t>(d)];
                rest /= s.batchOut[static_cast<std::size_t>(d)];
                oa += coord * sa.stride[d];
                ob += coord * sb.stride[d];
            }
            out[static_cast<std::size_t>(i)] = { oa * s.m * s.k, ob * s.k * s.n };
        }
        return out;
    }

    int asInt(std::int64_t v)
    {
        if (v > 2147483647)
            throw Error("cuda backend: a GEMM dimension of " + std::to_string(v) + " is above cuBLAS's int range");
        return static_cast<int>(v);
    }

    // ---- bf16 operands: cast once per call into workspace (kernel_math.h's rounding) ----

    __global__ void toBf16Kernel(const float* x, unsigned short* y, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            y[i] = math::floatToBf16Bits(x[i]);
    }

    // ---- Rows at an aligned pitch (gemm_pitch.h) ----

    // PS_GEMM_PITCH=0 keeps every matrix at its own row length (to measure what the pitch gains);
    // read at each call, as PS_CUBLASLT is.
    bool pitchEnabled()
    {
        const char* e = std::getenv("PS_GEMM_PITCH");
        return e == nullptr || std::string(e) != "0";
    }

    template <typename T>
    __global__ void toPitchKernel(const float* x, T* y, long long rows, long long cols, long long pitch)
    {
        PS_FOR_EACH(e, rows * cols)
        {
            const long long r = e / cols;
            if constexpr (sizeof(T) == 2)
                y[r * pitch + e - r * cols] = math::floatToBf16Bits(x[e]);
            else
                y[r * pitch + e - r * cols] = x[e];
        }
    }

    __global__ void fromPitchKernel(const float* wide, float* x, long long rows, long long cols, long long pitch)
    {
        PS_FOR_EACH(e, rows * cols)
        {
            const long long r = e / cols;
            x[e] = wide[r * pitch + e - r * cols];
        }
    }

    // x (rows x cols, fp32) as a GEMM operand whose rows start `pitch` elements apart: fp32, or bf16
    // where the run's GEMMs take bf16 (the cast a gemmOperand would make, at the pitch).
    GemmOperand pitchedOperand(
        const float* x, long long rows, long long cols, long long pitch, KernelContext& ctx, const Node& node)
    {
        GemmOperand o;
        o.elementBytes = ctx.gemm == GemmPrecision::Bf16 ? 2 : 4;
        o.copy = NdArray::empty(ctx.allocator, { rows * pitch * o.elementBytes }, DType::U8);
        const auto n = rows * cols;
        if (n > 0 && o.elementBytes == 2)
            toPitchKernel<<<blocksFor(n), kThreads>>>(
                x, reinterpret_cast<unsigned short*>(u8(o.copy)), rows, cols, pitch);
        else if (n > 0)
            toPitchKernel<<<blocksFor(n), kThreads>>>(x, reinterpret_cast<float*>(u8(o.copy)), rows, cols, pitch);
        checkLaunch(label(node) + ": GEMM operand at an aligned pitch");
        o.base = u8(o.copy);
        return o;
    }

    // The rows x cols matrix held at `pitch` in `wide`, into `out` (row-major, no pitch).
    void unpitch(const float* wide, float* out, long long rows, long long cols, long long pitch, const Node& node)
    {
        if (rows * cols > 0)
            fromPitchKernel<<<blocksFor(rows * cols), kThreads>>>(wide, out, rows, cols, pitch);
        checkLaunch(label(node) + ": GEMM result from an aligned pitch");
    }

    // Rows of the GEMM per pitched chunk: at most 2^26 elements of scratch (256 MB in fp32) at a time,
    // or PS_GEMM_PITCH_ROWS rows (a test runs several chunks on small matrices so).
    std::int64_t chunkRows(std::int64_t pitch)
    {
        if (const char* e = std::getenv("PS_GEMM_PITCH_ROWS"); e != nullptr && std::atoll(e) > 0)
            return std::atoll(e);
        return std::max<std::int64_t>(1, (std::int64_t { 1 } << 26) / pitch);
    }

    // The one GEMM over every row of A, its result rows (and B's without trans_b) at an aligned
    // pitch, in chunks of rows: each chunk's result lands in scratch at the pitch and is copied out.
    void pitchedForward(const Node& node, const MatmulShape& s, const NodeValues& v, NdArray& out, KernelContext& ctx)
    {
        const auto rows = numElements(s.batchOut) * s.m;
        const auto pitch = gemmRowPitch(rows, s.n, true);
        const auto a = gemmOperand(v.in[0], ctx, node);
        const auto b =
            s.transB ? gemmOperand(v.in[1], ctx, node) : pitchedOperand(f32(v.in[1]), s.k, s.n, pitch, ctx, node);
        const auto chunk = std::min<std::int64_t>(rows, chunkRows(pitch));
        auto wide = NdArray::empty(ctx.allocator, { chunk, pitch });
        for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const auto count = std::min<std::int64_t>(chunk, rows - r0);
            gemm(ctx.gemm, false, s.transB, asInt(count), asInt(s.n), asInt(s.k), a.at(r0 * s.k), asInt(s.k), 0,
                b.at(0), asInt(s.transB ? s.k : pitch), 0, 0.0F, f32(wide), asInt(pitch), 0, 1);
            unpitch(f32(wide), f32(out) + r0 * s.n, count, s.n, pitch, node);
        }
    }

    // Its backward, chunk by chunk of dY's rows (each copied or cast to the pitch): dA's rows of
    // the chunk, and dB summed over the chunks (beta 1 after the first).
    void pitchedBackward(
        const Node& node, const MatmulShape& s, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto rows = numElements(s.batchOut) * s.m;
        const auto pitch = gemmRowPitch(rows, s.n, true);
        const auto p = ctx.gemm;
        const auto a = g.needGrad[1] ? gemmOperand(v.in[0], ctx, node) : GemmOperand {};
        const auto b = !g.needGrad[0] ? GemmOperand {}
            : s.transB                ? gemmOperand(v.in[1], ctx, node)
                                      : pitchedOperand(f32(v.in[1]), s.k, s.n, pitch, ctx, node);
        auto da = g.needGrad[0] ? NdArray::empty(ctx.allocator, v.in[0].shape()) : NdArray();
        auto db = g.needGrad[1] ? NdArray::empty(ctx.allocator, v.in[1].shape()) : NdArray();
        auto dbWide = g.needGrad[1] && !s.transB ? NdArray::empty(ctx.allocator, { s.k, pitch }) : db;
        const auto chunk = std::min<std::int64_t>(rows, chunkRows(pitch));
        for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const auto count = std::min<std::int64_t>(chunk, rows - r0);
            const auto dy = pitchedOperand(f32(g.gradOut[0]) + r0 * s.n, count, s.n, pitch, ctx, node);
            if (g.needGrad[0]) // dA = dY B^T (B (K, N)), or dY B (B (N, K))
                gemm(p, false, !s.transB, asInt(count), asInt(s.k), asInt(s.n), dy.at(0), asInt(pitch), 0, b.at(0),
                    asInt(s.transB ? s.k : pitch), 0, 0.0F, f32(da) + r0 * s.k, asInt(s.k), 0, 1);
            const float beta = r0 == 0 ? 0.0F : 1.0F;
            if (g.needGrad[1] && s.transB) // dB = dY^T A (N, K)
                gemm(p, true, false, asInt(s.n), asInt(s.k), asInt(count), dy.at(0), asInt(pitch), 0, a.at(r0 * s.k),
                    asInt(s.k), 0, beta, f32(db), asInt(s.k), 0, 1);
            else if (g.needGrad[1]) // dB = A^T dY (K, N), at the pitch
                gemm(p, true, false, asInt(s.k), asInt(s.n), asInt(count), a.at(r0 * s.k), asInt(s.k), 0, dy.at(0),
                    asInt(pitch), 0, beta, f32(dbWide), asInt(pitch), 0, 1);
        }
        if (g.needGrad[1] && !s.transB)
            unpitch(f32(dbWide), f32(db), s.k, s.n, pitch, node);
        if (g.needGrad[0])
            g.gradIn[0] = da;
        if (g.needGrad[1])
            g.gradIn[1] = db;
    }

    void matmulForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto s = matmulShape(node, v.in[0].shape(), v.in[1].shape());
        auto outShape = s.batchOut;
        outShape.push_back(s.m);
        outShape.push_back(s.n);
        auto out = NdArray::empty(ctx.allocator, outShape);
        const auto rows = numElements(s.batchOut) * s.m;
        if (numElements(s.batchB) == 1 && gemmRowPitch(rows, s.n, pitchEnabled()) != s.n) {
            pitchedForward(node, s, v, out, ctx);
            if (v.in.size() == 3) // Gemm's bias over the last dim
                out = addArrays(out, v.in[2], node, ctx);
            v.out = { out };
            return;
        }
        const auto a = gemmOperand(v.in[0], ctx, node);
        const auto b = gemmOperand(v.in[1], ctx, node);
        const auto p = ctx.gemm;
        const int ldb = asInt(s.transB ? s.k : s.n);
        const auto batches = numElements(s.batchOut);
        if (numElements(s.batchB) == 1) { // one GEMM over every row of A
            gemm(p, false, s.transB, asInt(batches * s.m), asInt(s.n), asInt(s.k), a.at(0), asInt(s.k), 0, b.at(0), ldb,
                0, 0.0F, f32(out), asInt(s.n), 0, 1);
        } else if (s.batchA == s.batchB) { // attention: equal batches, one strided-batched call
            gemm(p, false, s.transB, asInt(s.m), asInt(s.n), asInt(s.k), a.at(0), asInt(s.k), s.m * s.k, b.at(0), ldb,
                s.k * s.n, 0.0F, f32(out), asInt(s.n), s.m * s.n, asInt(batches));
        } else {
            const auto offsets = matrixOffsets(s);
            for (std::size_t i = 0; i < offsets.size(); ++i)
                gemm(p, false, s.transB, asInt(s.m), asInt(s.n), asInt(s.k), a.at(offsets[i].first), asInt(s.k), 0,
                    b.at(offsets[i].second), ldb, 0, 0.0F, f32(out) + static_cast<std::int64_t>(i) * s.m * s.n,
                    asInt(s.n), 0, 1);
        }
        if (v.in.size() == 3) // Gemm's bias over the last dim
            out = addArrays(out, v.in[2], node, ctx);
        v.out = { out };
    }

    void matmulBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        const auto& dyArray = g.gradOut[0];
        const auto s = matmulShape(node, v.in[0].shape(), v.in[1].shape());
        const auto p = ctx.gemm;
        const auto batches = numElements(s.batchOut);
        if (numElements(s.batchB) == 1 && gemmRowPitch(batches * s.m, s.n, pitchEnabled()) != s.n) {
            pitchedBackward(node, s, v, g, ctx);
            if (v.in.size() == 3 && g.needGrad[2])
                g.gradIn[2] = reduceTo(dyArray, v.in[2].shape(), ctx.allocator);
            return;
        }
        const int ldb = asInt(s.transB ? s.k : s.n);
        const bool flat = numElements(s.batchB) == 1;
        const bool equal = s.batchA == s.batchB;
        const auto offsets = flat || equal ? std::vector<std::pair<std::int64_t, std::int64_t>>() : matrixOffsets(s);
        const auto dy = gemmOperand(dyArray, ctx, node);
        if (g.needGrad[0]) { // dA = dY B^T (B (K, N)), or dY B (B (N, K))
            const auto b = gemmOperand(v.in[1], ctx, node);
            auto da = NdArray::zeros(ctx.allocator, v.in[0].shape());
            if (flat)
                gemm(p, false, !s.transB, asInt(batches * s.m), asInt(s.k), asInt(s.n), dy.at(0), asInt(s.n), 0,
                    b.at(0), ldb, 0, 0.0F, f32(da), asInt(s.k), 0, 1);
            else if (equal)
                gemm(p, false, !s.transB, asInt(s.m), asInt(s.k), asInt(s.n), dy.at(0), asInt(s.n), s.m * s.n, b.at(0),
                    ldb, s.k * s.n, 0.0F, f32(da), asInt(s.k), s.m * s.k, asInt(batches));
            else
                for (std::size_t i = 0; i < offsets.size(); ++i) // A broadcast: sums over its repeats
                    gemm(p, false, !s.transB, asInt(s.m), asInt(s.k), asInt(s.n),
                        dy.at(static_cast<std::int64_t>(i) * s.m * s.n), asInt(s.n), 0, b.at(offsets[i].second), ldb, 0,
                        1.0F, f32(da) + offsets[i].first, asInt(s.k), 0, 1);
            g.gradIn[0] = da;
        }
        if (g.needGrad[1]) { // dB = A^T dY (K, N), or dY^T A (N, K) with trans_b
            const auto a = gemmOperand(v.in[0], ctx, node);
            auto db = NdArray::zeros(ctx.allocator, v.in[1].shape());
            const auto one = [&](std::int64_t ai, std::int64_t dyi, float* dbi, int rows, long long sa, long long sdy,
                                 long long sdb, int count, float beta) {
                if (s.transB)
                    gemm(p, true, false, asInt(s.n), asInt(s.k), rows, dy.at(dyi), asInt(s.n), sdy, a.at(ai),
                        asInt(s.k), sa, beta, dbi, asInt(s.k), sdb, count);
                else
                    gemm(p, true, false, asInt(s.k), asInt(s.n), rows, a.at(ai), asInt(s.k), sa, dy.at(dyi), asInt(s.n),
                        sdy, beta, dbi, asInt(s.n), sdb, count);
            };
            if (flat)
                one(0, 0, f32(db), asInt(batches * s.m), 0, 0, 0, 1, 0.0F);
            else if (equal)
                one(0, 0, f32(db), asInt(s.m), s.m * s.k, s.m * s.n, s.k * s.n, asInt(batches), 0.0F);
            else
                for (std::size_t i = 0; i < offsets.size(); ++i) // B broadcast: sums over its repeats
                    one(offsets[i].first, static_cast<std::int64_t>(i) * s.m * s.n, f32(db) + offsets[i].second,
                        asInt(s.m), 0, 0, 0, 1, 1.0F);
            g.gradIn[1] = db;
        }
        if (v.in.size() == 3 && g.needGrad[2])
            g.gradIn[2] = reduceTo(dyArray, v.in[2].shape(), ctx.allocator);
    }

    // MatMul + bias (Backend::gemmBias): one cuBLASLt GEMM with the bias epilogue where the product
    // is one GEMM over every row of x (w a single matrix), else MatMul's GEMMs and the add.
    NdArray gemmBiasForward(
        const Node& matmul, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx)
    {
        useDevice(ctx.allocator);
        for (const auto* a : { &x, &w, &bias })
            requireF32(matmul, *a);
        const auto s = matmulShape(matmul, x.shape(), w.shape());
        if (bias.shape() != Shape { s.n })
            throw Error(label(matmul) + ": a bias of " + formatShape(bias.shape()) + " does not add over its "
                + std::to_string(s.n) + " columns");
        if (numElements(s.batchB) == 1 && cublasLtEnabled()) {
            auto outShape = s.batchOut;
            outShape.push_back(s.m);
            outShape.push_back(s.n);
            auto out = NdArray::empty(ctx.allocator, outShape);
            const auto a = gemmOperand(x, ctx, matmul);
            const auto b = gemmOperand(w, ctx, matmul);
            if (gemmBiasLt(
                    ctx.gemm, s.transB, numElements(s.batchOut) * s.m, s.n, s.k, a.at(0), b.at(0), f32(bias), f32(out)))
                return out;
        }
        NodeValues v;
        v.in = { x, w };
        matmulForward(matmul, v, ctx);
        return addArrays(v.out[0], bias, matmul, ctx);
    }

    bool tanhGeluNode(const Node& node)
    {
        const auto it = node.attrs.find("approximate");
        return it != node.attrs.end() && std::holds_alternative<std::string>(it->second)
            && std::get<std::string>(it->second) == "tanh";
    }

    // MatMul + bias + a tanh Gelu (Backend::gemmBiasGelu): one cuBLASLt GEMM whose GELU_AUX_BIAS
    // epilogue writes the sum to `sum` and its GELU to `activated`, where w is one matrix and the
    // output's width a multiple of 8; false otherwise (the caller runs the GEMM + bias, then Gelu).
    bool gemmBiasGeluForward(const Node& matmul, const Node& gelu, const NdArray& x, const NdArray& w,
        const NdArray& bias, KernelContext& ctx, NdArray& sum, NdArray& activated)
    {
        useDevice(ctx.allocator);
        if (!tanhGeluNode(gelu) || !cublasLtEnabled())
            return false;
        for (const auto* a : { &x, &w, &bias })
            requireF32(matmul, *a);
        const auto s = matmulShape(matmul, x.shape(), w.shape());
        if (bias.shape() != Shape { s.n } || numElements(s.batchB) != 1 || s.n % 8 != 0)
            return false;
        auto outShape = s.batchOut;
        outShape.push_back(s.m);
        outShape.push_back(s.n);
        auto pre = NdArray::empty(ctx.allocator, outShape);
        auto out = NdArray::empty(ctx.allocator, outShape);
        const auto a = gemmOperand(x, ctx, matmul);
        const auto b = gemmOperand(w, ctx, matmul);
        if (!gemmBiasLt(ctx.gemm, s.transB, numElements(s.batchOut) * s.m, s.n, s.k, a.at(0), b.at(0), f32(bias),
                f32(out), f32(pre)))
            return false;
        sum = std::move(pre);
        activated = std::move(out);
        return true;
    }

} // namespace

GemmOperand gemmOperand(const NdArray& x, KernelContext& ctx, const Node& node)
{
    GemmOperand o;
    if (ctx.gemm != GemmPrecision::Bf16) {
        o.base = f32(x);
        return o;
    }
    const auto n = x.numel();
    o.copy = NdArray::empty(ctx.allocator, { 2 * n }, DType::U8);
    if (n > 0)
        toBf16Kernel<<<blocksFor(n), kThreads>>>(f32(x), reinterpret_cast<unsigned short*>(u8(o.copy)), n);
    checkLaunch("node '" + node.name + "' (bf16 operand)");
    o.base = u8(o.copy);
    o.elementBytes = 2;
    return o;
}

void registerCudaMatmulKernels(KernelTable& table)
{
    table.setGemmBias(gemmBiasForward);
    table.setGemmBiasGelu(gemmBiasGeluForward);
    table.add(OpType::MatMul, { matmulForward, matmulBackward });
}

} // namespace ps::engine::cuda
