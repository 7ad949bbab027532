#include "backend.h"

#include <cstring>
#include <string>

namespace ps::engine {
namespace {

    std::size_t slotOf(OpType op)
    {
        return static_cast<std::size_t>(op);
    }

    // Attributes a device's allocations to a node while its kernel runs, and stops when it returns
    // or throws (the next allocations are not the node's).
    class OwnerScope
    {
    public:
        OwnerScope(Allocator& allocator, std::string_view owner)
            : m_allocator(allocator)
        {
            m_allocator.setOwner(owner);
        }
        ~OwnerScope()
        {
            m_allocator.setOwner("");
        }
        OwnerScope(const OwnerScope&) = delete;
        OwnerScope& operator=(const OwnerScope&) = delete;

    private:
        Allocator& m_allocator;
    };

    const OpKernel& kernelFor(const Backend& backend, const Node& node)
    {
        if (const auto* k = backend.kernels().find(node.op))
            return *k;
        const bool opaque = node.op == OpType::Opaque;
        const std::string op = opaque ? "Opaque type " + node.opaqueType : std::string(toString(node.op));
        throw Error("node '" + node.name + "' (" + op + "): the " + std::string(backend.name())
            + " backend has no kernel for it" + (opaque ? " (imported without a mapping to an IR op)" : ""));
    }

} // namespace

std::vector<std::byte> engineHostValues(const Tensor& t, DType& engineType)
{
    const auto n = static_cast<std::size_t>(numElements(t.shape));
    const bool isFloat = t.dtype == DType::F32 || t.dtype == DType::F64;
    engineType = isFloat ? DType::F32 : DType::I64;
    if (!t.data || t.data->size() != static_cast<std::size_t>(numBytes(t.shape, t.dtype)))
        throw Error("tensor '" + t.name + "' carries " + std::to_string(t.data ? t.data->size() : 0)
            + " bytes, expected " + std::to_string(numBytes(t.shape, t.dtype)) + " for " + formatShape(t.shape));
    if (t.dtype == DType::F32 || t.dtype == DType::I64)
        return *t.data;
    std::vector<std::byte> out(n * (isFloat ? 4 : 8));
    const auto* p = t.data->data();
    for (std::size_t i = 0; i < n; ++i) {
        std::int64_t wide = 0;
        switch (t.dtype) {
        case DType::F64: {
            double d = 0;
            std::memcpy(&d, p + i * 8, 8);
            const auto f = static_cast<float>(d);
            std::memcpy(out.data() + i * 4, &f, 4);
            continue;
        }
        case DType::I32: {
            std::int32_t v = 0;
            std::memcpy(&v, p + i * 4, 4);
            wide = v;
            break;
        }
        case DType::I8:
            wide = static_cast<std::int8_t>(p[i]);
            break;
        case DType::U8:
        case DType::Bool: // masks: i64 like every other integer
            wide = static_cast<std::uint8_t>(p[i]);
            break;
        default:
            throw Error("tensor '" + t.name + "' is " + std::string(toString(t.dtype))
                + "; the engine reads f32, f64, i64, i32, i8, u8 and bool values");
        }
        std::memcpy(out.data() + i * 8, &wide, 8);
    }
    return out;
}

void KernelTable::add(OpType op, OpKernel kernel)
{
    if (kernel.forward == nullptr || kernel.backward == nullptr)
        throw Error("kernel table: " + std::string(toString(op)) + " needs both a forward and a backward kernel");
    auto& slot = m_kernels.at(slotOf(op));
    if (slot.forward != nullptr)
        throw Error("kernel table: " + std::string(toString(op)) + " is registered twice");
    slot = kernel;
}

const OpKernel* KernelTable::find(OpType op) const
{
    const auto& slot = m_kernels.at(slotOf(op));
    return slot.forward != nullptr ? &slot : nullptr;
}

bool Backend::supports(OpType op) const
{
    return kernels().find(op) != nullptr;
}

void Backend::forward(const Node& node, NodeValues& values, KernelContext& ctx) const
{
    const auto& kernel = kernelFor(*this, node);
    const OwnerScope owner(ctx.allocator, node.name);
    try {
        kernel.forward(node, values, ctx);
    } catch (const NotResident& e) {
        throw NotResident(std::string(e.what()) + " in the forward of node '" + node.name + "' ("
            + std::string(toString(node.op)) + ")");
    }
}

NdArray Backend::forwardGemmBias(
    const Node& matmul, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx) const
{
    if (kernels().gemmBias() == nullptr)
        throw Error("node '" + matmul.name + "': the " + std::string(name()) + " backend has no fused GEMM + bias");
    const OwnerScope owner(ctx.allocator, matmul.name);
    try {
        return kernels().gemmBias()(matmul, x, w, bias, ctx);
    } catch (const NotResident& e) {
        throw NotResident(std::string(e.what()) + " in the forward of node '" + matmul.name + "' (MatMul + bias)");
    }
}

Backend::GemmBiasGeluValues Backend::forwardGemmBiasGelu(const Node& matmul, const Node& gelu, const NdArray& x,
    const NdArray& w, const NdArray& bias, KernelContext& ctx) const
{
    if (const auto fused = kernels().gemmBiasGelu(); fused != nullptr) {
        const OwnerScope owner(ctx.allocator, matmul.name);
        GemmBiasGeluValues out;
        try {
            if (fused(matmul, gelu, x, w, bias, ctx, out.sum, out.activated))
                return out;
        } catch (const NotResident& e) {
            throw NotResident(
                std::string(e.what()) + " in the forward of node '" + matmul.name + "' (MatMul + bias + Gelu)");
        }
    }
    GemmBiasGeluValues out;
    out.sum = forwardGemmBias(matmul, x, w, bias, ctx);
    NodeValues v;
    v.in = { out.sum };
    forward(gelu, v, ctx);
    out.activated = std::move(v.out.at(0));
    return out;
}

std::vector<NdArray> Backend::backward(const Node& node, const NodeValues& values, const std::vector<NdArray>& gradOut,
    const std::vector<bool>& needGrad, KernelContext& ctx) const
{
    const auto& kernel = kernelFor(*this, node);
    const OwnerScope owner(ctx.allocator, node.name + " (backward)");
    std::vector<NdArray> gradIn(values.in.size());
    BackwardArgs args { gradOut, needGrad, gradIn };
    try {
        kernel.backward(node, values, args, ctx);
    } catch (const NotResident& e) {
        throw NotResident(std::string(e.what()) + " in the backward of node '" + node.name + "' ("
            + std::string(toString(node.op)) + ")");
    }
    return gradIn;
}

} // namespace ps::engine
