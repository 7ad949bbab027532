// How a model is trained, as far as memory and speed are concerned: precision and optimizer.
//
// One precision per plan, honoured by every op class of the cost model (cost/profile.h):
//   fp32  what PyTorch runs by default: convolutions on TF32 tensor cores where the device has them
//         (torch.backends.cudnn.allow_tf32 defaults to True) and matmuls in full FP32
//         (torch.backends.cuda.matmul.allow_tf32 defaults to False since torch 1.12)
//   tf32  matmuls too on TF32 tensor cores (allow_tf32 = True, or set_float32_matmul_precision("high"))
//   bf16, fp16  mixed precision (torch.autocast): matmuls and convolutions on half-precision tensor
//         cores, activations stored in 2 bytes, FP32 master weights and optimizer states
//
// Bytes per parameter follow the usual accounting (PatrickStar §2, Table in the digest): fp32 Adam
// keeps weights, gradients, momentum and variance (4+4+4+4 = 16 B); mixed-precision Adam keeps fp16
// weights and gradients plus fp32 master weights, momentum and variance (2+2+4+4+4 = 16 B).
// Depends on: the standard library only.
#pragma once

#include "cluster/device_catalog.h"

#include <array>
#include <string>
#include <string_view>

namespace ps {

enum class Optimizer { Sgd, SgdMomentum, Adam };
enum class Precision { Fp32, Tf32, Bf16, Fp16 };

struct TrainingSetup
{
    Precision precision = Precision::Fp32;
    Optimizer optimizer = Optimizer::Adam;
    // A measured optimizer step's time per parameter (a profile's: `pipestudio profile` times the
    // engine's, an imported trace its Optimizer.step ranges); 0: modelled from memory bandwidth.
    double optimizerNsPerParameter = 0;
    // Under mixed precision, gradients kept and reduced in fp32 (Megatron-LM's main_grad, its default
    // with bf16); else in the compute precision.
    bool fp32Gradients = false;
    // ZeRO-1 (Rajbhandari et al. 2020, P_os): the fp32 master weights and the optimizer states sharded
    // over this many data-parallel replicas, each keeping 1/n of them.
    int optimizerShards = 1;
    // Gradients held for the whole run in preallocated buffers (Megatron-LM's contiguous main_grad
    // buffers), not from a stage's first backward to its optimizer step as PyTorch allocates them.
    bool gradientBuffers = false;

    // bf16/fp16 compute with fp32 master weights
    [[nodiscard]] bool mixedPrecision() const
    {
        return precision == Precision::Bf16 || precision == Precision::Fp16;
    }
    bool operator==(const TrainingSetup&) const = default;
};

struct ParameterBytes
{
    double weights = 0; // the copy forward and backward read
    double gradients = 0;
    double masterWeights = 0; // fp32 copy under mixed precision
    double optimizerStates = 0;

    [[nodiscard]] double total() const
    {
        return weights + gradients + masterWeights + optimizerStates;
    }
};

inline constexpr std::array kPrecisions { Precision::Fp32, Precision::Tf32, Precision::Bf16, Precision::Fp16 };

[[nodiscard]] ParameterBytes bytesPerParameter(const TrainingSetup& setup);
// Activation bytes relative to the fp32 graph: 0.5 under mixed precision.
[[nodiscard]] double activationScale(const TrainingSetup& setup);
// The math pipe of matrix multiplications (linear layers, attention) and of convolutions.
[[nodiscard]] MathMode matmulMathMode(const TrainingSetup& setup);
[[nodiscard]] MathMode convMathMode(const TrainingSetup& setup);
[[nodiscard]] std::string_view toString(Precision precision);
// "fp32 (PyTorch default: TF32 convolutions, FP32 matmuls)": what a printed estimate says it used.
[[nodiscard]] std::string describePrecision(Precision precision);
// Throws ps::Error listing the choices.
[[nodiscard]] Precision parsePrecision(std::string_view text);

// The source of a profile the CUDA backend measured on a GPU (pipestudio profile --device cuda:N
// --precision P): "measured-cuda" with fp32 GEMMs, "measured-cuda-tf32" and "measured-cuda-bf16"
// with the others, so each precision's rows are stored apart and a run at P is predicted from P's.
[[nodiscard]] std::string measuredCudaSource(Precision gemm);
// The GEMM precision a stored profile was measured at: P for "measured-cuda-P", fp32 for every
// other source (CPU profiles, "measured-cuda", imported traces). Only its GEMMs: the engine's
// values stay fp32 in every mode, so the profile's setup.precision (activation bytes) stays fp32.
[[nodiscard]] Precision measuredPrecision(std::string_view source);
[[nodiscard]] std::string_view toString(Optimizer optimizer);
[[nodiscard]] Optimizer parseOptimizer(std::string_view text);

} // namespace ps
