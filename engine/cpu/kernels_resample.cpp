// Pad (constant, reflect, edge, wrap; negative pads crop) and Resize (nearest and linear over the
// last two dims) on the CPU, over engine/conv_geometry.h's plans and engine/conv_math.h's index
// math, which the CUDA kernels share.
#include "conv_geometry.h"
#include "cpu/kernel_impl.h"

namespace ps::engine::detail {
namespace {

    // ---- Pad (ONNX: begins, then ends; negative crops) ----

    // Per axis and output position, the input position read (-1: the constant value).
    struct PadPlan
    {
        Shape out;
        std::vector<std::vector<std::int64_t>> source;
    };

    PadPlan padPlan(const Node& node, const Shape& in)
    {
        const auto g = padGeometry(node, in);
        PadPlan plan { g.out, std::vector<std::vector<std::int64_t>>(in.size()) };
        for (std::size_t a = 0; a < in.size(); ++a) {
            for (std::int64_t o = 0; o < plan.out[a]; ++o)
                plan.source[a].push_back(math::padSource(g.mode, o - g.begin[a], in[a]));
        }
        return plan;
    }

    // fn(output flat index, input flat index or -1) for every output element.
    template <typename Fn> void forEachPadded(const PadPlan& plan, const Shape& in, Fn fn)
    {
        const auto rank = plan.out.size();
        const auto total = numElements(plan.out);
        if (rank == 0 || total == 0) {
            if (total > 0)
                fn(0, 0);
            return;
        }
        const auto strides = stridesOf(in);
        const auto& last = plan.source.back();
        const auto cols = plan.out.back();
        std::vector<std::int64_t> index(rank, 0);
        for (std::int64_t row = 0; row < total / cols; ++row) {
            std::int64_t base = 0; // input offset of the row's leading coordinates (-1: in the constant border)
            for (std::size_t a = 0; a + 1 < rank && base >= 0; ++a) {
                const auto s = plan.source[a][static_cast<std::size_t>(index[a])];
                base = s < 0 ? -1 : base + s * strides[a];
            }
            for (std::int64_t c = 0; c < cols; ++c) {
                const auto s = last[static_cast<std::size_t>(c)];
                fn(row * cols + c, base < 0 || s < 0 ? -1 : base + s);
            }
            for (std::size_t a = rank - 1; a-- > 0;) { // odometer over the leading axes
                if (++index[a] < plan.out[a])
                    break;
                index[a] = 0;
            }
        }
    }

    void padForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto plan = padPlan(node, x.shape());
        auto out = NdArray::empty(ctx.allocator, plan.out, x.dtype());
        const double value = node.floatAttr("value", 0.0);
        if (x.dtype() == DType::F32) {
            const auto fill = static_cast<float>(value);
            forEachPadded(
                plan, x.shape(), [&](std::int64_t o, std::int64_t i) { out.f32()[o] = i < 0 ? fill : x.f32()[i]; });
        } else {
            const auto fill = static_cast<std::int64_t>(value);
            forEachPadded(
                plan, x.shape(), [&](std::int64_t o, std::int64_t i) { out.i64()[o] = i < 0 ? fill : x.i64()[i]; });
        }
        v.out = { out };
    }

    void padBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        const auto plan = padPlan(node, x.shape());
        const auto dy = gradOrZeros(g.gradOut[0], plan.out, ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        forEachPadded(plan, x.shape(), [&](std::int64_t o, std::int64_t i) {
            if (i >= 0)
                dx.f32()[i] += dy.f32()[o];
        });
        g.gradIn[0] = dx;
    }

    // ---- Resize of the last two dims (ONNX Resize with sizes; nearest or bilinear) ----

    void resizeForward(const Node& node, NodeValues& v, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        requireDType(node, x, DType::F32, "the input");
        const auto plan = resizeGeometry(node, x.shape());
        auto out = NdArray::empty(ctx.allocator, plan.out); // (N, C, H', W')
        float* o = out.f32();
        for (std::int64_t pl = 0; pl < plan.planes; ++pl) {
            const float* img = x.f32() + pl * plan.h * plan.w;
            for (const auto& r : plan.rows) {
                for (const auto& c : plan.cols)
                    *o++ = math::resizeValue(img, plan.w, r, c);
            }
        }
        v.out = { out };
    }

    void resizeBackward(const Node& node, const NodeValues& v, BackwardArgs& g, KernelContext& ctx)
    {
        const auto& x = v.in[0];
        requireDType(node, x, DType::F32, "the input");
        const auto plan = resizeGeometry(node, x.shape());
        const auto w = plan.w;
        const auto dy = gradOrZeros(g.gradOut[0], plan.out, ctx.allocator);
        auto dx = NdArray::zeros(ctx.allocator, x.shape());
        const float* d = dy.f32();
        for (std::int64_t pl = 0; pl < plan.planes; ++pl) {
            float* img = dx.f32() + pl * plan.h * w;
            for (const auto& r : plan.rows) {
                float* top = img + r.i0 * w;
                float* bottom = img + r.i1 * w;
                for (const auto& c : plan.cols) {
                    const float gv = *d++;
                    top[c.i0] += r.w0 * c.w0 * gv;
                    top[c.i1] += r.w0 * c.w1 * gv;
                    bottom[c.i0] += r.w1 * c.w0 * gv;
                    bottom[c.i1] += r.w1 * c.w1 * gv;
                }
            }
        }
        g.gradIn[0] = dx;
    }

} // namespace

void registerResampleKernels(KernelTable& table)
{
    table.add(OpType::Pad, { padForward, padBackward });
    table.add(OpType::Resize, { resizeForward, resizeBackward });
}

} // namespace ps::engine::detail
