// A GEMM with cuBLASLt's bias epilogue: the MatMul + bias chains of engine/fusion.h in one call
// (Backend::gemmBias), and its GELU_AUX_BIAS epilogue for those a tanh Gelu ends (Backend::gemmBiasGelu:
// the sum to an auxiliary array, the GELU of it to the output). cuBLASLt is loaded by name through
// engine/cuda_libraries.h like cuBLAS; its algorithm is the one its heuristics rank first (cublasLtMatmul's implicit
// query, given a 4 MiB workspace per GPU, made once with cudaMalloc outside the accounted allocator as cuBLAS's own
// workspace is). Every launch of the backend goes to the GPU's legacy default stream, so the
// workspace is never used by two GEMMs at once. cuBLASLt's heuristics may pick another kernel than
// cuBLAS's GEMM (another summation order), so the results agree with MatMul then BiasAdd to fp32
// rounding, not bit for bit. PS_CUBLASLT=0 runs the chains as cuBLAS GEMM + the engine's add.
#include "cuda/cuda_common.cuh"
#include "cuda_libraries.h"

#include <cublasLt.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string_view>

namespace ps::engine::cuda {
namespace {

    struct CublasLt
    {
        decltype(&cublasLtCreate) create = nullptr;
        decltype(&cublasLtMatmulDescCreate) descCreate = nullptr;
        decltype(&cublasLtMatmulDescDestroy) descDestroy = nullptr;
        decltype(&cublasLtMatmulDescSetAttribute) descSet = nullptr;
        decltype(&cublasLtMatrixLayoutCreate) layoutCreate = nullptr;
        decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy = nullptr;
        decltype(&cublasLtMatmul) matmul = nullptr;
    };

    template <typename F> void resolve(F& fn, const char* name)
    {
        fn = reinterpret_cast<F>(cudaSymbol("cublasLt", name));
    }

    // nullptr where cuBLASLt or one of its symbols is missing (then MatMul and the add run apart).
    const CublasLt* cublasLt()
    {
        static const std::unique_ptr<CublasLt> api = []() -> std::unique_ptr<CublasLt> {
            try {
                auto c = std::make_unique<CublasLt>();
                resolve(c->create, "cublasLtCreate");
                resolve(c->descCreate, "cublasLtMatmulDescCreate");
                resolve(c->descDestroy, "cublasLtMatmulDescDestroy");
                resolve(c->descSet, "cublasLtMatmulDescSetAttribute");
                resolve(c->layoutCreate, "cublasLtMatrixLayoutCreate");
                resolve(c->layoutDestroy, "cublasLtMatrixLayoutDestroy");
                resolve(c->matmul, "cublasLtMatmul");
                return c;
            } catch (const Error&) {
                return nullptr;
            }
        }();
        return api.get();
    }

    constexpr std::size_t kWorkspaceBytes = std::size_t { 4 } << 20;

    struct LtDevice
    {
        cublasLtHandle_t handle = nullptr;
        void* workspace = nullptr;
    };

    // One handle and workspace per GPU, made on first use and kept for the process.
    const LtDevice& ltDevice(int device)
    {
        static std::mutex mutex;
        static std::map<int, LtDevice> devices;
        const std::lock_guard lock(mutex);
        auto& d = devices[device];
        if (d.handle == nullptr) { // both made, or neither kept (a later call tries again)
            cublasLtHandle_t handle = nullptr;
            if (const auto status = cublasLt()->create(&handle); status != CUBLAS_STATUS_SUCCESS)
                throw Error("cuda:" + std::to_string(device) + ": cublasLtCreate failed (status "
                    + std::to_string(static_cast<int>(status)) + ")");
            void* workspace = nullptr;
            check(cudaMalloc(&workspace, kWorkspaceBytes), "cuda:" + std::to_string(device) + ": cuBLASLt workspace");
            d.workspace = workspace;
            d.handle = handle; // a failed cudaMalloc leaks this handle once: the process keeps it
        }
        return d;
    }

    void ltCheck(cublasStatus_t status, const char* what)
    {
        if (status != CUBLAS_STATUS_SUCCESS)
            throw Error(
                std::string("cuBLASLt ") + what + " failed (status " + std::to_string(static_cast<int>(status)) + ")");
    }

    // Descriptors freed however the call ends.
    struct LtCall
    {
        const CublasLt& api;
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
        ~LtCall()
        {
            for (auto* layout : { a, b, d }) {
                if (layout != nullptr)
                    (void)api.layoutDestroy(layout);
            }
            if (desc != nullptr)
                (void)api.descDestroy(desc);
        }
    };

