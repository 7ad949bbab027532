// Internal to the CUDA backend (engine/cuda/*.cu): device pointers of arrays, error checks, launch
// sizes, shapes passed to kernels by value, the GEMM entry and the kernel registration.
// Every launch goes to the calling thread's current device on the legacy default stream, so each
// op is ordered after the previous one; a copy to or from the host (MemoryResource::copy) waits for
// them through an event, on the copying thread's own stream (cuda_backend.cu).
#pragma once

#include "backend.h"
#include "column_math.h"
#include "conv_math.h"
#include "update_table.h"
#include "util/error.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace ps::engine::cuda {

// Throws ps::Error "<what>: <CUDA error name>: <its description>".
void check(cudaError_t err, const std::string& what);
// After a launch: the launch error, if any, naming the node.
void checkLaunch(const std::string& what);

inline float* f32(NdArray& a)
{
    return reinterpret_cast<float*>(a.data());
}
inline const float* f32(const NdArray& a)
{
    return reinterpret_cast<const float*>(a.data());
}
inline std::int64_t* i64(NdArray& a)
{
    return reinterpret_cast<std::int64_t*>(a.data());
}
inline const std::int64_t* i64(const NdArray& a)
{
    return reinterpret_cast<const std::int64_t*>(a.data());
}
inline std::uint8_t* u8(NdArray& a)
{
    return reinterpret_cast<std::uint8_t*>(a.data());
}
inline const std::uint8_t* u8(const NdArray& a)
{
    return reinterpret_cast<const std::uint8_t*>(a.data());
}

// "node 'name' (Op)": how the CUDA kernels name the node in their errors.
inline std::string label(const Node& node)
{
    return "node '" + node.name + "' (" + std::string(toString(node.op)) + ")";
}

// The CUDA kernels of this backend run f32 values; another element type is refused naming the node.
inline void requireF32(const Node& node, const NdArray& a)
{
    if (a.dtype() != DType::F32)
        throw Error(
            label(node) + ": the CUDA backend runs it on f32 values, an input is " + std::string(toString(a.dtype())));
}

inline constexpr int kThreads = 256;
inline unsigned blocksFor(std::int64_t n)
{
    const auto b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 1 ? 1 : (b > 1048576 ? 1048576 : b)); // kernels stride past the grid
}

// A grid-stride loop of `i` over [0, n) in a kernel.
#define PS_FOR_EACH(i, n)                                                                                              \
    for (auto i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                              \
         i += static_cast<long long>(gridDim.x) * blockDim.x)

// A shape (and strides over it) for kernels: rank at most kMaxRank.
inline constexpr int kMaxRank = 8;
struct Dims
{
    int rank = 0;
    long long size[kMaxRank] {};
    long long stride[kMaxRank] {}; // elements; 0 along a broadcast axis
};

// Row-major sizes and strides of `shape` (throws above kMaxRank).
[[nodiscard]] Dims dimsOf(const Shape& shape);
// `operand`'s element strides along the axes of `out` (0 where it is broadcast, NumPy rules).
[[nodiscard]] Dims stridesOver(const Shape& operand, const Shape& out);
// engine/op_rules.h's collapseAxes on a walk over `shape` by `operands` (strides over `shape`): all
// of them lose the same axes; flat indices reach the same elements.
void collapseDims(Dims& shape, std::initializer_list<Dims*> operands);

// The offset into an operand with strides `operand` of element `index` of `out`.
__device__ inline long long offsetOf(long long index, const Dims& out, const Dims& operand)
{
    long long offset = 0;
    for (int i = out.rank - 1; i >= 0; --i) {
        const long long coord = index % out.size[i];
        index /= out.size[i];
        offset += coord * operand.stride[i];
    }
    return offset;
}

// Objects of one kind per GPU (cuDNN handles, copy streams), lent for one use at a time (pipeline
// workers are new threads every step, and two virtual devices of one GPU work at once) and kept
// for the process (never destroyed: the driver may be gone before static destructors run).
template <typename T> class DevicePool
{
public:
    // A free one of `device`, else make(device).
    template <typename Make> T take(int device, Make make)
    {
        {
            const std::lock_guard lock(m_mutex);
            auto& free = m_free[device];
            if (!free.empty()) {
                const T t = free.back();
                free.pop_back();
                return t;
            }
        }
        return make(device);
    }
    void give(int device, T t)
    {
        const std::lock_guard lock(m_mutex);
        m_free[device].push_back(t);
    }

private:
    std::mutex m_mutex;
    std::map<int, std::vector<T>> m_free;
};

