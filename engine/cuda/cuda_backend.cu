// The CUDA backend: GPU memory as a MemoryResource (host copies on per-thread copy streams),
// cuBLAS GEMMs through the loader, the elementwise updates (gradient sums; SGD and AdamW in
// cuda_optimizer_kernels.cu), peer access between GPUs, and the kernel table.
#include "cuda/cuda_backend.h"
#include "cuda/cuda_common.cuh"
#include "cuda/cuda_probe.h"
#include "cuda_libraries.h"
#include "kernel_math.h"

#include <cublas_v2.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace ps::engine::cuda {

void check(cudaError_t err, const std::string& what)
{
    if (err != cudaSuccess)
        throw Error(what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

void checkLaunch(const std::string& what)
{
    check(cudaGetLastError(), what);
}

namespace {

    // Copy streams of a GPU (non-blocking: they do not wait for the legacy default stream by
    // themselves), each with the event that orders it after the default stream's work; lent for
    // one copy at a time (pipeline workers are new threads every step, so per-thread streams would
    // pile up) and kept for the process.
    struct CopyStream
    {
        cudaStream_t stream = nullptr;
        cudaEvent_t issued = nullptr;
    };

    DevicePool<CopyStream>& copyStreams()
    {
        static auto* streams = new DevicePool<CopyStream>(); // kept for the process
        return *streams;
    }

    CopyStream makeCopyStream(int /*device*/) // on the current device
    {
        CopyStream s;
        check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        check(cudaEventCreateWithFlags(&s.issued, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        return s;
    }

    // True for memory of the host (pinned, registered or pageable).
    bool onHost(const void* p)
    {
        cudaPointerAttributes a {};
        if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
            (void)cudaGetLastError(); // unregistered host memory on old drivers
            return true;
        }
        return a.type == cudaMemoryTypeHost || a.type == cudaMemoryTypeUnregistered;
    }

    // One GPU's memory. Blocks come from cudaMalloc (256-byte aligned) and go back through the
    // allocator's cache; copies use unified addressing (cudaMemcpyDefault), so host, this GPU and
    // a peer are all reached the same way.
    class CudaMemory final : public MemoryResource
    {
    public:
        explicit CudaMemory(int device)
            : m_device(device)
            , m_name("cuda:" + std::to_string(device))
        {
        }
        [[nodiscard]] std::string_view name() const override
        {
            return m_name;
        }
        [[nodiscard]] bool hostAccessible() const override
        {
            return false;
        }
        [[nodiscard]] std::byte* allocate(std::size_t bytes) override
        {
            check(cudaSetDevice(m_device), m_name);
            void* p = nullptr;
            const auto err = cudaMalloc(&p, bytes);
            if (err == cudaErrorMemoryAllocation) {
                (void)cudaGetLastError(); // clears the sticky-free error state
                return nullptr; // the allocator reports out of memory, naming the node
            }
            check(err, m_name + ": cudaMalloc");
            return static_cast<std::byte*>(p);
        }
        void release(std::byte* block, std::size_t /*bytes*/) override
        {
            (void)cudaSetDevice(m_device);
            (void)cudaFree(block); // at exit the context may be gone: nothing to report then
        }
        void zero(std::byte* block, std::size_t bytes) override
        {
            check(cudaSetDevice(m_device), m_name);
            check(cudaMemset(block, 0, bytes), m_name + ": cudaMemset");
        }
        // Every freed block stays cached, as in PyTorch's caching allocator: cudaFree waits for the
        // whole device, and a step cycles far more than the host's 4 GiB through the cache (GPT-2
        // small, seq 1024, micro-batch 8: tens of GiB). An allocation that finds the GPU full
        // returns the cache first (Allocator::State::trim) and tries again.
        [[nodiscard]] std::size_t cacheLimitBytes() const override
        {
            return std::numeric_limits<std::size_t>::max();
        }
        // A copy between this GPU and host memory (a swap, a staging copy) runs on a copy stream,
        // after everything issued so far on the device's default stream (an event between them),
        // and returns when it is done: the compute the default stream runs meanwhile overlaps it,
        // where a cudaMemcpy would hold the default stream. Copies between device memory (this GPU
        // or a peer) keep cudaMemcpy, ordered after both devices' work.
        void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override
        {
            if (bytes == 0)
                return;
            check(cudaSetDevice(m_device), m_name);
            if (!onHost(dst) && !onHost(src)) {
                check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), m_name + ": cudaMemcpy");
                return;
            }
            const auto s = copyStreams().take(m_device, makeCopyStream);
            const auto give = [&] { copyStreams().give(m_device, s); };
            try {
                check(cudaEventRecord(s.issued, nullptr), m_name + ": cudaEventRecord");
                check(cudaStreamWaitEvent(s.stream, s.issued, 0), m_name + ": cudaStreamWaitEvent");
                check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s.stream), m_name + ": cudaMemcpyAsync");
                check(cudaStreamSynchronize(s.stream), m_name + ": copy stream");
            } catch (...) {
                give();
                throw;
            }
            give();
        }
        [[nodiscard]] int device() const
        {
            return m_device;
        }

    private:
        int m_device;
        std::string m_name;
    };

    // Page-locked host memory (cudaMallocHost): where swapped activations wait, so the copies to
    // and from the GPU run at the link's bandwidth instead of through a staging buffer.
    class PinnedHostMemory final : public MemoryResource
    {
    public:
        [[nodiscard]] std::string_view name() const override
        {
            return "pinned host";
        }
        [[nodiscard]] bool hostAccessible() const override
        {
            return true;
        }
        [[nodiscard]] std::byte* allocate(std::size_t bytes) override
        {
            void* p = nullptr;
            if (cudaMallocHost(&p, bytes) != cudaSuccess) {
                (void)cudaGetLastError();
                return nullptr; // reported as out of host memory, naming the node
            }
            return static_cast<std::byte*>(p);
        }
        void release(std::byte* block, std::size_t /*bytes*/) override
        {
            (void)cudaFreeHost(block);
        }
        void zero(std::byte* block, std::size_t bytes) override
        {
            std::memset(block, 0, bytes);
        }
        void copy(std::byte* dst, const std::byte* src, std::size_t bytes) override
        {
            if (bytes > 0)
                check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "pinned host: cudaMemcpy");
        }
    };

    // cuBLAS entry points, resolved by name from the library the loader found.
    struct Cublas
    {
        decltype(&cublasCreate_v2) create = nullptr;
        decltype(&cublasDestroy_v2) destroy = nullptr;
        decltype(&cublasSgemmStridedBatched) sgemmStridedBatched = nullptr;
        decltype(&cublasSetMathMode) setMathMode = nullptr;
        // Declared here: the header overloads the name for C++ (the C symbol is this one).
        using GemmStridedBatchedEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
            int, const void*, const void*, cudaDataType, int, long long int, const void*, cudaDataType, int,
            long long int, const void*, void*, cudaDataType, int, long long int, int, cublasComputeType_t,
            cublasGemmAlgo_t);
        GemmStridedBatchedEx gemmStridedBatchedEx = nullptr;
    };

    const Cublas& cublas()
    {
        static const Cublas api = [] {
            Cublas c;
            c.create = reinterpret_cast<decltype(c.create)>(cudaSymbol("cublas", "cublasCreate_v2"));
            c.destroy = reinterpret_cast<decltype(c.destroy)>(cudaSymbol("cublas", "cublasDestroy_v2"));
            c.sgemmStridedBatched =
                reinterpret_cast<decltype(c.sgemmStridedBatched)>(cudaSymbol("cublas", "cublasSgemmStridedBatched"));
            c.setMathMode = reinterpret_cast<decltype(c.setMathMode)>(cudaSymbol("cublas", "cublasSetMathMode"));
            c.gemmStridedBatchedEx =
                reinterpret_cast<Cublas::GemmStridedBatchedEx>(cudaSymbol("cublas", "cublasGemmStridedBatchedEx"));
            return c;
        }();
        return api;
    }

    // cuBLAS handles per GPU, lent for one call at a time: pipeline workers are new threads each
    // step, and two virtual devices of one GPU (cuda:0x2) run GEMMs at once, each needing its own.
    class HandlePool
    {
    public:
        explicit HandlePool(int device)
            : m_device(device)
        {
        }
        ~HandlePool()
        {
            if (cudaSetDevice(m_device) != cudaSuccess)
                return;
            for (auto* h : m_free)
                (void)cublas().destroy(h);
        }
        HandlePool(const HandlePool&) = delete;
        HandlePool& operator=(const HandlePool&) = delete;

        cublasHandle_t take()
        {
            {
                const std::lock_guard lock(m_mutex);
                if (!m_free.empty()) {
                    auto* h = m_free.back();
                    m_free.pop_back();
                    return h;
                }
            }
            cublasHandle_t h = nullptr;
            if (const auto status = cublas().create(&h); status != CUBLAS_STATUS_SUCCESS)
                throw Error("cuda:" + std::to_string(m_device) + ": cublasCreate failed (status "
                    + std::to_string(static_cast<int>(status)) + ")");
            return h; // its math mode is set for each call (fp32 or TF32)
        }
        void give(cublasHandle_t h)
        {
            const std::lock_guard lock(m_mutex);
            m_free.push_back(h);
        }

    private:
        int m_device;
        std::mutex m_mutex;
        std::vector<cublasHandle_t> m_free;
    };

    HandlePool& handlePool(int device)
    {
        static std::mutex mutex;
        static std::map<int, std::unique_ptr<HandlePool>> pools;
        const std::lock_guard lock(mutex);
        auto& p = pools[device];
        if (!p)
            p = std::make_unique<HandlePool>(device);
        return *p;
    }

    __global__ void addKernel(const float* a, const float* b, float* out, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            out[i] = a[i] + b[i];
    }

    __global__ void fillKernel(float* dst, float value, std::int64_t n)
    {
        for (auto i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
             i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
            dst[i] = value;
    }

    math::AdamWCoefficients coefficients(const AdamWUpdate& u)
    {
        return math::adamwCoefficients(u.lr, u.weightDecay, u.beta1, u.beta2, u.eps, u.step, u.gradScale);
    }

    void requireSame(const NdArray& a, const NdArray& b, const char* what)
    {
        if (a.numel() != b.numel())
            throw Error(std::string("cuda backend: ") + what + " of " + formatShape(a.shape()) + " and "
                + formatShape(b.shape()));
    }

    // Every op kernel of the backend, one registration per kernel file.
    void registerKernels(KernelTable& table)
    {
        for (auto* add : { registerCudaMathKernels, registerCudaMatmulKernels, registerCudaNnKernels,
                 registerCudaLayoutKernels, registerCudaPointwiseKernels, registerCudaConvKernels,
                 registerCudaPoolKernels, registerCudaIndexKernels, registerCudaGatherKernels,
                 registerCudaCompareKernels, registerCudaScanKernels, registerCudaScatterKernels,
                 registerCudaEinsumKernels, registerCudaGroupNormKernels, registerCudaFusedKernels })
            add(table);
    }

    class CudaBackend final : public Backend
    {
    public:
        explicit CudaBackend(int device)
            : m_device(device)
            , m_memory(std::make_shared<CudaMemory>(device))
            , m_name("cuda")
        {
            registerKernels(m_kernels);
        }
        [[nodiscard]] std::string_view name() const override
        {
            return m_name;
        }
        [[nodiscard]] const KernelTable& kernels() const override
        {
            return m_kernels;
        }
        [[nodiscard]] std::shared_ptr<MemoryResource> memory() const override
        {
            return m_memory;
        }
        [[nodiscard]] std::shared_ptr<MemoryResource> hostStaging() const override
        {
            static const auto pinned = std::make_shared<PinnedHostMemory>();
            return pinned;
        }
        [[nodiscard]] NdArray zeros(Allocator& allocator, const Shape& shape, DType dtype) const override
        {
            return NdArray::zeros(allocator, shape, dtype);
        }
        [[nodiscard]] NdArray fromHost(
            Allocator& allocator, const Shape& shape, DType dtype, std::span<const std::byte> bytes) const override
        {
            return NdArray::fromBytes(allocator, shape, dtype, bytes);
        }
        [[nodiscard]] std::vector<std::byte> toHost(const NdArray& array) const override
        {
            return array.toBytes();
        }
        [[nodiscard]] NdArray copyTo(
            const NdArray& array, const Backend& /*target*/, Allocator& allocator) const override
        {
            return array.copyTo(allocator);
        }
        // The compute issued so far (the legacy default stream), not the copy streams' swaps in flight.
        void synchronize() const override
        {
            select();
            check(cudaStreamSynchronize(nullptr), "cuda:" + std::to_string(m_device) + ": synchronize");
        }
        void accumulate(NdArray& dst, const NdArray& src) const override
        {
            requireSame(dst, src, "accumulate");
            select();
            launchAccumulate(f32(dst), f32(src), dst.numel());
        }
        [[nodiscard]] NdArray add(const NdArray& a, const NdArray& b, Allocator& allocator) const override
        {
            requireSame(a, b, "add");
            select();
            auto out = NdArray::empty(allocator, a.shape());
            launchAdd(f32(a), f32(b), f32(out), a.numel());
            return out;
        }
        void fill(NdArray& dst, float value) const override
        {
            select();
            launchFill(f32(dst), value, dst.numel());
        }
        void adamw(NdArray& param, const NdArray& grad, NdArray& m, NdArray& v, const AdamWUpdate& u) const override
        {
            requireSame(param, grad, "adamw");
            requireSame(param, m, "adamw");
            requireSame(param, v, "adamw");
            select();
            launchAdamW(f32(param), f32(grad), f32(m), f32(v), coefficients(u), param.numel());
        }
        // One launch for all of `slots` (cuda_optimizer_kernels.cu).
        void adamwAll(std::span<const AdamWSlot> slots, const AdamWUpdate& u) const override
        {
            std::vector<UpdateSlot> table;
            table.reserve(slots.size());
            for (const auto& s : slots) {
                requireSame(*s.param, *s.grad, "adamw");
                requireSame(*s.param, *s.m, "adamw");
                requireSame(*s.param, *s.v, "adamw");
                table.push_back({ f32(*s.param), f32(*s.grad), f32(*s.m), f32(*s.v), s.param->numel() });
            }
            select();
            launchAdamWAll(table, coefficients(u));
        }
        void sgd(NdArray& param, const NdArray& grad, NdArray& momentum, const SgdUpdate& u) const override
        {
            requireSame(param, grad, "sgd");
            requireSame(param, momentum, "sgd");
            select();
            launchSgd(f32(param), f32(grad), f32(momentum),
                { u.lr, u.momentum, u.weightDecay, u.gradScale, u.firstStep }, param.numel());
        }

    private:
        void select() const
        {
            check(cudaSetDevice(m_device), "cuda:" + std::to_string(m_device));
        }

        int m_device;
        std::shared_ptr<CudaMemory> m_memory;
        std::string m_name;
        KernelTable m_kernels;
    };

} // namespace

