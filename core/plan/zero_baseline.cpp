#include "plan/zero_baseline.h"

#include "plan/partition.h"
#include "util/error.h"

namespace ps {

ZeroMemory zeroMemory(const Graph& graph, const Profile& profile, double microBatch, int devices, int stage)
{
    if (stage < 0 || stage > 3)
        throw Error("ZeRO stage " + std::to_string(stage) + ": expected 0 (DDP), 1, 2 or 3");
    if (devices < 1)
        throw Error("ZeRO: needs at least one device");
    const auto whole = computeStageCosts(graph, profile, Partition { { 0 } }, microBatch).front();
    const auto per = bytesPerParameter(profile.setup);
    const double params = static_cast<double>(whole.parameterCount);
    const double n = devices;
    ZeroMemory m;
    m.weights = params * per.weights / (stage >= 3 ? n : 1);
    m.gradients = params * per.gradients / (stage >= 2 ? n : 1);
    m.optimizerStates = params * (per.optimizerStates + per.masterWeights) / (stage >= 1 ? n : 1);
    m.activations = whole.activationBytes;
    m.workspace = whole.workspaceBytes;
    return m;
}

int zeroMaxMicroBatch(
    const Graph& graph, const Profile& profile, int devices, int stage, double capacityBytes, int upperLimit)
{
    const auto fits = [&](int b) { return zeroMemory(graph, profile, b, devices, stage).total() <= capacityBytes; };
    if (!fits(1))
        return 0;
    int lo = 1; // fits
    int hi = upperLimit + 1; // does not (or past the limit)
    while (hi - lo > 1) { // memory grows with the micro-batch: bisect
        const int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

} // namespace ps
