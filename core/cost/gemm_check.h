// The GEMM model (cost/gemm_model.h) held against measured GEMMs: the points of
// resources/catalog/gemm_measurements.json (compiled in), the efficiencies fitted to the
// calibration points, and every point's prediction and error (`pipestudio gemm-check`, and
// core_tests, which hold the checked points within 15% and the catalog's efficiencies to the fit).
// Depends on: cost/gemm_model.h, cluster/device_catalog.h, nlohmann-json.
#pragma once

#include "cluster/device_catalog.h"
#include "cost/gemm_model.h"

#include <string>
#include <string_view>
#include <vector>

namespace ps {

struct GemmPoint
{
    std::string id;
    std::string device; // catalog id
    MathMode math = MathMode::Fp32;
    std::vector<GemmShape> gemms; // the point's time is their sum
    double measuredSeconds = 0;
    bool calibration = false; // else held out as a check
    std::string source; // a key of the file's "sources"
};

struct GemmMeasurements
{
    std::vector<GemmPoint> points;
    std::vector<std::pair<std::string, std::string>> sources; // key, text
};

// The compiled-in measurements; parseGemmMeasurements reads a file of the same format (errors name
// `source` and the point).
[[nodiscard]] const GemmMeasurements& builtinGemmMeasurements();
[[nodiscard]] GemmMeasurements parseGemmMeasurements(std::string_view json, const std::string& source);

// True where the point runs on tensor cores on its device (the efficiency class it fits and uses).
[[nodiscard]] bool onTensorCores(const GemmPoint& point, const DeviceCatalog& catalog);
// The model's time for a point on its catalog device; `efficiency` > 0 replaces the device's own.
[[nodiscard]] double predictGemmPoint(const GemmPoint& point, const DeviceCatalog& catalog, double efficiency = 0);
// The efficiency (tensor or FP32 class) with which the model's summed time over the calibration
// points of that class equals their measured sum; 0 when there are none.
[[nodiscard]] double fitGemmEfficiency(const GemmMeasurements& m, const DeviceCatalog& catalog, bool tensor);

struct GemmCheckRow
{
    const GemmPoint* point = nullptr;
    double predictedSeconds = 0;
    double error = 0; // predicted / measured - 1
};
[[nodiscard]] std::vector<GemmCheckRow> checkGemmModel(const GemmMeasurements& m, const DeviceCatalog& catalog);

} // namespace ps
