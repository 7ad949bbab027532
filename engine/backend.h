// The device backend interface: what the engine above the kernels may ask of a device. Buffers
// come from a device's accounted allocator (capacity, peak); values move between host and device
// and between devices only through copies here; ops run through the backend's kernel table (one
// {forward, backward} entry per IR op, registered by the backend); the few elementwise updates the
// runtime needs outside ops (gradient accumulation, optimizer updates) are backend calls too.
// Nothing above a backend reads or writes the raw memory of a device buffer. Modelled on ggml's
// backend interface (supports_op, buffer types, set/get tensor).
//
// The CPU backend (cpu/cpu_backend.h) is the first implementation; a CUDA backend registers its
// own table against the same ops.
// Depends on: core (Node, OpType), cpu/ndarray.h (arrays and the allocator); no Qt, no CUDA.
#pragma once

#include "cpu/ndarray.h"
#include "graph/graph.h"

#include <array>
#include <cstddef>
#include <random>
#include <span>
#include <string_view>
#include <vector>

namespace ps::engine {

// What GEMMs compute with, where the backend has the choice (CUDA): fp32; TF32 tensor cores (inputs
// rounded to 10-bit mantissas); or bf16 inputs (cast per call, as torch.autocast casts a matmul's
// operands). Accumulation and stored values stay fp32 in every mode. The CPU computes fp32 always.
enum class GemmPrecision : std::uint8_t { Fp32, Tf32, Bf16 };

struct KernelContext
{
    Allocator& allocator;
    std::mt19937_64& rng; // dropout masks
    bool training = true; // dropout active, batch norm on batch statistics
    GemmPrecision gemm = GemmPrecision::Fp32;
};

// One node's values for one micro-batch: inputs and outputs, and what forward saved besides them
// (dropout mask, normalization statistics, softmax probabilities, pooling indices).
struct NodeValues
{
    std::vector<NdArray> in;
    std::vector<NdArray> out;
    std::vector<NdArray> saved;
};

// What a backward kernel gets: one gradient per output (undefined: zero), which inputs need one,
// and the slots it fills (one per input).
struct BackwardArgs
{
    const std::vector<NdArray>& gradOut;
    const std::vector<bool>& needGrad;
    std::vector<NdArray>& gradIn;
};

using ForwardKernel = void (*)(const Node& node, NodeValues& values, KernelContext& ctx);
using BackwardKernel = void (*)(const Node& node, const NodeValues& values, BackwardArgs& args, KernelContext& ctx);

struct OpKernel
{
    ForwardKernel forward = nullptr;
    BackwardKernel backward = nullptr;
};

// Attention scores' Scale -> Mask -> Softmax run as one pass (engine/fusion.h): softmax over the
// last dim of x * scale with the masked positions at -inf, as the Mask node masks them (causal:
// key j hidden from query i when j > i + Tk - Tq; padding: a key whose entry is 0). Its backward
// is the three backwards in one: dx = scale * (masked ? 0 : y * (dy - sum(y * dy))).
struct MaskedSoftmaxArgs
{
    float scale = 1.0F;
    bool causal = false;
    NdArray padding; // (B, Tk) i64 or f32, 0 = masked; undefined: no padding mask
};
using MaskedSoftmaxForward = NdArray (*)(const NdArray& x, const MaskedSoftmaxArgs& args, KernelContext& ctx);
using MaskedSoftmaxBackward = NdArray (*)(
    const NdArray& y, const NdArray& dy, const MaskedSoftmaxArgs& args, KernelContext& ctx);
struct MaskedSoftmaxKernel
{
    MaskedSoftmaxForward forward = nullptr;
    MaskedSoftmaxBackward backward = nullptr;
};

// A Linear's GEMM and its bias add as one call (engine/fusion.h's GemmBiasChain): the MatMul
// node's product of x and w (its attributes and broadcasting) plus `bias` (the product's last dim)
// over every row, in fp32, as MatMul then BiasAdd compute it. The CUDA backend runs it as one
// cuBLASLt GEMM whose epilogue adds the bias; the CPU adds it in place over the GEMM's output.
using GemmBiasForward = NdArray (*)(
    const Node& matmul, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx);
// The same GEMM + bias followed by a Gelu node's GELU (engine/fusion.h's chain with `gelu`): fills
// `sum` (the add's output, which the Gelu's backward reads) and `activated` (the Gelu's output) and
// returns true, or returns false where the backend cannot for these operands (then
// Backend::forwardGemmBiasGelu runs the GEMM + bias and the Gelu kernel apart). CUDA: cuBLASLt's
// GELU_AUX_BIAS epilogue for the tanh form.
using GemmBiasGeluForward = bool (*)(const Node& matmul, const Node& gelu, const NdArray& x, const NdArray& w,
    const NdArray& bias, KernelContext& ctx, NdArray& sum, NdArray& activated);

// Per-op kernels of one backend, indexed by OpType.
class KernelTable
{
public:
    // Throws ps::Error if `op` already has an entry (one place per op).
    void add(OpType op, OpKernel kernel);
    // nullptr when the backend has no kernel for `op`.
    [[nodiscard]] const OpKernel* find(OpType op) const;
    // The fused attention-score kernel (nullptr forward: the backend runs the three ops apart).
    void setMaskedSoftmax(MaskedSoftmaxKernel kernel)
    {
        m_maskedSoftmax = kernel;
    }
    [[nodiscard]] const MaskedSoftmaxKernel& maskedSoftmax() const
    {
        return m_maskedSoftmax;
    }
    // The fused GEMM + bias (nullptr: the backend runs MatMul and the bias add apart).
    void setGemmBias(GemmBiasForward kernel)
    {
        m_gemmBias = kernel;
    }
    [[nodiscard]] GemmBiasForward gemmBias() const
    {
        return m_gemmBias;
    }
    // The fused GEMM + bias + GELU (nullptr: the GEMM + bias, then the Gelu kernel).
    void setGemmBiasGelu(GemmBiasGeluForward kernel)
    {
        m_gemmBiasGelu = kernel;
    }
    [[nodiscard]] GemmBiasGeluForward gemmBiasGelu() const
    {
        return m_gemmBiasGelu;
    }

private:
    std::array<OpKernel, static_cast<std::size_t>(OpType::Opaque) + 1> m_kernels {};
    MaskedSoftmaxKernel m_maskedSoftmax {};
    GemmBiasForward m_gemmBias = nullptr;
    GemmBiasGeluForward m_gemmBiasGelu = nullptr;
};

struct AdamWUpdate
{
    float lr = 1e-3F;
    float beta1 = 0.9F;
    float beta2 = 0.999F;
    float eps = 1e-8F;
    float weightDecay = 0.01F;
    float gradScale = 1.0F; // applied to the gradient first (1 / accumulated micro-batches)
    int step = 1; // 1-based, for the bias corrections
};

struct SgdUpdate
{
    float lr = 1e-3F;
    float momentum = 0.9F;
    float weightDecay = 0.0F;
    float gradScale = 1.0F;
    bool firstStep = true; // the momentum buffer starts as the gradient
};

class Backend
{
public:
    virtual ~Backend() = default;

