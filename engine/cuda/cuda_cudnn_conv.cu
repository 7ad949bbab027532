// Conv through cuDNN (loaded by name through engine/cuda_libraries.h, like cuBLAS): forward, data
// and filter gradients with the algorithms cuDNN's heuristics rank first, their workspaces taken
// from the engine's accounted allocator. Used where it applies: cuDNN found, fp32 (FMA math, no
// TF32, so the CPU's numbers hold) or TF32 GEMM precision, pads equal on both sides of each dim,
// and PS_CUDNN not "0", a non-empty batch and sizes within cuDNN's int descriptors, and an algorithm
// cuDNN offers. Elsewhere the callers in cuda_conv_kernels.cu take the im2col + cuBLAS path, which
// the CPU tests cover; the GPU self-test compares both with the CPU kernel. cuDNN's ranking may
// pick nondeterministic gradient algorithms (atomics): its sums need not come in the CPU's order.
#include "cuda/cuda_common.cuh"
#include "cuda_libraries.h"

#include <cudnn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace ps::engine::cuda {
namespace {

    // The cuDNN entry points used, resolved by name.
    struct Cudnn
    {
        decltype(&cudnnCreate) create = nullptr;
        decltype(&cudnnDestroy) destroy = nullptr;
        decltype(&cudnnGetErrorString) errorString = nullptr;
        decltype(&cudnnCreateTensorDescriptor) createTensor = nullptr;
        decltype(&cudnnSetTensor4dDescriptor) setTensor = nullptr;
        decltype(&cudnnDestroyTensorDescriptor) destroyTensor = nullptr;
        decltype(&cudnnCreateFilterDescriptor) createFilter = nullptr;
        decltype(&cudnnSetFilter4dDescriptor) setFilter = nullptr;
        decltype(&cudnnDestroyFilterDescriptor) destroyFilter = nullptr;
        decltype(&cudnnCreateConvolutionDescriptor) createConv = nullptr;
        decltype(&cudnnSetConvolution2dDescriptor) setConv = nullptr;
        decltype(&cudnnSetConvolutionGroupCount) setGroups = nullptr;
        decltype(&cudnnSetConvolutionMathType) setMath = nullptr;
        decltype(&cudnnDestroyConvolutionDescriptor) destroyConv = nullptr;
        decltype(&cudnnGetConvolutionForwardAlgorithm_v7) forwardAlgos = nullptr;
        decltype(&cudnnGetConvolutionForwardWorkspaceSize) forwardWorkspace = nullptr;
        decltype(&cudnnConvolutionForward) forward = nullptr;
        decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) dataAlgos = nullptr;
        decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) dataWorkspace = nullptr;
        decltype(&cudnnConvolutionBackwardData) backwardData = nullptr;
        decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) filterAlgos = nullptr;
        decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) filterWorkspace = nullptr;
        decltype(&cudnnConvolutionBackwardFilter) backwardFilter = nullptr;
    };

    template <typename F> void resolve(F& fn, const char* name)
    {
        fn = reinterpret_cast<F>(cudaSymbol("cudnn", name));
    }

    // nullptr where cuDNN or one of its symbols is missing (then the im2col path serves).
    const Cudnn* cudnn()
    {
        static const std::unique_ptr<Cudnn> api = []() -> std::unique_ptr<Cudnn> {
            try {
                auto c = std::make_unique<Cudnn>();
                resolve(c->create, "cudnnCreate");
                resolve(c->destroy, "cudnnDestroy");
                resolve(c->errorString, "cudnnGetErrorString");
                resolve(c->createTensor, "cudnnCreateTensorDescriptor");
                resolve(c->setTensor, "cudnnSetTensor4dDescriptor");
                resolve(c->destroyTensor, "cudnnDestroyTensorDescriptor");
                resolve(c->createFilter, "cudnnCreateFilterDescriptor");
                resolve(c->setFilter, "cudnnSetFilter4dDescriptor");
                resolve(c->destroyFilter, "cudnnDestroyFilterDescriptor");
                resolve(c->createConv, "cudnnCreateConvolutionDescriptor");
                resolve(c->setConv, "cudnnSetConvolution2dDescriptor");
                resolve(c->setGroups, "cudnnSetConvolutionGroupCount");
                resolve(c->setMath, "cudnnSetConvolutionMathType");
                resolve(c->destroyConv, "cudnnDestroyConvolutionDescriptor");
                resolve(c->forwardAlgos, "cudnnGetConvolutionForwardAlgorithm_v7");
                resolve(c->forwardWorkspace, "cudnnGetConvolutionForwardWorkspaceSize");
                resolve(c->forward, "cudnnConvolutionForward");
                resolve(c->dataAlgos, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
                resolve(c->dataWorkspace, "cudnnGetConvolutionBackwardDataWorkspaceSize");
                resolve(c->backwardData, "cudnnConvolutionBackwardData");
                resolve(c->filterAlgos, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
                resolve(c->filterWorkspace, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
                resolve(c->backwardFilter, "cudnnConvolutionBackwardFilter");
                return c;
            } catch (const Error&) {
                return nullptr;
            }
        }();
        return api.get();
    }

    void checkCudnn(cudnnStatus_t status, const std::string& what)
    {
        if (status != CUDNN_STATUS_SUCCESS)
            throw Error(what + ": cuDNN: " + cudnn()->errorString(status));
    }

    // cuDNN handles per GPU, lent for one call (a handle must not be used by two threads at once).
    DevicePool<cudnnHandle_t>& handles()
    {
        static auto* h = new DevicePool<cudnnHandle_t>(); // kept for the process
        return *h;
    }

    cudnnHandle_t makeHandle(int device) // on the current device, the legacy default stream
    {
        cudnnHandle_t h = nullptr;
        checkCudnn(cudnn()->create(&h), "cuda:" + std::to_string(device) + ": cudnnCreate");
        return h;
    }

    int currentDevice()
    {
        int device = 0;
        check(cudaGetDevice(&device), "cudaGetDevice");
        return device;
    }

    struct Lease
    {
        int device;
        cudnnHandle_t handle;
        explicit Lease(int d)
            : device(d)
            , handle(handles().take(d, makeHandle))
        {
        }
        ~Lease()
        {
            handles().give(device, handle);
        }
        Lease(const Lease&) = delete;
        Lease& operator=(const Lease&) = delete;
    };

    // The descriptors of one convolution, released on every path.
    struct Descriptors
    {
        cudnnTensorDescriptor_t x = nullptr, y = nullptr;
        cudnnFilterDescriptor_t w = nullptr;
        cudnnConvolutionDescriptor_t conv = nullptr;

        Descriptors(const ConvParams& p, bool tf32, const std::string& what)
        {
            try {
                configure(p, tf32, what);
            } catch (...) {
                release(); // what was created before the failure
                throw;
            }
        }
        ~Descriptors()
        {
            release();
        }
        Descriptors(const Descriptors&) = delete;
        Descriptors& operator=(const Descriptors&) = delete;

    private:
        void configure(const ConvParams& p, bool tf32, const std::string& what)
        {
            const auto* c = cudnn();
            const auto& win = p.w;
            const auto i = [](std::int64_t v) { return static_cast<int>(v); }; // applies() checked the range
            checkCudnn(c->createTensor(&x), what);
            checkCudnn(c->createTensor(&y), what);
            checkCudnn(c->createFilter(&w), what);
            checkCudnn(c->createConv(&conv), what);
            checkCudnn(
                c->setTensor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(p.n), i(p.cin), i(win.h), i(win.w)), what);
            checkCudnn(
                c->setTensor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(p.n), i(p.cout), i(win.oh), i(win.ow)), what);
            checkCudnn(c->setFilter(
                           w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(p.cout), i(p.cin / p.group), i(win.kh), i(win.kw)),
                what);
            checkCudnn(c->setConv(conv, i(win.pt), i(win.pl), i(win.sh), i(win.sw), i(win.dh), i(win.dw),
                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                what);
            checkCudnn(c->setGroups(conv, i(p.group)), what);
            checkCudnn(c->setMath(conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), what);
        }
        void release()
        {
            const auto* c = cudnn();
            if (conv != nullptr)
                (void)c->destroyConv(conv);
            if (w != nullptr)
                (void)c->destroyFilter(w);
            if (y != nullptr)
                (void)c->destroyTensor(y);
            if (x != nullptr)
                (void)c->destroyTensor(x);
            conv = nullptr;
            w = nullptr;
            y = nullptr;
            x = nullptr;
        }
    };

    // The first algorithm of cuDNN's ranking that it reports as usable (none: the im2col path).
    template <typename Perf> std::optional<decltype(Perf::algo)> firstUsable(const Perf* perf, int count)
    {
        for (int k = 0; k < count; ++k) {
            if (perf[k].status == CUDNN_STATUS_SUCCESS)
                return perf[k].algo;
        }
        return std::nullopt;
    }

    // A workspace from the engine's allocator (counted like every other buffer).
    struct Workspace
    {
        NdArray array;
        void* data = nullptr;
        Workspace(std::size_t bytes, Allocator& allocator)
        {
            if (bytes > 0) {
                array = NdArray::empty(allocator, { static_cast<std::int64_t>(bytes) }, DType::U8);
                data = array.data();
            }
        }
    };

    bool applies(const ConvParams& p, const KernelContext& ctx)
    {
        const char* env = std::getenv("PS_CUDNN");
        if (env != nullptr && std::strcmp(env, "0") == 0)
            return false;
        constexpr std::int64_t kMax = 2147483647;
        const long long sizes[] = { p.n, p.cin, p.cout, p.w.h, p.w.w, p.w.oh, p.w.ow };
        for (const long long v : sizes) {
            if (v < 1 || v > kMax) // an empty batch, or beyond cuDNN's int descriptors
                return false;
        }
        return p.symmetricPads && ctx.gemm != GemmPrecision::Bf16 && cudnn() != nullptr;
    }

    constexpr int kAlgos = 8;

} // namespace

bool cudnnConvForward(
    const Node& node, const ConvParams& p, const NdArray& x, const NdArray& weight, NdArray& out, KernelContext& ctx)
{
    if (!applies(p, ctx))
        return false;
    const auto what = "node '" + node.name + "' (Conv)";
    const auto* c = cudnn();
    const Lease lease(currentDevice());
    const Descriptors d(p, ctx.gemm == GemmPrecision::Tf32, what);
    cudnnConvolutionFwdAlgoPerf_t perf[kAlgos];
    int found = 0;
    checkCudnn(c->forwardAlgos(lease.handle, d.x, d.w, d.conv, d.y, kAlgos, &found, perf), what);
    const auto chosen = firstUsable(perf, found);
    if (!chosen)
        return false;
    const auto algo = *chosen;
    std::size_t bytes = 0;
    checkCudnn(c->forwardWorkspace(lease.handle, d.x, d.w, d.conv, d.y, algo, &bytes), what);
    const Workspace ws(bytes, ctx.allocator);
    const float one = 1.0F;
    const float zero = 0.0F;
    checkCudnn(c->forward(lease.handle, &one, d.x, x.data(), d.w, weight.data(), d.conv, algo, ws.data, bytes, &zero,
                   d.y, out.data()),
        what);
    return true;
}

bool cudnnConvBackward(const Node& node, const ConvParams& p, const NdArray& x, const NdArray& weight,
    const NdArray& dy, NdArray* dx, NdArray* dw, KernelContext& ctx)
{
    if (!applies(p, ctx))
        return false;
    const auto what = "node '" + node.name + "' (Conv backward)";
    const auto* c = cudnn();
    const Lease lease(currentDevice());
    const Descriptors d(p, ctx.gemm == GemmPrecision::Tf32, what);
    // Both algorithms first: where cuDNN offers none for either, nothing is written and the
    // im2col path computes both.
    cudnnConvolutionBwdDataAlgoPerf_t dataPerf[kAlgos];
    cudnnConvolutionBwdFilterAlgoPerf_t filterPerf[kAlgos];
    int dataFound = 0;
    int filterFound = 0;
    if (dx != nullptr)
        checkCudnn(c->dataAlgos(lease.handle, d.w, d.y, d.conv, d.x, kAlgos, &dataFound, dataPerf), what);
    if (dw != nullptr)
        checkCudnn(c->filterAlgos(lease.handle, d.x, d.y, d.conv, d.w, kAlgos, &filterFound, filterPerf), what);
    const auto dataAlgo = firstUsable(dataPerf, dataFound);
    const auto filterAlgo = firstUsable(filterPerf, filterFound);
    if ((dx != nullptr && !dataAlgo) || (dw != nullptr && !filterAlgo))
        return false;
    const float one = 1.0F;
    const float zero = 0.0F;
    if (dx != nullptr) {
        std::size_t bytes = 0;
        checkCudnn(c->dataWorkspace(lease.handle, d.w, d.y, d.conv, d.x, *dataAlgo, &bytes), what);
        const Workspace ws(bytes, ctx.allocator);
        checkCudnn(c->backwardData(lease.handle, &one, d.w, weight.data(), d.y, dy.data(), d.conv, *dataAlgo, ws.data,
                       bytes, &zero, d.x, dx->data()),
            what);
    }
    if (dw != nullptr) {
        std::size_t bytes = 0;
        checkCudnn(c->filterWorkspace(lease.handle, d.x, d.y, d.conv, d.w, *filterAlgo, &bytes), what);
        const Workspace ws(bytes, ctx.allocator);
        checkCudnn(c->backwardFilter(lease.handle, &one, d.x, x.data(), d.y, dy.data(), d.conv, *filterAlgo, ws.data,
                       bytes, &zero, d.w, dw->data()),
            what);
    }
    return true;
}

} // namespace ps::engine::cuda
