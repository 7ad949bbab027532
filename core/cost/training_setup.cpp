#include "cost/training_setup.h"

#include "util/enum_names.h"
#include "util/error.h"

#include <algorithm>

namespace ps {

ParameterBytes bytesPerParameter(const TrainingSetup& setup)
{
    ParameterBytes b;
    const double stateCount = setup.optimizer == Optimizer::Adam ? 2
        : setup.optimizer == Optimizer::SgdMomentum              ? 1
                                                                 : 0;
    b.optimizerStates = 4 * stateCount; // fp32 states in both precisions
    if (setup.mixedPrecision()) {
        b.weights = 2;
        b.gradients = setup.fp32Gradients ? 4 : 2;
        b.masterWeights = 4;
    } else {
        b.weights = 4;
        b.gradients = 4;
    }
    const double shards = std::max(1, setup.optimizerShards);
    b.masterWeights /= shards;
    b.optimizerStates /= shards;
    return b;
}

double activationScale(const TrainingSetup& setup)
{
    return setup.mixedPrecision() ? 0.5 : 1.0;
}

MathMode matmulMathMode(const TrainingSetup& setup)
{
    switch (setup.precision) {
    case Precision::Fp32:
        return MathMode::Fp32;
    case Precision::Tf32:
        return MathMode::Tf32;
    case Precision::Bf16:
        return MathMode::Bf16;
    case Precision::Fp16:
        return MathMode::Fp16;
    }
    return MathMode::Fp32;
}

MathMode convMathMode(const TrainingSetup& setup)
{
    return setup.precision == Precision::Fp32 ? MathMode::Tf32 : matmulMathMode(setup);
}

std::string_view toString(Precision precision)
{
    switch (precision) {
    case Precision::Fp32:
        return "fp32";
    case Precision::Tf32:
        return "tf32";
    case Precision::Bf16:
        return "bf16";
    case Precision::Fp16:
        return "fp16";
    }
    return "fp32";
}

std::string describePrecision(Precision precision)
{
    switch (precision) {
    case Precision::Fp32:
        return "fp32 (PyTorch's default: TF32 convolutions where the device has TF32, FP32 matmuls)";
    case Precision::Tf32:
        return "tf32 (matmuls and convolutions on TF32 tensor cores)";
    case Precision::Bf16:
        return "bf16 mixed precision (bf16 compute and activations, FP32 master weights)";
    case Precision::Fp16:
        return "fp16 mixed precision (fp16 compute and activations, FP32 master weights)";
    }
    return "fp32";
}

Precision parsePrecision(std::string_view text)
{
    return parseByName("precision", text, kPrecisions);
}

std::string measuredCudaSource(Precision gemm)
{
    return gemm == Precision::Fp32 ? std::string("measured-cuda") : "measured-cuda-" + std::string(toString(gemm));
}

Precision measuredPrecision(std::string_view source)
{
    constexpr std::string_view prefix = "measured-cuda-";
    if (source.starts_with(prefix)) {
        for (auto p : kPrecisions) {
            if (toString(p) == source.substr(prefix.size()))
                return p;
        }
    }
    return Precision::Fp32;
}

std::string_view toString(Optimizer optimizer)
{
    switch (optimizer) {
    case Optimizer::Sgd:
        return "sgd";
    case Optimizer::SgdMomentum:
        return "sgd-momentum";
    case Optimizer::Adam:
        return "adam";
    }
    return "adam";
}

Optimizer parseOptimizer(std::string_view text)
{
    return parseByName("optimizer", text, { Optimizer::Sgd, Optimizer::SgdMomentum, Optimizer::Adam });
}

} // namespace ps
