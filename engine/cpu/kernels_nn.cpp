// Embedding, normalizations (LayerNorm, RMSNorm, GroupNorm), softmax with masks, dropout and the cross-entropy loss.
#include "attention_kernel.h"
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"
#include "cpu/vector_loops.h"
#include "group_norm_math.h"
#include "kernel_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ps::engine::detail {
namespace {

    std::int64_t lastDim(const NdArray& a)
    {
        return a.shape().empty() ? 1 : a.shape().back();
    }

    // ---- LayerNorm (gamma, beta) and RMSNorm (gamma) over the last dim; saves mean and rstd ----

    void normForward(const Node& node, NodeValues& v, KernelContext& ctx, bool rms)
    {
        const auto& x = v.in[0];
        const auto c = lastDim(x);
        const auto rows = x.numel() / c;
        auto out = NdArray::empty(ctx.allocator, x.shape());
        auto mean = NdArray::empty(ctx.allocator, { rows });
        auto rstd = NdArray::empty(ctx.allocator, { rows });
        const float* beta = !rms && v.in.size() > 2 ? v.in[2].f32() : nullptr;
        cpu::normRowsForward(x.f32(), v.in[1].f32(), beta, out.f32(), mean.f32(), rstd.f32(), rows, c,
            static_cast<float>(node.floatAttr("epsilon", 1e-5)), rms);
        v.out = { out };
        v.saved = { mean, rstd };
    }

    void normBackward(const NodeValues& v, BackwardArgs& g, KernelContext& ctx, bool rms)
    {
        const auto& x = v.in[0];
        const auto c = lastDim(x);
        const auto rows = x.numel() / c;
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        auto dgamma = NdArray::empty(ctx.allocator, v.in[1].shape());
        NdArray dbeta = !rms && v.in.size() > 2 ? NdArray::empty(ctx.allocator, v.in[2].shape()) : NdArray();
        auto scratch = NdArray::empty(ctx.allocator, { cpu::normBackwardScratch(rows, c) });
        cpu::normRowsBackward(x.f32(), g.gradOut[0].f32(), v.in[1].f32(), v.saved[0].f32(), v.saved[1].f32(), dx.f32(),
            dgamma.f32(), dbeta.defined() ? dbeta.f32() : nullptr, scratch.f32(), rows, c, rms);
        if (g.needGrad[0])
            g.gradIn[0] = dx;
        if (g.needGrad[1])
            g.gradIn[1] = dgamma;
        if (dbeta.defined() && g.needGrad[2])
            g.gradIn[2] = dbeta;
    }

    // ---- GroupNorm (x (N, C, ...)[, gamma (C)[, beta (C)]]); saves mean and rstd per (n, group) ----
    // engine/group_norm_math.h's layout; the CPU sums in double, the rows shared across the team.

    const float* optionalInput(const NodeValues& v, std::size_t i)
    {
        return v.in.size() > i ? v.in[i].f32() : nullptr;
    }

