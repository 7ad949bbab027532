// The CPU backend: buffers on host memory from an accounted Allocator, kernels from cpu/kernels_*.cpp
// registered per op into its table at construction, and the elementwise updates (gradient sums,
// torch.optim.AdamW and SGD) as plain loops.
// Depends on: backend.h, cpu/kernel_impl.h, OpenBLAS; no Qt, no CUDA.
#pragma once

#include "backend.h"

namespace ps::engine {

class CpuBackend final : public Backend
{
public:
    CpuBackend();

    [[nodiscard]] std::string_view name() const override
    {
        return "cpu";
    }
    [[nodiscard]] const KernelTable& kernels() const override
    {
        return m_kernels;
    }

    [[nodiscard]] std::shared_ptr<MemoryResource> memory() const override
    {
        return hostMemory();
    }
    [[nodiscard]] NdArray zeros(Allocator& allocator, const Shape& shape, DType dtype = DType::F32) const override;
    [[nodiscard]] NdArray fromHost(
        Allocator& allocator, const Shape& shape, DType dtype, std::span<const std::byte> bytes) const override;
    [[nodiscard]] std::vector<std::byte> toHost(const NdArray& array) const override;
    // Any target: the copy goes through the memory that is not the host's.
    [[nodiscard]] NdArray copyTo(const NdArray& array, const Backend& target, Allocator& allocator) const override;

    void accumulate(NdArray& dst, const NdArray& src) const override;
    void accumulateFromHost(NdArray& dst, std::span<const std::byte> src, Allocator& scratch) const override;
    [[nodiscard]] NdArray add(const NdArray& a, const NdArray& b, Allocator& allocator) const override;
    void fill(NdArray& dst, float value) const override;
    void adamw(NdArray& param, const NdArray& grad, NdArray& m, NdArray& v, const AdamWUpdate& u) const override;
    void sgd(NdArray& param, const NdArray& grad, NdArray& momentum, const SgdUpdate& u) const override;

private:
    KernelTable m_kernels;
};

} // namespace ps::engine
