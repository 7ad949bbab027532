#include "cost/gemm_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <utility>

namespace ps {
namespace {

    // cuBLAS's common CTA tiles on Ampere and Hopper, and the splits of K it takes. The small tiles
    // are taken only by GEMMs too shallow to split (K < 2 x kMinSliceK): that is how such a GEMM
    // with few output tiles spreads over the SMs; a deeper one is split instead.
    constexpr std::array<std::pair<int, int>, 9> kTiles { { { 256, 128 }, { 128, 256 }, { 128, 128 }, { 128, 64 },
        { 64, 128 }, { 64, 64 }, { 64, 32 }, { 32, 64 }, { 32, 32 } } };
    constexpr std::size_t kLargeTiles = 5;
    constexpr std::array<int, 8> kSplits { 1, 2, 3, 4, 6, 8, 12, 16 };
    constexpr double kMinSliceK = 128; // a split leaves each slice at least this deep
    constexpr double kPrologueK = 64; // the inner depth loaded before the first multiply-add
    constexpr double kPartialBytes = 4; // split-K partials are fp32

} // namespace

GemmDevice gemmDevice(const DeviceSpec& device, MathMode mode)
{
    const bool tensor = mode != MathMode::Fp32 && device.peakFlops(mode) > device.flopsFp32;
    const bool half = tensor && (mode == MathMode::Fp16 || mode == MathMode::Bf16);
    GemmDevice g;
    g.peakFlops = tensor ? device.peakFlops(mode) : device.flopsFp32;
    g.efficiency = tensor ? device.gemmEfficiencyTensor : device.gemmEfficiencyFp32;
    g.multiprocessors = device.multiprocessors;
    g.memoryBandwidth = device.memoryBandwidth;
    g.inputBytes = half ? 2 : 4;
    g.outputBytes = half ? 2 : 4;
    return g;
}

GemmEstimate estimateGemm(const GemmShape& s, const GemmDevice& d)
{
    GemmEstimate best;
    if (s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0 || d.multiprocessors <= 0 || d.peakFlops <= 0
        || d.efficiency <= 0 || d.memoryBandwidth <= 0)
        return best;
    const double sms = d.multiprocessors;
    const double smRate = d.peakFlops * d.efficiency / sms;
    const double smBandwidth = d.memoryBandwidth / sms;
    const double useful = 2 * s.batch * s.m * s.n * s.k;
    best.seconds = std::numeric_limits<double>::infinity();
    const bool shallow = s.k < 2 * kMinSliceK;
    for (std::size_t t = 0; t < (shallow ? kTiles.size() : kLargeTiles); ++t) {
        const auto [tm, tn] = kTiles[t];
        for (const int split : kSplits) {
            if (split > 1 && s.k / split < kMinSliceK)
                continue;
            const double tiles = s.batch * std::ceil(s.m / tm) * std::ceil(s.n / tn) * split;
            const double waves = std::ceil(tiles / sms);
            const double sliceK = std::ceil(s.k / split);
            const double outBytes = split > 1 ? kPartialBytes : d.outputBytes;
            const double tileElements = static_cast<double>(tm) * tn;
            const double fixedBytes = tileElements * outBytes + (tm + tn) * std::min(sliceK, kPrologueK) * d.inputBytes;
            const double round = 2 * tileElements * sliceK / smRate + fixedBytes / smBandwidth;
            double seconds = waves * round;
            if (split > 1) // the partials read, C written
                seconds += (split * kPartialBytes + d.outputBytes) * s.batch * s.m * s.n / d.memoryBandwidth;
            if (seconds < best.seconds)
                best = { seconds, tm, tn, split, waves, useful / (waves * sms * 2 * tileElements * sliceK) };
        }
    }
    // Nothing runs faster than its operands can be read and its result written once.
    const double streamed = s.batch * ((s.m * s.k + s.k * s.n) * d.inputBytes + s.m * s.n * d.outputBytes);
    best.seconds = std::max(best.seconds, streamed / d.memoryBandwidth);
    return best;
}

} // namespace ps