    void groupNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto l = math::groupNormLayout(x.shape(), node.intAttr("groups", 1));
        auto out = NdArray::empty(ctx.allocator, x.shape());
        auto mean = NdArray::empty(ctx.allocator, { l.rows() });
        auto rstd = NdArray::empty(ctx.allocator, { l.rows() });
        const float* gamma = optionalInput(v, 1);
        const float* beta = optionalInput(v, 2);
        const auto eps = node.floatAttr("epsilon", 1e-5);
        const auto n = l.rowLength();
        shareAcrossTeam(l.rows(), std::max<std::int64_t>(1, kMinTeamShare / std::max<std::int64_t>(1, n)),
            [&](std::int64_t first, std::int64_t last) {
                for (auto r = first; r < last; ++r) {
                    const float* xr = x.f32() + r * n;
                    double sum = 0;
                    for (std::int64_t j = 0; j < n; ++j)
                        sum += xr[j];
                    const double mu = n > 0 ? sum / static_cast<double>(n) : 0.0;
                    double squares = 0;
                    for (std::int64_t j = 0; j < n; ++j)
                        squares += (xr[j] - mu) * (xr[j] - mu);
                    const auto m = static_cast<float>(mu);
                    const auto rs = static_cast<float>(
                        1.0 / std::sqrt(squares / static_cast<double>(std::max<std::int64_t>(1, n)) + eps));
                    float* yr = out.f32() + r * n;
                    for (std::int64_t j = 0; j < n; ++j) {
                        const auto c = l.channel(r, j);
                        yr[j] = math::normElement(
                            xr[j], m, rs, math::channelValue(gamma, c, 1.0F), math::channelValue(beta, c, 0.0F));
                    }
                    mean.f32()[r] = m;
                    rstd.f32()[r] = rs;
                }
            });
        v.out = { out };
        v.saved = { mean, rstd };
    }

    void groupNormBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        const auto l = math::groupNormLayout(x.shape(), node.intAttr("groups", 1));
        const float* gamma = optionalInput(v, 1);
        const float* mean = v.saved[0].f32();
        const float* rstd = v.saved[1].f32();
        const auto n = l.rowLength();
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        shareAcrossTeam(l.rows(), std::max<std::int64_t>(1, kMinTeamShare / std::max<std::int64_t>(1, n)),
            [&](std::int64_t first, std::int64_t last) {
                for (auto r = first; r < last; ++r) {
                    const float* xr = x.f32() + r * n;
                    const float* gr = dy.f32() + r * n;
                    double sumG = 0;
                    double sumGX = 0;
                    for (std::int64_t j = 0; j < n; ++j) {
                        const double dxhat = gr[j] * math::channelValue(gamma, l.channel(r, j), 1.0F);
                        sumG += dxhat;
                        sumGX += dxhat * (xr[j] - mean[r]) * rstd[r];
                    }
                    const auto meanG = static_cast<float>(sumG / static_cast<double>(n));
                    const auto meanGX = static_cast<float>(sumGX / static_cast<double>(n));
                    float* dr = dx.f32() + r * n;
                    for (std::int64_t j = 0; j < n; ++j)
                        dr[j] = math::normGradElement(xr[j], gr[j], math::channelValue(gamma, l.channel(r, j), 1.0F),
                            mean[r], rstd[r], meanG, meanGX, false);
                }
            });
        if (g.needGrad[0])
            g.gradIn[0] = dx;
        for (std::size_t i = 1; i < v.in.size() && i < 3; ++i) {
            if (!g.needGrad[i])
                continue;
            auto grad = NdArray::empty(ctx.allocator, v.in[i].shape());
            const math::GroupNormAffineGrad term { x.f32(), dy.f32(), mean, rstd, l, i == 2 };
            shareAcrossTeam(l.channels, 1, [&](std::int64_t first, std::int64_t last) { // channels are disjoint
                for (auto c = first; c < last; ++c) {
                    double sum = 0;
                    for (std::int64_t r = 0; r < l.batch * l.spatial; ++r)
                        sum += term(r, c);
                    grad.f32()[c] = static_cast<float>(sum);
                }
            });
            g.gradIn[i] = grad;
        }
    }

    // ---- Softmax over the last dim ----

    using cpu::softmaxRows;

    // ---- Mask: causal (key j visible to query i when j <= i + Tk - Tq) and padding (0 = masked) ----

    // Copies the scores `in` to `out` with every masked position set to `fill`, row by row: a causal
    // mask leaves the leading keys j <= i + Tk - Tq of query row i, a padding mask (0 = masked) drops
    // its keys. Rows are shared across the device's GEMM team (independent: any split, same bits).
    void maskRows(const NodeValues& v, bool causal, const float* in, float* out, float fill)
    {
        const auto& s = v.in[0].shape();
        const auto tk = s.back();
        const auto tq = s[s.size() - 2];
        const auto batches = s.size() > 2 ? s[0] : 1;
        const auto rows = tk > 0 ? numElements(s) / tk : 0;
        const auto rowsPerBatch = rows / std::max<std::int64_t>(1, batches);
        const bool padded = v.in.size() > 1;
        const std::int64_t* pad = padded && v.in[1].dtype() == DType::I64 ? v.in[1].i64() : nullptr;
        const float* padF = padded && v.in[1].dtype() == DType::F32 ? v.in[1].f32() : nullptr;
        shareAcrossTeam(rows, std::max<std::int64_t>(1, kMinTeamShare / std::max<std::int64_t>(1, tk)),
            [&](std::int64_t first, std::int64_t last) {
                for (auto r = first; r < last; ++r) {
                    const auto b = r / rowsPerBatch;
                    const auto q = (r % rowsPerBatch) % tq;
                    const auto visible = causal ? std::clamp<std::int64_t>(q + tk - tq + 1, 0, tk) : tk;
                    const float* x = in + r * tk;
                    float* o = out + r * tk;
                    std::copy(x, x + visible, o);
                    std::fill(o + visible, o + tk, fill);
                    if (!padded)
                        continue;
                    for (std::int64_t j = 0; j < visible; ++j) {
                        if (padF != nullptr ? padF[b * tk + j] == 0.0F : pad[b * tk + j] == 0)
                            o[j] = fill;
                    }
                }
            });
    }

    // ---- Cross-entropy: mean over rows whose label is not negative (PyTorch's ignore_index -100) ----

    void crossEntropyForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& logits = v.in[0];
        const auto& labels = v.in[1];
        const auto c = lastDim(logits);
        const auto rows = logits.numel() / c;
        auto probs = NdArray::empty(ctx.allocator, logits.shape());
        softmaxRows(logits.f32(), probs.f32(), rows, c);
        double loss = 0;
        std::int64_t counted = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
            const auto label = labels.i64()[r];
            if (label < 0)
                continue;
            if (label >= c)
                throw Error("node '" + node.name + "': label " + std::to_string(label) + " is out of range for "
                    + std::to_string(c) + " classes");
            loss -= std::log(std::max(probs.f32()[r * c + label], std::numeric_limits<float>::min()));
            ++counted;
        }
        auto out = NdArray::empty(ctx.allocator, {});
        out.f32()[0] = counted > 0 ? static_cast<float>(loss / static_cast<double>(counted)) : 0.0F;
        auto count = NdArray::empty(ctx.allocator, {});
        count.f32()[0] = static_cast<float>(counted);
        v.out = { out };
        v.saved = { probs, count };
    }

    void layerNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        normForward(node, v, ctx, false);
    }

    void layerNormBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        normBackward(v, g, ctx, false);
    }

    void rmsNormForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        normForward(node, v, ctx, true);
    }

    void rmsNormBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        normBackward(v, g, ctx, true);
    }

    // ---- Embedding: rows of the table (V, C) by id ----

    void embeddingForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto& table = v.in[1];
        const auto vocab = table.shape()[0];
        const auto c = table.shape()[1];
        auto shape = x.shape();
        shape.push_back(c);
        auto out = NdArray::empty(ctx.allocator, shape);
        for (std::int64_t i = 0; i < x.numel(); ++i) {
            const auto id = x.i64()[i];
            if (id < 0 || id >= vocab)
                throw Error("node '" + node.name + "': id " + std::to_string(id) + " is outside the table of "
                    + std::to_string(vocab) + " rows");
            std::memcpy(out.f32() + i * c, table.f32() + id * c, static_cast<std::size_t>(c) * sizeof(float));
        }
        v.out = { out };
    }

    void embeddingBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        if (!g.needGrad[1])
            return;
        const auto& x = v.in[0];
        const auto& dy = g.gradOut[0];
        auto dt = NdArray::zeros(ctx.allocator, v.in[1].shape());
        const auto c = v.in[1].shape()[1];
        for (std::int64_t i = 0; i < x.numel(); ++i) {
            float* row = dt.f32() + x.i64()[i] * c;
            const float* gr = dy.f32() + i * c;
            for (std::int64_t j = 0; j < c; ++j)
                row[j] += gr[j];
        }
        g.gradIn[1] = dt;
    }

    void softmaxForward(const Node&, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        auto out = NdArray::empty(ctx.allocator, x.shape());
        softmaxRows(x.f32(), out.f32(), x.numel() / lastDim(x), lastDim(x));
        v.out = { out };
    }

    void softmaxBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& dy = g.gradOut[0];
        const auto& y = v.out[0];
        const auto c = lastDim(y);
        const auto rows = y.numel() / c;
        auto dx = NdArray::empty(ctx.allocator, y.shape());
        cpu::softmaxBackwardRows(y.f32(), dy.f32(), dx.f32(), rows, c);
        g.gradIn[0] = dx;
    }

    void maskForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        auto out = NdArray::empty(ctx.allocator, v.in[0].shape());
        maskRows(v, node.intAttr("causal", 0) != 0, v.in[0].f32(), out.f32(), -std::numeric_limits<float>::infinity());
        v.out = { out };
    }

    void maskBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        auto dx = NdArray::empty(ctx.allocator, g.gradOut[0].shape());
        maskRows(v, node.intAttr("causal", 0) != 0, g.gradOut[0].f32(), dx.f32(), 0.0F);
        g.gradIn[0] = dx;
    }

    // ---- Dropout: a one-byte keep mask saved for backward (as PyTorch keeps a bool mask), drawn by
    // engine/kernel_math.h's counter-based hash from one seed per call; kept values scaled by
    // 1 / (1 - p) ----

    void dropoutForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto p = node.floatAttr("p", 0.0);
        if (!ctx.training || p <= 0) {
            v.out = { x };
            return;
        }
        auto mask = NdArray::empty(ctx.allocator, x.shape(), DType::U8);
        auto out = NdArray::empty(ctx.allocator, x.shape());
        const auto keep = static_cast<float>(1.0 / (1.0 - p));
        const auto seed = static_cast<unsigned long long>(ctx.rng());
        const auto threshold = math::dropoutThreshold(p);
        cpu::dropoutForward(x.f32(), out.f32(), mask.u8(), x.numel(), seed, threshold, keep);
        v.out = { out };
        v.saved = { mask };
    }

    void dropoutBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& dy = g.gradOut[0];
        if (v.saved.empty()) {
            g.gradIn[0] = dy;
            return;
        }
        const auto& x = v.in[0];
        auto dx = NdArray::empty(ctx.allocator, x.shape());
        const auto keep = static_cast<float>(1.0 / (1.0 - node.floatAttr("p", 0.0)));
        cpu::dropoutBackward(dy.f32(), v.saved[0].u8(), dx.f32(), x.numel(), keep);
        g.gradIn[0] = dx;
    }

    void crossEntropyBackward(const Node&, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& dy = g.gradOut[0];
        const auto& probs = v.saved[0];
        const auto counted = v.saved[1].f32()[0];
        const auto c = lastDim(probs);
        const auto rows = probs.numel() / c;
        auto dx = NdArray::empty(ctx.allocator, probs.shape());
        const float scale = counted > 0 ? dy.f32()[0] / counted : 0.0F;
        for (std::int64_t r = 0; r < rows; ++r) {
            const auto label = v.in[1].i64()[r];
            float* o = dx.f32() + r * c;
            const float* p = probs.f32() + r * c;
            for (std::int64_t j = 0; j < c; ++j)
                o[j] = label < 0 ? 0.0F : (p[j] - (j == label ? 1.0F : 0.0F)) * scale;
        }
        g.gradIn[0] = dx;
    }

    // ---- Scale -> Mask -> Softmax in one pass (engine/fusion.h) ----

    // The Mask's rule over scores shaped `s` (rank 2 or more), or nullptr when the chain has no Mask.
    const cpu::ScoreMask* scoreMask(const Shape& s, const MaskedSoftmaxArgs& a, bool masked, cpu::ScoreMask& m)
    {
        if (!masked)
            return nullptr;
        m.tk = s.back();
        m.tq = s[s.size() - 2];
        const auto rows = m.tk > 0 ? numElements(s) / m.tk : 0;
        m.rowsPerBatch = std::max<std::int64_t>(1, rows / std::max<std::int64_t>(1, s.size() > 2 ? s[0] : 1));
        m.causal = a.causal;
        if (a.padding.defined() && a.padding.dtype() == DType::I64)
            m.pad = a.padding.i64();
        else if (a.padding.defined())
            m.padF = a.padding.f32();
        return &m;
    }

    NdArray maskedSoftmaxForward(const NdArray& x, const MaskedSoftmaxArgs& a, KernelContext& ctx)
    {
        auto out = NdArray::empty(ctx.allocator, x.shape());
        const auto c = lastDim(x);
        cpu::ScoreMask m;
        const auto* mask = scoreMask(x.shape(), a, a.causal || a.padding.defined(), m);
        cpu::maskedSoftmaxRows(x.f32(), out.f32(), c > 0 ? x.numel() / c : 0, c, a.scale, mask);
        return out;
    }

    NdArray maskedSoftmaxBackward(const NdArray& y, const NdArray& dy, const MaskedSoftmaxArgs& a, KernelContext& ctx)
    {
        auto dx = NdArray::empty(ctx.allocator, y.shape());
        const auto c = lastDim(y);
        cpu::ScoreMask m;
        const auto* mask = scoreMask(y.shape(), a, a.causal || a.padding.defined(), m);
        cpu::maskedSoftmaxBackwardRows(y.f32(), dy.f32(), dx.f32(), c > 0 ? y.numel() / c : 0, c, a.scale, mask);
        return dx;
    }

    // ---- Attention (engine/attention_kernel.h) over this backend's MatMul and fused softmax ----

    void attentionForwardCpu(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        attentionForward(cpuBackend().kernels(), node, v, ctx);
    }

    void attentionBackwardCpu(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        attentionBackward(cpuBackend().kernels(), node, v, g, ctx);
    }

} // namespace

void registerNnKernels(KernelTable& table)
{
    table.add(OpType::Attention, { attentionForwardCpu, attentionBackwardCpu });
    table.setMaskedSoftmax({ maskedSoftmaxForward, maskedSoftmaxBackward });
    table.add(OpType::Embedding, { embeddingForward, embeddingBackward });
    table.add(OpType::LayerNorm, { layerNormForward, layerNormBackward });
    table.add(OpType::RMSNorm, { rmsNormForward, rmsNormBackward });
    table.add(OpType::GroupNorm, { groupNormForward, groupNormBackward });
    table.add(OpType::Softmax, { softmaxForward, softmaxBackward });
    table.add(OpType::Mask, { maskForward, maskBackward });
    table.add(OpType::Dropout, { dropoutForward, dropoutBackward });
    table.add(OpType::CrossEntropy, { crossEntropyForward, crossEntropyBackward });
}

} // namespace ps::engine::detail