    std::atomic<std::uint64_t>& epilogueCalls()
    {
        static std::atomic<std::uint64_t> calls { 0 };
        return calls;
    }

    std::atomic<std::uint64_t>& geluEpilogueCalls()
    {
        static std::atomic<std::uint64_t> calls { 0 };
        return calls;
    }

} // namespace

std::uint64_t gemmBiasEpilogueCalls()
{
    return epilogueCalls().load(std::memory_order_relaxed);
}

std::uint64_t gemmBiasGeluEpilogueCalls()
{
    return geluEpilogueCalls().load(std::memory_order_relaxed);
}

bool cublasLtEnabled()
{
    const char* env = std::getenv("PS_CUBLASLT");
    return (env == nullptr || std::string_view(env) != "0") && cublasLt() != nullptr;
}

bool gemmBiasLt(GemmPrecision precision, bool transB, std::int64_t rows, std::int64_t n, std::int64_t k, const void* x,
    const void* w, const float* bias, float* out, float* geluSum)
{
    constexpr std::int64_t kIntMax = 2147483647;
    if (!cublasLtEnabled() || rows <= 0 || n <= 0 || k <= 0 || rows > kIntMax || n > kIntMax || k > kIntMax
        || (geluSum != nullptr && n % 8 != 0))
        return false;
    int device = 0;
    check(cudaGetDevice(&device), "cuda gemm + bias");
    const auto& api = *cublasLt();
    const auto& lt = ltDevice(device);
    const bool bf16 = precision == GemmPrecision::Bf16;
    const auto compute = precision == GemmPrecision::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    const auto operandType = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    LtCall call { api };
    ltCheck(api.descCreate(&call.desc, compute, CUDA_R_32F), "matmul descriptor");
    // Row-major out (rows x n) = x (rows x k) op(w) is column-major out^T = op(w)^T x^T: w is the
    // first operand, transposed when the MatMul's w is (n x k) (trans_b), and the bias runs down
    // out^T's rows, as the epilogue adds it.
    const cublasOperation_t opA = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opB = CUBLAS_OP_N;
    const cublasLtEpilogue_t epilogue = geluSum != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_BIAS;
    ltCheck(api.descSet(call.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof opA), "TRANSA");
    ltCheck(api.descSet(call.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof opB), "TRANSB");
    ltCheck(api.descSet(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue), "EPILOGUE");
    ltCheck(api.descSet(call.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias), "BIAS_POINTER");
    if (geluSum != nullptr) { // the GELU's input, column-major n x rows like the output
        const auto auxLd = static_cast<std::int64_t>(n);
        ltCheck(api.descSet(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &geluSum, sizeof geluSum),
            "EPILOGUE_AUX_POINTER");
        ltCheck(api.descSet(call.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &auxLd, sizeof auxLd), "EPILOGUE_AUX_LD");
    }
    ltCheck(transB
            ? api.layoutCreate(&call.a, operandType, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(n), k)
            : api.layoutCreate(&call.a, operandType, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(k), n),
        "layout of w");
    ltCheck(api.layoutCreate(&call.b, operandType, static_cast<std::uint64_t>(k), static_cast<std::uint64_t>(rows), k),
        "layout of x");
    ltCheck(api.layoutCreate(&call.d, CUDA_R_32F, static_cast<std::uint64_t>(n), static_cast<std::uint64_t>(rows), n),
        "layout of the output");
    const float alpha = 1.0F;
    const float beta = 0.0F;
    const auto status = api.matmul(lt.handle, call.desc, &alpha, w, call.a, x, call.b, &beta, out, call.d, out, call.d,
        nullptr, lt.workspace, kWorkspaceBytes, nullptr);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED)
        return false; // no algorithm for these sizes: the caller runs the GEMM and the add apart
    if (status != CUBLAS_STATUS_SUCCESS)
        throw Error("cuda:" + std::to_string(device) + ": cuBLASLt GEMM + bias" + (geluSum != nullptr ? " + GELU" : "")
            + " (" + std::to_string(rows) + "x" + std::to_string(n) + "x" + std::to_string(k) + ") failed with status "
            + std::to_string(static_cast<int>(status)));
    (geluSum != nullptr ? geluEpilogueCalls() : epilogueCalls()).fetch_add(1, std::memory_order_relaxed);
    return true;
}

} // namespace ps::engine::cuda