// Makes the GPU behind `allocator` (a CUDA memory resource) current for the calling thread.
void useDevice(Allocator& allocator);

// Row-major C = op(A) op(B) (+ beta C), `batch` matrices `stride*` elements apart, through cuBLAS
// (loaded by engine/cuda_libraries.h), accumulated and written in fp32. A and B are fp32 arrays
// (Fp32; Tf32: rounded to TF32 on the tensor cores) or bf16 arrays (Bf16, 2 bytes per element).
void gemm(GemmPrecision precision, bool transA, bool transB, int m, int n, int k, const void* a, int lda,
    long long strideA, const void* b, int ldb, long long strideB, float beta, float* c, int ldc, long long strideC,
    int batch);

// Row-major out (rows x n) = x (rows x k) w + bias (n) over every row, w (k x n), or (n x k) with
// transB, through cuBLASLt's bias epilogue (cuda_gemm_lt.cu). x and w are fp32 or, with Bf16, bf16
// arrays. Returns false, having done nothing, where cuBLASLt is missing, PS_CUBLASLT is "0", a size
// is outside its int range or it has no algorithm for the call (the caller runs GEMM and add apart).
// With `geluSum`: the GELU_AUX_BIAS epilogue, `out` = GELU (tanh form) of the sum, which goes to
// `geluSum` (rows x n); false also where n is not a multiple of 8 (cuBLASLt's rule for that array).
[[nodiscard]] bool gemmBiasLt(GemmPrecision precision, bool transB, std::int64_t rows, std::int64_t n, std::int64_t k,
    const void* x, const void* w, const float* bias, float* out, float* geluSum = nullptr);
// cuBLASLt found and PS_CUBLASLT not "0".
[[nodiscard]] bool cublasLtEnabled();

// A GEMM operand as ctx.gemm wants it: the fp32 array itself, or (Bf16) its bf16 copy, cast with
// kernel_math.h's rounding and kept alive by `copy` for the call.
struct GemmOperand
{
    NdArray copy;
    const void* base = nullptr;
    int elementBytes = 4;
    [[nodiscard]] const void* at(std::int64_t offset) const
    {
        return static_cast<const char*>(base) + offset * elementBytes;
    }
};
[[nodiscard]] GemmOperand gemmOperand(const NdArray& x, KernelContext& ctx, const Node& node);

// Conv through cuDNN (cuda_cudnn.cu) where it applies: cuDNN found, fp32 or TF32 GEMM
// precision, a 2-D window (3-D ones take the im2col path), pads equal on both sides, PS_CUDNN not "0". Return false,
// having done nothing, elsewhere (the caller takes the im2col path). Out, dx and dw are written, not accumulated.
struct ConvParams
{
    math::Window w;
    std::int64_t n, cin, cout, group;
    bool symmetricPads;
};
[[nodiscard]] bool cudnnConvForward(
    const Node& node, const ConvParams& p, const NdArray& x, const NdArray& weight, NdArray& out, KernelContext& ctx);
[[nodiscard]] bool cudnnConvBackward(const Node& node, const ConvParams& p, const NdArray& x, const NdArray& weight,
    const NdArray& dy, NdArray* dx, NdArray* dw, KernelContext& ctx);

// BatchNorm in training mode through cuDNN (cuda_cudnn.cu) where it applies: cuDNN's normalization
// entry points found, batch statistics (ctx.training), PS_CUDNN not "0", sizes within its int
// descriptors. `mean` and `rstd` (C) receive the batch statistics the backward reads (v.saved);
// the running statistics v.in[3], v.in[4] are updated in place. Return false, having done nothing,
// elsewhere (the engine's kernels serve). Backward fills g.gradIn where g.needGrad asks.
struct BatchNormParams
{
    std::int64_t n, c, spatial; // (N, C, product of the other dims)
    double epsilon, momentum; // ONNX's: running = momentum * running + (1 - momentum) * batch
};
[[nodiscard]] bool cudnnBatchNormForward(const Node& node, const BatchNormParams& p, NodeValues& v, NdArray& out,
    NdArray& mean, NdArray& rstd, KernelContext& ctx);
[[nodiscard]] bool cudnnBatchNormBackward(const Node& node, const BatchNormParams& p, const NodeValues& v,
    const NdArray& dy, BackwardArgs& g, KernelContext& ctx);

