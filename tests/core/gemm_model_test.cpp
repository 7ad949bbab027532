// cost/gemm_model.h and cost/gemm_check.h: tile and wave quantisation, split-K, and the model
// against measured GEMMs (resources/catalog/gemm_measurements.json): every point within 15%, and
// the catalog's efficiencies are what the calibration points give (not hand-set).
#include "cost/gemm_check.h"
#include "cost/gemm_model.h"
#include "util/error.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace ps;

namespace {

GemmDevice h200Fp32()
{
    return gemmDevice(DeviceCatalog::builtin().find("h200"), MathMode::Fp32);
}

} // namespace

TEST(GemmModel, TilesThatOverflowAWaveCostAWholeRound)
{
    const auto d = h200Fp32();
    ASSERT_EQ(d.multiprocessors, 132);
    // 132 tiles of 128 x 128 fill the SMs once; half a row of tiles more needs a second round, or
    // tiles twice as large, or K split in two (three rounds of half the depth), whichever is least.
    const auto full = estimateGemm({ 1, 128 * 12, 128 * 11, 256 }, d);
    const auto over = estimateGemm({ 1, 128 * 12 + 64, 128 * 11, 256 }, d);
    EXPECT_GT(over.seconds / full.seconds, 1.3) << "tiles " << over.tileM << "x" << over.tileN;
    EXPECT_GT(full.utilisation, 0.95);
    EXPECT_LT(over.utilisation, 0.8);
}

TEST(GemmModel, ThinInnerDimensionsRunBelowThePipesEfficiency)
{
    const auto d = h200Fp32();
    const auto rate = [&](double k) {
        const GemmShape s { 1, 8192, 8192, k };
        return 2 * s.m * s.n * s.k / estimateGemm(s, d).seconds / (d.peakFlops * d.efficiency);
    };
    EXPECT_GT(rate(8192), 0.9);
    EXPECT_LT(rate(64), 0.75);
    EXPECT_LT(rate(64), rate(256));
}

TEST(GemmModel, FewOutputTilesWithALongInnerDimensionAreSplit)
{
    const auto d = gemmDevice(DeviceCatalog::builtin().find("a100-40gb"), MathMode::Fp32);
    const auto e = estimateGemm({ 1, 128, 4096, 9216 }, d); // AlexNet's fc1 at batch 128
    EXPECT_GT(e.splitK, 1);
    EXPECT_GT(e.utilisation, 0.6);
    EXPECT_EQ(estimateGemm({ 1, 0, 10, 10 }, d).seconds, 0);
}

TEST(GemmModel, MicroBatchOneRunsBelowSixteensRate)
{
    // GPT-2 medium's MLP on an A100 in bf16: sequence 1024 tokens per sample.
    const auto d = gemmDevice(DeviceCatalog::builtin().find("a100-80gb"), MathMode::Bf16);
    const auto perSample = [&](double b) { return estimateGemm({ 1, 1024 * b, 4096, 1024 }, d).seconds / b; };
    EXPECT_GT(perSample(1) / perSample(16), 1.05);
}

TEST(GemmModel, MeasuredGemmsAreWithinFifteenPercent)
{
    const auto& m = builtinGemmMeasurements();
    const auto& catalog = DeviceCatalog::builtin();
    int checks = 0;
    for (const auto& row : checkGemmModel(m, catalog)) {
        EXPECT_LT(std::abs(row.error), 0.15)
            << row.point->id << " on " << row.point->device << ": measured " << row.point->measuredSeconds * 1e6
            << " us, predicted " << row.predictedSeconds * 1e6 << " us";
        checks += row.point->calibration ? 0 : 1;
    }
    EXPECT_GE(checks, 10);
}

TEST(GemmModel, TheCatalogsEfficienciesAreTheCalibrationFit)
{
    const auto& m = builtinGemmMeasurements();
    const auto& catalog = DeviceCatalog::builtin();
    const auto& h200 = catalog.find("h200");
    EXPECT_NEAR(fitGemmEfficiency(m, catalog, false), h200.gemmEfficiencyFp32, 0.001);
    EXPECT_NEAR(fitGemmEfficiency(m, catalog, true), h200.gemmEfficiencyTensor, 0.001);
}

TEST(GemmModel, BadMeasurementFilesNameThePoint)
{
    try {
        (void)parseGemmMeasurements(
            R"({"points": [{"id": "p1", "device": "h200", "math": "fp32", "gemms": [[1, 2, 3]], "measured_us": 5, "role": "check"}]})",
            "m.json");
        FAIL() << "a GEMM of three sizes was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("m.json, point 'p1'"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)parseGemmMeasurements("[]", "m.json"), Error);
}

TEST(GemmModel, DeviceJsonKeepsTheModelsInputs)
{
    const auto& h100 = DeviceCatalog::builtin().find("h100-80gb");
    const auto back = deviceSpecFromJson(deviceSpecToJson(h100), "round trip");
    EXPECT_EQ(back, h100);
    EXPECT_EQ(back.multiprocessors, 132);
    EXPECT_THROW(
        (void)deviceSpecFromJson(
            R"({"id": "x", "memory_bytes": 1, "flops": {"fp32": 1}, "memory_bandwidth": 1, "gemm_efficiency": {"fp32": 2}})",
            "x.json"),
        Error);
}
