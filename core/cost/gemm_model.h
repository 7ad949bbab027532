// GEMM time on a GPU with tile and wave quantisation (issue P15, deliverable 1).
//
// A library GEMM (cuBLAS) cuts each output matrix C (M x N) into tiles of tm x tn (256 x 128 down to
// 64 x 128; down to 32 x 32 for a GEMM too shallow to split) and may cut the
// inner dimension K into s slices (split-K); one SM computes one tile-slice at a time, so the
// kernel runs in waves = ceil(batch x ceil(M/tm) x ceil(N/tn) x s / SMs) rounds. A round costs
//   the multiply-adds of one tile-slice, 2 tm tn K/s, at the SM's share of the pipe's peak times
//   the pipe's achievable efficiency (a large GEMM's fraction of peak), plus
//   the tile's fixed cost, at the SM's share of the memory bandwidth: its tm x tn output written
//   (fp32 partials when split) and its pipeline's prologue read, (tm + tn) x min(K/s, 64) input
//   elements (a 64-deep slab: two stages of 32, what a multi-stage GEMM loads before its first
//   multiply-add);
// and a split GEMM adds a pass that reads the s partial outputs and writes C. The library is taken
// to pick the tile and split with the least time (what cuBLAS's heuristics aim at). So a GEMM whose
// tiles fill the GPU's SMs 1.1 times takes two full rounds, none runs faster than its operands and
// result stream through memory once (a skinny GEMM at a small micro-batch), a thin K runs below the pipe's
// efficiency (the fixed cost weighs more), and a GEMM with few output tiles and a long K is split.
// Everything but the efficiency is the device's datasheet (SMs, peak, bandwidth); the efficiencies
// are measured (resources/catalog/devices.json names the measurements, tests/data/measured/ holds
// them, and core_tests recomputes them).
// Depends on: cluster/device_catalog.h.
#pragma once

#include "cluster/device_catalog.h"

namespace ps {

struct GemmShape
{
    double batch = 1; // independent matrices (batched GEMM)
    double m = 0;
    double n = 0;
    double k = 0;
};

struct GemmDevice
{
    double peakFlops = 0; // the pipe the GEMM runs on (FP32 cores, TF32 or half-precision tensor cores)
    double efficiency = 0; // of that peak, on tiles that fill the GPU
    int multiprocessors = 0;
    double memoryBandwidth = 0; // bytes/s
    double inputBytes = 4; // per element of A and B (4 for FP32 and TF32, 2 for bf16/fp16)
    double outputBytes = 4; // per element of C
};

struct GemmEstimate
{
    double seconds = 0;
    int tileM = 0;
    int tileN = 0;
    int splitK = 1;
    double waves = 0;
    double utilisation = 0; // useful multiply-adds over those the waves issue
};

// A catalog device's GEMM pipe under `mode`: tensor cores at the device's tensor efficiency where
// it has a faster pipe for the mode than its FP32 cores, else the FP32 cores; 2-byte operands and
// output under fp16/bf16. Efficiency 0 (not in the catalog) where the device has none.
[[nodiscard]] GemmDevice gemmDevice(const DeviceSpec& device, MathMode mode);

// The fastest tile and split for `shape` on `device`. Zero for an empty GEMM; requires
// multiprocessors > 0, peakFlops > 0 and efficiency > 0.
[[nodiscard]] GemmEstimate estimateGemm(const GemmShape& shape, const GemmDevice& device);

} // namespace ps
