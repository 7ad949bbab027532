#include "cost/training_setup.h"

#include "util/error.h"

namespace ps {

ParameterBytes bytesPerParameter(const TrainingSetup& setup)
{
    ParameterBytes b;
    const double stateCount = setup.optimizer == Optimizer::Adam ? 2
        : setup.optimizer == Optimizer::SgdMomentum              ? 1
                                                                 : 0;
    b.optimizerStates = 4 * stateCount; // fp32 states in both precisions
    if (setup.mixedPrecision) {
        b.weights = 2;
        b.gradients = 2;
        b.masterWeights = 4;
    } else {
        b.weights = 4;
        b.gradients = 4;
    }
    return b;
}

double activationScale(const TrainingSetup& setup)
{
    return setup.mixedPrecision ? 0.5 : 1.0;
}

MathMode matmulMathMode(const TrainingSetup& setup)
{
    if (setup.mixedPrecision)
        return MathMode::Fp16;
    return setup.allowTf32 ? MathMode::Tf32 : MathMode::Fp32;
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
    for (auto o : { Optimizer::Sgd, Optimizer::SgdMomentum, Optimizer::Adam }) {
        if (toString(o) == text)
            return o;
    }
    throw Error("unknown optimizer '" + std::string(text) + "' (sgd, sgd-momentum, adam)");
}

} // namespace ps
