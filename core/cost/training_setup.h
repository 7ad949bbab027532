// How a model is trained, as far as memory and speed are concerned: precision and optimizer.
//
// Bytes per parameter follow the usual accounting (PatrickStar §2, Table in the digest): fp32 Adam
// keeps weights, gradients, momentum and variance (4+4+4+4 = 16 B); mixed-precision Adam keeps fp16
// weights and gradients plus fp32 master weights, momentum and variance (2+2+4+4+4 = 16 B).
// Depends on: the standard library only.
#pragma once

#include "cluster/device_catalog.h"

#include <string>
#include <string_view>

namespace ps {

enum class Optimizer { Sgd, SgdMomentum, Adam };

struct TrainingSetup
{
    bool mixedPrecision = false; // fp16/bf16 compute with fp32 master weights
    Optimizer optimizer = Optimizer::Adam;
    bool allowTf32 = false; // fp32 matmuls on TF32 tensor cores (Ampere and later)

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

[[nodiscard]] ParameterBytes bytesPerParameter(const TrainingSetup& setup);
// Activation bytes relative to the fp32 graph: 0.5 under mixed precision.
[[nodiscard]] double activationScale(const TrainingSetup& setup);
[[nodiscard]] MathMode matmulMathMode(const TrainingSetup& setup);
[[nodiscard]] std::string_view toString(Optimizer optimizer);
[[nodiscard]] Optimizer parseOptimizer(std::string_view text);

} // namespace ps
