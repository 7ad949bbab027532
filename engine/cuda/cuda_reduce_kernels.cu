// The CUDA backend's broadcast-gradient reduction (reduceTo): a gradient summed over the axes its
// operand was broadcast along, in engine/column_math.h's two passes over row chunks, with a
// direct walk for the common contiguous (rows, cols) case (a bias's gradient).
#include "cuda/cuda_common.cuh"

namespace ps::engine::cuda {
namespace {

    // ---- Broadcast-gradient reduction ----

    // Element (row r of the reduced axes, column t of the kept axes) of a gradient being summed
    // to a broadcast operand's shape.
    struct BroadcastGradValue
    {
        const float* grad;
        Dims kept;
        Dims reduced;
        PS_HOST_DEVICE float operator()(std::int64_t r, std::int64_t t) const
        {
            long long offset = 0;
            long long rest = t;
            for (int i = kept.rank - 1; i >= 0; --i) {
                offset += (rest % kept.size[i]) * kept.stride[i];
                rest /= kept.size[i];
            }
            rest = r;
            for (int i = reduced.rank - 1; i >= 0; --i) {
                offset += (rest % reduced.size[i]) * reduced.stride[i];
                rest /= reduced.size[i];
            }
            return grad[offset];
        }
    };

    // The same over a contiguous (rows, cols) gradient summed over its rows (a bias's).
    struct RowMajorGradValue
    {
        const float* grad;
        long long cols;
        PS_HOST_DEVICE float operator()(std::int64_t r, std::int64_t t) const
        {
            return grad[r * cols + t];
        }
    };

    __global__ void sumChunkPartialsKernel(const float* partials, float* out, std::int64_t cols, std::int64_t chunks)
    {
        for (auto t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < cols;
             t += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            out[t] = math::sumChunkPartials(partials, cols, t, chunks);
    }

} // namespace

NdArray reduceTo(const NdArray& grad, const Shape& to, Allocator& allocator)
{
    if (grad.shape() == to)
        return grad;
    const auto from = dimsOf(grad.shape());
    const auto shift = from.rank - static_cast<int>(to.size());
    Dims kept;
    Dims reduced;
    long long inner = 1;
    for (int i = 0; i < from.rank; ++i) {
        const auto target = i < shift ? 1 : to[static_cast<std::size_t>(i - shift)];
        auto& into = target == from.size[i] ? kept : reduced;
        if (target != from.size[i] && target != 1)
            throw Error("internal: gradient " + formatShape(grad.shape()) + " does not reduce to " + formatShape(to));
        into.size[into.rank] = from.size[i];
        into.stride[into.rank] = from.stride[i];
        ++into.rank;
        if (&into == &reduced)
            inner *= from.size[i];
    }
    auto keptWalk = kept;
    collapseDims(keptWalk, { &kept });
    auto reducedWalk = reduced;
    collapseDims(reducedWalk, { &reduced });
    auto out = NdArray::empty(allocator, to);
    if (kept.rank == 1 && kept.stride[0] == 1 && reduced.rank == 1 && reduced.stride[0] == kept.size[0])
        columnSums(RowMajorGradValue { f32(grad), kept.size[0] }, inner, out.numel(), f32(out), allocator);
    else
        columnSums(BroadcastGradValue { f32(grad), kept, reduced }, inner, out.numel(), f32(out), allocator);
    checkLaunch("cuda gradient reduction to " + formatShape(to));
    return out;
}

void launchSumChunkPartials(const float* partials, float* out, std::int64_t cols, std::int64_t chunks)
{
    if (cols > 0)
        sumChunkPartialsKernel<<<blocksFor(cols), kThreads>>>(partials, out, cols, chunks);
}

} // namespace ps::engine::cuda
