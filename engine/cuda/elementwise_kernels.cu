// CUDA kernels over engine/kernel_math.h's per-element math (GELU forward/backward, AdamW), and
// their self-test against the host evaluation of the same functions. The .cu adds only indexing
// and launches: the arithmetic is what the CPU backend runs and its unit tests cover.
#include "cuda/cuda_probe.h"
#include "kernel_math.h"

#include <cuda_runtime.h>

#include <cmath>
#include <string>
#include <vector>

namespace ps::engine::cuda {
namespace {

    enum class Unary { GeluTanh, GeluTanhGrad, GeluErf, GeluErfGrad };

    __global__ void unaryKernel(Unary op, const float* x, const float* dy, float* y, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i >= n)
            return;
        switch (op) {
        case Unary::GeluTanh:
            y[i] = math::geluTanh(x[i]);
            break;
        case Unary::GeluTanhGrad:
            y[i] = dy[i] * math::geluTanhGrad(x[i]);
            break;
        case Unary::GeluErf:
            y[i] = math::geluErf(x[i]);
            break;
        case Unary::GeluErfGrad:
            y[i] = dy[i] * math::geluErfGrad(x[i]);
            break;
        }
    }

    __global__ void adamwKernel(float* w, const float* g, float* m, float* v, math::AdamWCoefficients c, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n)
            math::adamwElement(w[i], g[i], m[i], v[i], c);
    }

    std::string describe(cudaError_t err)
    {
        return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    }

    // Device copies of host vectors, released on every path.
    struct Device
    {
        std::vector<float*> buffers;
        cudaError_t err = cudaSuccess;
        ~Device()
        {
            for (auto* p : buffers)
                cudaFree(p);
        }
        float* upload(const std::vector<float>& host)
        {
            float* p = nullptr;
            if (err == cudaSuccess)
                err = cudaMalloc(&p, host.size() * sizeof(float));
            if (err == cudaSuccess) {
                buffers.push_back(p);
                err = cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice);
            }
            return p;
        }
        std::vector<float> download(const float* p, std::size_t n)
        {
            std::vector<float> host(n);
            if (err == cudaSuccess)
                err = cudaMemcpy(host.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost);
            return host;
        }
    };

    // Device libm and the host's agree to a few ulps (erff, expf): relative 1e-5 or absolute 1e-6.
    bool close(float a, float b)
    {
        return std::fabs(a - b) <= 1e-6F + 1e-5F * std::fabs(b);
    }

} // namespace

KernelCheck runElementwiseSelfTest(int device)
{
    if (auto failed = selectDevice(device))
        return *failed;
    constexpr int n = 1 << 16;
    std::vector<float> x(n);
    std::vector<float> dy(n);
    for (int i = 0; i < n; ++i) {
        x[i] = -8.0F + 16.0F * static_cast<float>(i) / static_cast<float>(n); // both tanh branches, both tails
        dy[i] = 0.5F + static_cast<float>(i % 7) * 0.25F;
    }
    Device d;
    const float* dx = d.upload(x);
    const float* ddy = d.upload(dy);
    float* out = d.upload(std::vector<float>(n));
    const char* names[] = { "gelu(tanh)", "gelu(tanh) backward", "gelu(erf)", "gelu(erf) backward" };
    for (int op = 0; op < 4; ++op) {
        if (d.err == cudaSuccess) {
            unaryKernel<<<(n + 255) / 256, 256>>>(static_cast<Unary>(op), dx, ddy, out, n);
            d.err = cudaGetLastError();
        }
        const auto got = d.download(out, n);
        if (d.err != cudaSuccess)
            return { true, false, describe(d.err) };
        for (int i = 0; i < n; ++i) {
            const float a = x[i];
            const float want = op == 0 ? math::geluTanh(a)
                : op == 1              ? dy[i] * math::geluTanhGrad(a)
                : op == 2              ? math::geluErf(a)
                                       : dy[i] * math::geluErfGrad(a);
            if (!close(got[i], want))
                return { true, false,
                    std::string(names[op]) + " differs at x = " + std::to_string(a) + ": GPU " + std::to_string(got[i])
                        + ", CPU " + std::to_string(want) };
        }
    }
    // Three AdamW steps from the same state on both sides.
    std::vector<float> w(n);
    std::vector<float> g(n);
    std::vector<float> m(n, 0.0F);
    std::vector<float> v(n, 0.0F);
    for (int i = 0; i < n; ++i) {
        w[i] = 0.01F * static_cast<float>(i % 101) - 0.5F;
        g[i] = 0.001F * static_cast<float>(i % 37) - 0.018F;
    }
    float* dw = d.upload(w);
    const float* dg = d.upload(g);
    float* dm = d.upload(m);
    float* dv = d.upload(v);
    for (int step = 1; step <= 3; ++step) {
        const math::AdamWCoefficients c { 1e-3F, 0.01F, 0.9F, 0.999F, 1e-8F,
            1.0F - std::pow(0.9F, static_cast<float>(step)),
            std::sqrt(1.0F - std::pow(0.999F, static_cast<float>(step))), 0.5F };
        if (d.err == cudaSuccess) {
            adamwKernel<<<(n + 255) / 256, 256>>>(dw, dg, dm, dv, c, n);
            d.err = cudaGetLastError();
        }
        for (int i = 0; i < n; ++i)
            math::adamwElement(w[i], g[i], m[i], v[i], c);
    }
    const auto gotW = d.download(dw, n);
    if (d.err != cudaSuccess)
        return { true, false, describe(d.err) };
    for (int i = 0; i < n; ++i) {
        if (!close(gotW[i], w[i]))
            return { true, false,
                "AdamW differs at element " + std::to_string(i) + ": GPU " + std::to_string(gotW[i]) + ", CPU "
                    + std::to_string(w[i]) };
    }
    return { true, true, "GELU (tanh, erf) forward and backward and AdamW on 64K elements match the CPU's math" };
}

} // namespace ps::engine::cuda
