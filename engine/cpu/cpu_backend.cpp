#include "cpu/cpu_backend.h"

#include "cpu/kernel_impl.h"
#include "cpu/vector_loops.h"
#include "kernel_math.h"

#include <cmath>
#include <cstring>
#include <string>

namespace ps::engine {
namespace {

    void requireF32(const NdArray& a, const char* what)
    {
        if (!a.defined() || a.dtype() != DType::F32)
            throw Error(std::string("cpu backend: ") + what + " needs a defined f32 array");
    }

    void requireSameSize(const NdArray& a, const NdArray& b, const char* what)
    {
        requireF32(a, what);
        requireF32(b, what);
        if (a.numel() != b.numel())
            throw Error(std::string("cpu backend: ") + what + " of " + formatShape(a.shape()) + " and "
                + formatShape(b.shape()) + ": the element counts differ");
    }

    const std::byte* bytesOf(const NdArray& a)
    {
        return a.dtype() == DType::F32 ? reinterpret_cast<const std::byte*>(a.f32())
                                       : reinterpret_cast<const std::byte*>(a.i64());
    }

    std::byte* bytesOf(NdArray& a)
    {
        return a.dtype() == DType::F32 ? reinterpret_cast<std::byte*>(a.f32()) : reinterpret_cast<std::byte*>(a.i64());
    }

} // namespace

CpuBackend::CpuBackend()
{
    detail::registerMathKernels(m_kernels);
    detail::registerNnKernels(m_kernels);
    detail::registerLayoutKernels(m_kernels);
    detail::registerConvKernels(m_kernels);
    detail::registerResampleKernels(m_kernels);
    detail::registerElementwiseKernels(m_kernels);
    detail::registerIndexKernels(m_kernels);
    detail::registerGatherKernels(m_kernels);
    detail::registerReduceKernels(m_kernels);
}

NdArray CpuBackend::zeros(Allocator& allocator, const Shape& shape, DType dtype) const
{
    return NdArray::zeros(allocator, shape, dtype);
}

NdArray CpuBackend::fromHost(
    Allocator& allocator, const Shape& shape, DType dtype, std::span<const std::byte> bytes) const
{
    const auto expect = static_cast<std::size_t>(numBytes(shape, dtype));
    if (bytes.size() != expect)
        throw Error("cpu backend: " + std::to_string(bytes.size()) + " bytes for " + formatShape(shape) + " "
            + std::string(toString(dtype)) + ", expected " + std::to_string(expect));
    auto a = NdArray::empty(allocator, shape, dtype);
    if (!bytes.empty())
        std::memcpy(bytesOf(a), bytes.data(), bytes.size());
    return a;
}

std::vector<std::byte> CpuBackend::toHost(const NdArray& array) const
{
    if (!array.defined())
        throw Error("cpu backend: toHost of an undefined array");
    std::vector<std::byte> bytes(static_cast<std::size_t>(array.bytes()));
    if (!bytes.empty())
        std::memcpy(bytes.data(), bytesOf(array), bytes.size());
    return bytes;
}

NdArray CpuBackend::copyTo(const NdArray& array, const Backend& /*target*/, Allocator& allocator) const
{
    if (!array.defined())
        throw Error("cpu backend: copy of an undefined array");
    return array.copyTo(allocator);
}

void CpuBackend::accumulate(NdArray& dst, const NdArray& src) const
{
    requireSameSize(dst, src, "accumulate");
    float* d = dst.f32();
    const auto n = dst.numel();
    if (d == src.f32()) { // the vector loop takes arrays apart: an array added to itself doubles
        for (std::int64_t i = 0; i < n; ++i)
            d[i] += d[i];
        return;
    }
    cpu::addInto(d, src.f32(), n);
}

void CpuBackend::accumulateFromHost(NdArray& dst, std::span<const std::byte> src, Allocator& /*scratch*/) const
{
    requireF32(dst, "accumulate");
    if (src.size() != static_cast<std::size_t>(dst.bytes()))
        throw Error("cpu backend: accumulate of " + std::to_string(src.size()) + " host bytes into a "
            + std::to_string(dst.bytes()) + "-byte array");
    float* d = dst.f32();
    const auto n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i) {
        float v = 0;
        std::memcpy(&v, src.data() + i * static_cast<std::int64_t>(sizeof(float)), sizeof(float));
        d[i] += v;
    }
}

NdArray CpuBackend::add(const NdArray& a, const NdArray& b, Allocator& allocator) const
{
    requireSameSize(a, b, "add");
    auto sum = NdArray::empty(allocator, a.shape());
    cpu::addArrays(a.f32(), b.f32(), sum.f32(), sum.numel());
    return sum;
}

void CpuBackend::fill(NdArray& dst, float value) const
{
    requireF32(dst, "fill");
    float* d = dst.f32();
    const auto n = dst.numel();
    for (std::int64_t i = 0; i < n; ++i)
        d[i] = value;
}

void CpuBackend::adamw(NdArray& param, const NdArray& grad, NdArray& m, NdArray& v, const AdamWUpdate& u) const
{
    requireSameSize(param, grad, "adamw");
    requireSameSize(param, m, "adamw");
    requireSameSize(param, v, "adamw");
    // torch.optim.AdamW (decoupled decay, then Adam); the per-element step is kernel_math.h's.
    const auto c = math::adamwCoefficients(u.lr, u.weightDecay, u.beta1, u.beta2, u.eps, u.step, u.gradScale);
    cpu::adamwStep(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), c);
}

void CpuBackend::sgd(NdArray& param, const NdArray& grad, NdArray& momentum, const SgdUpdate& u) const
{
    requireSameSize(param, grad, "sgd");
    requireSameSize(param, momentum, "sgd");
    const math::SgdCoefficients c { u.lr, u.momentum, u.weightDecay, u.gradScale, u.firstStep };
    float* w = param.f32();
    const float* gr = grad.f32();
    float* m = momentum.f32();
    const auto n = param.numel();
    for (std::int64_t i = 0; i < n; ++i)
        math::sgdElement(w[i], gr[i], m[i], c);
}

const Backend& cpuBackend()
{
    static const CpuBackend backend;
    return backend;
}

} // namespace ps::engine
