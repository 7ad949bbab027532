// The broadcasting and shape helpers the CPU kernels share, and the BLAS thread setting.
#include "cpu/kernels.h"

#include "cpu/blas_core.h"
#include "cpu/gemm_team.h"
#include "cpu/kernel_impl.h"

#include <algorithm>
#include <cblas.h>

namespace ps::engine {
namespace detail {

    std::vector<std::int64_t> stridesOf(const Shape& shape)
    {
        std::vector<std::int64_t> s(shape.size(), 1);
        for (std::size_t i = shape.size(); i-- > 1;)
            s[i - 1] = s[i] * shape[i];
        return s;
    }

    AxisView axisView(const Shape& shape, std::size_t axis)
    {
        AxisView v;
        for (std::size_t i = 0; i < shape.size(); ++i) {
            if (i < axis)
                v.outer *= shape[i];
            else if (i == axis)
                v.length = shape[i];
            else
                v.inner *= shape[i];
        }
        return v;
    }

    namespace {
        // Strides of `operand` aligned to the trailing dims of `out`; 0 where it broadcasts.
        std::vector<std::int64_t> broadcastStrides(const Shape& out, const Shape& operand)
        {
            const auto own = stridesOf(operand);
            std::vector<std::int64_t> s(out.size(), 0);
            const auto offset = out.size() - operand.size();
            for (std::size_t i = 0; i < operand.size(); ++i)
                s[offset + i] = operand[i] == 1 ? 0 : own[i];
            return s;
        }
    } // namespace

    void forEachBroadcast(const Shape& out, const Shape& a, const Shape& b,
        const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn)
    {
        const auto sa = broadcastStrides(out, a);
        const auto sb = broadcastStrides(out, b);
        const auto total = numElements(out);
        std::vector<std::int64_t> index(out.size(), 0);
        std::int64_t ia = 0;
        std::int64_t ib = 0;
        for (std::int64_t i = 0; i < total; ++i) {
            fn(i, ia, ib);
            for (std::size_t d = out.size(); d-- > 0;) { // odometer
                ++index[d];
                ia += sa[d];
                ib += sb[d];
                if (index[d] < out[d])
                    break;
                ia -= sa[d] * out[d];
                ib -= sb[d] * out[d];
                index[d] = 0;
            }
        }
    }

    NdArray reduceToShape(const NdArray& grad, const Shape& target, Allocator& allocator)
    {
        if (grad.shape() == target)
            return grad;
        auto out = NdArray::zeros(allocator, target);
        float* o = out.f32();
        const float* g = grad.f32();
        const auto& gs = grad.shape();
        if (target.size() <= gs.size()
            && std::equal(target.begin(), target.end(), gs.end() - static_cast<std::ptrdiff_t>(target.size()))) {
            // A bias or a broadcast row: sum the leading rows, each column in row order; the columns
            // are shared across the device's team (any split: the same sums).
            const auto n = out.numel();
            const auto rows = grad.numel() / std::max<std::int64_t>(n, 1);
            shareAcrossTeam(n, std::max<std::int64_t>(1, kMinTeamShare / std::max<std::int64_t>(1, rows)),
                [&](std::int64_t first, std::int64_t last) {
                    for (std::int64_t r = 0; r < rows; ++r) {
                        const float* gr = g + r * n;
                        for (auto j = first; j < last; ++j)
                            o[j] += gr[j];
                    }
                });
            return out;
        }
        forEachBroadcast(
            grad.shape(), target, target, [&](std::int64_t i, std::int64_t it, std::int64_t) { o[it] += g[i]; });
        return out;
    }

    std::string nodeLabel(const Node& node)
    {
        return std::string(toString(node.op)) + " '" + node.name + "': ";
    }

    void requireDType(const Node& node, const NdArray& a, DType dtype, const char* what)
    {
        if (a.dtype() != dtype)
            throw Error(nodeLabel(node) + what + " must be " + std::string(toString(dtype)) + ", got "
                + std::string(toString(a.dtype())));
    }

    NdArray gradOrZeros(const NdArray& grad, const Shape& shape, Allocator& allocator)
    {
        return grad.defined() ? grad : NdArray::zeros(allocator, shape);
    }

} // namespace detail

namespace {
    // Before main: a process whose OpenBLAS chose kernels narrower than this CPU runs re-executes
    // itself with OPENBLAS_CORETYPE set (cpu/blas_core.h). Here, because every binary that runs the
    // engine's GEMMs links this file.
    [[maybe_unused]] const bool kBlasCoreChecked = (upgradeBlasCoreOrContinue(), true);
} // namespace

void setComputeThreads(int threads)
{
    if (threads > 0)
        openblas_set_num_threads(threads);
}

} // namespace ps::engine
