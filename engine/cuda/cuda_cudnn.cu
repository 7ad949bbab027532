// Conv and BatchNorm through cuDNN (loaded by name through engine/cuda_libraries.h, like cuBLAS).
//
// Conv: forward, data and filter gradients with the algorithms cuDNN's heuristics rank first, their
// workspaces taken from the engine's accounted allocator. Used where it applies: cuDNN found, fp32
// (FMA math, no TF32, so the CPU's numbers hold) or TF32 GEMM precision, pads equal on both sides of
// each dim, and PS_CUDNN not "0", a non-empty batch and sizes within cuDNN's int descriptors, and an
// algorithm cuDNN offers. Elsewhere the callers in cuda_conv_kernels.cu take the im2col + cuBLAS
// path, which the CPU tests cover; the GPU self-test compares both with the CPU kernel. cuDNN's
// ranking may pick nondeterministic gradient algorithms (atomics): its sums need not come in the
// CPU's order.
//
// BatchNorm in training mode (batch statistics; spatial mode over (N, C, every other dim flattened)):
// cudnnBatchNormalizationForwardTraining writes the output, the running statistics (exponential
// average factor 1 - ONNX momentum; unbiased running variance, as the CPU kernel) and the batch
// mean and inverse standard deviation the engine saves; cudnnBatchNormalizationBackward gives dx,
// dgamma and dbeta from those. It is cuDNN's fused per-channel reduction, where the engine's own
// kernel reduces a channel in one block. Inference mode, PS_CUDNN=0 and a build without cuDNN's
// normalization entry points keep the engine's kernels. Pooling stays on the engine's kernels, as
// in PyTorch: max pooling's gradient goes to the index its forward chose.
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

    // The normalization entry points (cuDNN's ops library), resolved apart from the convolution
    // ones: either may be missing without the other.
    struct CudnnNorm
    {
        decltype(&cudnnBatchNormalizationForwardTraining) forwardTraining = nullptr;
        decltype(&cudnnBatchNormalizationBackward) backward = nullptr;
    };

    const CudnnNorm* cudnnNorm()
    {
        static const std::unique_ptr<CudnnNorm> api = []() -> std::unique_ptr<CudnnNorm> {
            try {
                if (cudnn() == nullptr)
                    return nullptr;
                auto c = std::make_unique<CudnnNorm>();
                resolve(c->forwardTraining, "cudnnBatchNormalizationForwardTraining");
                resolve(c->backward, "cudnnBatchNormalizationBackward");
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

    bool disabled()
    {
        const char* env = std::getenv("PS_CUDNN");
        return env != nullptr && std::strcmp(env, "0") == 0;
    }

    bool applies(const ConvParams& p, const KernelContext& ctx)
    {
        if (disabled())
            return false;
        constexpr std::int64_t kMax = 2147483647;
        const long long sizes[] = { p.n, p.cin, p.cout, p.w.h, p.w.w, p.w.oh, p.w.ow };
        for (const long long v : sizes) {
            if (v < 1 || v > kMax) // an empty batch, or beyond cuDNN's int descriptors
                return false;
        }
        const bool planar = p.w.kd == 1 && p.w.id == 1 && p.w.od == 1; // 2-D descriptors only
        return planar && p.symmetricPads && ctx.gemm != GemmPrecision::Bf16 && cudnn() != nullptr;
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

namespace {

    // An (N, C, rest) array as cuDNN's 4-d (N, C, rest, 1) and the (1, C, 1, 1) statistics shape.
    struct NormDescriptors
    {
        cudnnTensorDescriptor_t x = nullptr, stats = nullptr;
        NormDescriptors(const BatchNormParams& p, const std::string& what)
        {
            const auto* c = cudnn();
            const auto i = [](std::int64_t v) { return static_cast<int>(v); }; // normApplies() checked
            try {
                checkCudnn(c->createTensor(&x), what);
                checkCudnn(c->createTensor(&stats), what);
                checkCudnn(c->setTensor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(p.n), i(p.c), i(p.spatial), 1), what);
                checkCudnn(c->setTensor(stats, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, i(p.c), 1, 1), what);
            } catch (...) {
                release();
                throw;
            }
        }
        ~NormDescriptors()
        {
            release();
        }
        NormDescriptors(const NormDescriptors&) = delete;
        NormDescriptors& operator=(const NormDescriptors&) = delete;

    private:
        void release()
        {
            if (stats != nullptr)
                (void)cudnn()->destroyTensor(stats);
            if (x != nullptr)
                (void)cudnn()->destroyTensor(x);
            stats = nullptr;
            x = nullptr;
        }
    };

    bool normApplies(const BatchNormParams& p, const KernelContext& ctx)
    {
        if (!ctx.training || disabled() || cudnnNorm() == nullptr)
            return false;
        constexpr std::int64_t kMax = 2147483647;
        // Batch statistics need two values per channel; cuDNN's descriptors hold ints.
        // The descriptor's strides are ints too: the whole array must index within them.
        return p.n >= 1 && p.c >= 1 && p.spatial >= 1 && p.n * p.spatial >= 2 && p.n <= kMax && p.c <= kMax
            && p.spatial <= kMax && p.c * p.spatial <= kMax && p.n <= kMax / (p.c * p.spatial)
            && p.epsilon >= CUDNN_BN_MIN_EPSILON;
    }

} // namespace

bool cudnnBatchNormForward(const Node& node, const BatchNormParams& p, NodeValues& v, NdArray& out, NdArray& mean,
    NdArray& rstd, KernelContext& ctx)
{
    if (!normApplies(p, ctx))
        return false;
    const auto what = "node '" + node.name + "' (BatchNorm)";
    const Lease lease(currentDevice());
    const NormDescriptors d(p, what);
    const float one = 1.0F;
    const float zero = 0.0F;
    // v.in: x, scale, bias, running mean, running variance (updated in place, as ONNX training does).
    checkCudnn(cudnnNorm()->forwardTraining(lease.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x, v.in[0].data(),
                   d.x, out.data(), d.stats, v.in[1].data(), v.in[2].data(), 1.0 - p.momentum, v.in[3].data(),
                   v.in[4].data(), p.epsilon, mean.data(), rstd.data()),
        what);
    return true;
}

bool cudnnBatchNormBackward(const Node& node, const BatchNormParams& p, const NodeValues& v, const NdArray& dy,
    BackwardArgs& g, KernelContext& ctx)
{
    if (!normApplies(p, ctx))
        return false;
    const auto what = "node '" + node.name + "' (BatchNorm backward)";
    const Lease lease(currentDevice());
    const NormDescriptors d(p, what);
    // cuDNN writes all three; the ones not asked for are dropped.
    auto dx = NdArray::empty(ctx.allocator, v.in[0].shape());
    auto dgamma = NdArray::empty(ctx.allocator, { p.c });
    auto dbeta = NdArray::empty(ctx.allocator, { p.c });
    const float one = 1.0F;
    const float zero = 0.0F;
    checkCudnn(cudnnNorm()->backward(lease.handle, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero, d.x,
                   v.in[0].data(), d.x, dy.data(), d.x, dx.data(), d.stats, v.in[1].data(), dgamma.data(), dbeta.data(),
                   p.epsilon, v.saved[0].data(), v.saved[1].data()),
        what);
    const NdArray* grads[] = { &dx, &dgamma, &dbeta };
    for (std::size_t k = 0; k < 3; ++k) {
        if (g.needGrad[k])
            g.gradIn[k] = *grads[k];
    }
    return true;
}

} // namespace ps::engine::cuda