    [[nodiscard]] virtual std::string_view name() const = 0; // "cpu", "cuda"
    [[nodiscard]] virtual const KernelTable& kernels() const = 0;
    [[nodiscard]] bool supports(OpType op) const;

    // Runs a node through the kernel table; throws ps::Error naming the node when the backend has
    // no kernel for its op. Allocations are attributed to the node (OOM messages name it).
    void forward(const Node& node, NodeValues& values, KernelContext& ctx) const;
    // The fused GEMM + bias (kernels().gemmBias(), which must be set), its allocations owned by `matmul`.
    [[nodiscard]] NdArray forwardGemmBias(
        const Node& matmul, const NdArray& x, const NdArray& w, const NdArray& bias, KernelContext& ctx) const;
    // The fused GEMM + bias then `gelu` (kernels().gemmBias() must be set): the add's output and the
    // Gelu's, through kernels().gemmBiasGelu() where it runs them, else the GEMM + bias then the
    // Gelu kernel (its allocation owned by `gelu`).
    struct GemmBiasGeluValues
    {
        NdArray sum;
        NdArray activated;
    };
    [[nodiscard]] GemmBiasGeluValues forwardGemmBiasGelu(const Node& matmul, const Node& gelu, const NdArray& x,
        const NdArray& w, const NdArray& bias, KernelContext& ctx) const;
    // gradOut has one entry per output (undefined: zero). Returns one gradient per input, defined
    // where needGrad is true.
    [[nodiscard]] std::vector<NdArray> backward(const Node& node, const NodeValues& values,
        const std::vector<NdArray>& gradOut, const std::vector<bool>& needGrad, KernelContext& ctx) const;