void useDevice(Allocator& allocator)
{
    const auto* memory = dynamic_cast<const CudaMemory*>(&allocator.memory());
    if (memory == nullptr)
        throw Error("internal: a CUDA kernel was given an allocator of " + allocator.device() + "'s "
            + std::string(allocator.memory().name()) + " memory");
    check(cudaSetDevice(memory->device()), allocator.device());
}

void gemm(GemmPrecision precision, bool transA, bool transB, int m, int n, int k, const void* a, int lda,
    long long strideA, const void* b, int ldb, long long strideB, float beta, float* c, int ldc, long long strideC,
    int batch)
{
    if (m == 0 || n == 0 || batch == 0)
        return;
    int device = 0;
    check(cudaGetDevice(&device), "cuda gemm");
    const float alpha = 1.0F;
    auto& pool = handlePool(device);
    auto* handle = pool.take();
    const auto opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
    const auto opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    // Row-major C (m x n) is column-major C^T = op(B)^T op(A)^T: swap the operands.
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    if (precision == GemmPrecision::Bf16) {
        (void)cublas().setMathMode(handle, CUBLAS_DEFAULT_MATH);
        status = cublas().gemmStridedBatchedEx(handle, opB, opA, n, m, k, &alpha, b, CUDA_R_16BF, ldb, strideB, a,
            CUDA_R_16BF, lda, strideA, &beta, c, CUDA_R_32F, ldc, strideC, batch, CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT);
    } else {
        (void)cublas().setMathMode(
            handle, precision == GemmPrecision::Tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
        status = cublas().sgemmStridedBatched(handle, opB, opA, n, m, k, &alpha, static_cast<const float*>(b), ldb,
            strideB, static_cast<const float*>(a), lda, strideA, &beta, c, ldc, strideC, batch);
    }
    pool.give(handle);
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error("cuda:" + std::to_string(device) + ": cuBLAS GEMM (" + std::to_string(m) + "x" + std::to_string(n)
            + "x" + std::to_string(k) + ", batch " + std::to_string(batch) + ") failed with status "
            + std::to_string(static_cast<int>(status)));
}

void launchAdd(const float* a, const float* b, float* out, std::int64_t n)
{
    if (n > 0)
        addKernel<<<blocksFor(n), kThreads>>>(a, b, out, n);
    checkLaunch("cuda add");
}

void launchAccumulate(float* dst, const float* src, std::int64_t n)
{
    launchAdd(dst, src, dst, n);
}

void launchFill(float* dst, float value, std::int64_t n)
{
    if (n > 0)
        fillKernel<<<blocksFor(n), kThreads>>>(dst, value, n);
    checkLaunch("cuda fill");
}

namespace {

    // Lets `device` read and write every other GPU it can reach directly (NVLink or PCIe P2P), so the
    // pipeline's GPU-to-GPU sends are direct peer copies; where it cannot (or enabling fails),
    // cudaMemcpy stages them through the host. Both directions are enabled as each GPU's backend is made.
    void enablePeerAccess(int device, int count)
    {
        for (int peer = 0; peer < count; ++peer) {
            int can = 0;
            if (peer != device && cudaDeviceCanAccessPeer(&can, device, peer) == cudaSuccess && can != 0
                && cudaSetDevice(device) == cudaSuccess)
                (void)cudaDeviceEnablePeerAccess(peer, 0); // an optimisation: without it cudaMemcpy stages
            (void)cudaGetLastError(); // already enabled, too many peers, ...: nothing left set
        }
    }

} // namespace

std::vector<OpType> cudaKernelOps()
{
    KernelTable table; // registration launches nothing: no GPU needed
    registerKernels(table);
    std::vector<OpType> ops;
    for (std::size_t op = 0; op <= static_cast<std::size_t>(OpType::Opaque); ++op) {
        if (table.find(static_cast<OpType>(op)) != nullptr)
            ops.push_back(static_cast<OpType>(op));
    }
    return ops;
}

const Backend& cudaBackend(int device)
{
    static std::mutex mutex;
    static std::map<int, std::unique_ptr<CudaBackend>> backends;
    const std::lock_guard lock(mutex);
    if (const auto it = backends.find(device); it != backends.end())
        return *it->second;
    const auto probe = probeGpus();
    if (probe.devices.empty())
        throw Error("cuda:" + std::to_string(device) + ": " + probe.status);
    if (device < 0 || static_cast<std::size_t>(device) >= probe.devices.size())
        throw Error("cuda:" + std::to_string(device) + ": this machine has " + std::to_string(probe.devices.size())
            + " GPU(s) (cuda:0 to cuda:" + std::to_string(probe.devices.size() - 1) + ")");
    (void)cublas(); // a missing cuBLAS is reported now, not at the first GEMM
    enablePeerAccess(device, static_cast<int>(probe.devices.size()));
    auto& b = backends[device];
    b = std::make_unique<CudaBackend>(device);
    return *b;
}

} // namespace ps::engine::cuda