// The op kernels, one registration per file (cuda_math_kernels.cu, cuda_nn_kernels.cu,
// cuda_layout_kernels.cu, cuda_pointwise_kernels.cu, cuda_conv_kernels.cu, cuda_index_kernels.cu,
// cuda_gather_kernels.cu and the four below).
void registerCudaMathKernels(KernelTable& table);
// MatMul and the MatMul + bias GEMM (cuda_matmul_kernels.cu).
void registerCudaMatmulKernels(KernelTable& table);
void registerCudaNnKernels(KernelTable& table);
// The fused chains of engine/fusion.h (cuda_fused_kernels.cu).
void registerCudaFusedKernels(KernelTable& table);
void registerCudaLayoutKernels(KernelTable& table);
void registerCudaPointwiseKernels(KernelTable& table);
void registerCudaConvKernels(KernelTable& table);
void registerCudaPoolKernels(KernelTable& table);
void registerCudaIndexKernels(KernelTable& table);
// GatherElements, GatherND.
void registerCudaGatherKernels(KernelTable& table);
// Max, Min, the comparisons and logic, Not, IsNaN (cuda_compare_kernels.cu).
void registerCudaCompareKernels(KernelTable& table);
// ReduceSum, ReduceMax, CumSum, TopK (cuda_scan_kernels.cu).
void registerCudaScanKernels(KernelTable& table);
// ScatterND, ScatterElements (cuda_scatter_kernels.cu).
void registerCudaScatterKernels(KernelTable& table);
// Einsum (cuda_einsum_kernels.cu).
void registerCudaEinsumKernels(KernelTable& table);
// GroupNorm (cuda_group_norm_kernels.cu).
void registerCudaGroupNormKernels(KernelTable& table);

// a's and b's shapes broadcast together (NumPy rules), errors naming `node`.
[[nodiscard]] Shape broadcastShapeOf(const Shape& a, const Shape& b, const Node& node);
// a + b with NumPy broadcasting (the Add kernel's), errors naming `node`.
[[nodiscard]] NdArray addArrays(const NdArray& a, const NdArray& b, const Node& node, KernelContext& ctx);

// Elementwise helpers the backend's updates share with the op kernels.
void launchAdd(const float* a, const float* b, float* out, std::int64_t n);
void launchAccumulate(float* dst, const float* src, std::int64_t n);
void launchFill(float* dst, float value, std::int64_t n);
// The optimizer updates (cuda_optimizer_kernels.cu): AdamW and SGD on one parameter, and AdamW
// over all of `slots` in one launch (their table copied to the GPU first).
void launchAdamW(float* w, const float* g, float* m, float* v, const math::AdamWCoefficients& c, std::int64_t n);
void launchAdamWAll(std::span<const UpdateSlot> slots, const math::AdamWCoefficients& c);
void launchSgd(float* w, const float* g, float* m, const math::SgdCoefficients& c, std::int64_t n);
// `src` broadcast (NumPy rules) to `to`, times `scale`.
[[nodiscard]] NdArray broadcastTo(const NdArray& src, const Shape& to, float scale, Allocator& allocator);
// Sums `grad` (of `from`'s shape) over the axes where `to` is 1 or missing (broadcast gradients).
[[nodiscard]] NdArray reduceTo(const NdArray& grad, const Shape& to, Allocator& allocator);

// Column sums in engine/column_math.h's two passes: out[col] = the sum over rows of value(row, col)
// for a functor with a PS_HOST_DEVICE operator()(row, col). Pass 1 writes chunk partials into a
// workspace from `allocator`, pass 2 (launchSumChunkPartials) sums them.
template <typename Value>
__global__ void columnPartialsKernel(
    Value value, float* partials, std::int64_t rows, std::int64_t cols, math::ColumnChunks k)
{
    const auto total = k.chunks * cols;
    for (auto t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
         t += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
        partials[t] = math::chunkPartial(value, rows, t % cols, t / cols, k);
}
void launchSumChunkPartials(const float* partials, float* out, std::int64_t cols, std::int64_t chunks);
template <typename Value>
void columnSums(const Value& value, std::int64_t rows, std::int64_t cols, float* out, Allocator& allocator)
{
    if (cols <= 0)
        return;
    const auto k = math::columnChunks(rows, cols);
    if (k.chunks == 0) {
        launchFill(out, 0.0F, cols);
        return;
    }
    auto partials = NdArray::empty(allocator, { k.chunks * cols });
    columnPartialsKernel<<<blocksFor(k.chunks * cols), kThreads>>>(value, f32(partials), rows, cols, k);
    launchSumChunkPartials(f32(partials), out, cols, k.chunks);
}

} // namespace ps::engine::cuda