    // Where this backend's buffers live: an allocator for one of its devices is made with it
    // (host memory for the CPU backend).
    [[nodiscard]] virtual std::shared_ptr<MemoryResource> memory() const = 0;
    // Host memory for what leaves the device (swapped activations, host-resident copies): pinned
    // for a GPU, so its copies run at the link's full bandwidth; plain host memory by default.
    [[nodiscard]] virtual std::shared_ptr<MemoryResource> hostStaging() const
    {
        return hostMemory();
    }

    // Buffers on a device (its allocator).
    [[nodiscard]] virtual NdArray zeros(Allocator& allocator, const Shape& shape, DType dtype = DType::F32) const = 0;
    // A device buffer holding `bytes` (little-endian f32 or i64 elements of `shape`).
    [[nodiscard]] virtual NdArray fromHost(
        Allocator& allocator, const Shape& shape, DType dtype, std::span<const std::byte> bytes) const = 0;
    // The buffer's bytes on the host.
    [[nodiscard]] virtual std::vector<std::byte> toHost(const NdArray& array) const = 0;
    // The same into host memory the caller keeps and reuses (exactly the array's bytes long): no
    // fresh pages to fault in on every copy.
    virtual void copyToHost(const NdArray& array, std::span<std::byte> out) const
    {
        array.toBytes(out);
    }
    // A copy of `array` (on this backend) into `allocator`'s memory, `target` being the backend
    // that owns that memory (device to device, or to a host pool for swapping).
    [[nodiscard]] virtual NdArray copyTo(const NdArray& array, const Backend& target, Allocator& allocator) const = 0;

    // Waits until the device has finished the compute issued to it (host timers around device
    // work; copies return when done); the CPU's work is done when its calls return.
    virtual void synchronize() const { }

    // dst += src (same shape); dst must not share storage with another live array.
    virtual void accumulate(NdArray& dst, const NdArray& src) const = 0;
    // dst += the f32 elements in `src` (host bytes, dst's size): uploaded into `scratch` first by
    // default; a backend whose device memory is the host's adds them where they lie.
    virtual void accumulateFromHost(NdArray& dst, std::span<const std::byte> src, Allocator& scratch) const
    {
        accumulate(dst, fromHost(scratch, dst.shape(), DType::F32, src));
    }
    // A new buffer a + b (same shape), so views sharing a's storage stay intact.
    [[nodiscard]] virtual NdArray add(const NdArray& a, const NdArray& b, Allocator& allocator) const = 0;
    virtual void fill(NdArray& dst, float value) const = 0;
    // torch.optim.AdamW / torch.optim.SGD update rules over one parameter.
    virtual void adamw(NdArray& param, const NdArray& grad, NdArray& m, NdArray& v, const AdamWUpdate& u) const = 0;
    virtual void sgd(NdArray& param, const NdArray& grad, NdArray& momentum, const SgdUpdate& u) const = 0;
    // AdamW over many parameters at once (a stage's or a model's, all of the same update): adamw()
    // on each by default; the CUDA backend updates them all in one launch.
    struct AdamWSlot
    {
        NdArray* param;
        const NdArray* grad;
        NdArray* m;
        NdArray* v;
    };
    virtual void adamwAll(std::span<const AdamWSlot> slots, const AdamWUpdate& u) const
    {
        for (const auto& s : slots)
            adamw(*s.param, *s.grad, *s.m, *s.v, u);
    }
};

// A graph tensor's stored values (an initializer, a folded constant) converted on the host to the
// engine's element types: f32 for every float type, i64 for every integer and bool. `engineType`
// receives which. Throws ps::Error naming the tensor when the bytes do not fit its shape.
[[nodiscard]] std::vector<std::byte> engineHostValues(const Tensor& t, DType& engineType);

// The always-built CPU backend (OpenBLAS GEMMs).
[[nodiscard]] const Backend& cpuBackend();

} // namespace ps::engine
