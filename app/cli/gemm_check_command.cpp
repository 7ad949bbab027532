// `pipestudio gemm-check`: the GEMM model (core/cost/gemm_model.h) against measured GEMMs, the
// efficiencies fitted to the calibration points beside the catalog's, and every point's error.
#include "cli/commands.h"
#include "cli/device_options.h"
#include "cost/gemm_check.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <memory>

namespace ps::app {
namespace {

    struct GemmCheckOptions
    {
        std::string measurements; // empty: the built-in points
        std::string catalog; // empty: the built-in catalog
        bool json = false;
    };

    std::string tileOf(const GemmPoint& p, const DeviceCatalog& catalog)
    {
        const auto e = estimateGemm(p.gemms.front(), gemmDevice(catalog.find(p.device), p.math));
        return fmt::format("{}x{}{}", e.tileM, e.tileN, e.splitK > 1 ? fmt::format(" split {}", e.splitK) : "");
    }

    int runGemmCheck(const GemmCheckOptions& o)
    {
        const auto catalog =
            o.catalog.empty() ? DeviceCatalog::builtin() : DeviceCatalog::fromJson(readFile(o.catalog), o.catalog);
        const auto measurements = o.measurements.empty()
            ? builtinGemmMeasurements()
            : parseGemmMeasurements(readFile(o.measurements), o.measurements);
        const auto rows = checkGemmModel(measurements, catalog);
        const double fitFp32 = fitGemmEfficiency(measurements, catalog, false);
        const double fitTensor = fitGemmEfficiency(measurements, catalog, true);
        int checks = 0;
        int within = 0;
        const GemmCheckRow* worst = nullptr;
        for (const auto& r : rows) {
            if (r.point->calibration)
                continue;
            ++checks;
            within += std::abs(r.error) <= 0.15 ? 1 : 0;
            if (worst == nullptr || std::abs(r.error) > std::abs(worst->error))
                worst = &r;
        }
        if (o.json) {
            nlohmann::ordered_json points = nlohmann::ordered_json::array();
            for (const auto& r : rows)
                points.push_back({ { "id", r.point->id }, { "device", r.point->device },
                    { "math", toString(r.point->math) }, { "role", r.point->calibration ? "calibration" : "check" },
                    { "measured_us", r.point->measuredSeconds * 1e6 }, { "predicted_us", r.predictedSeconds * 1e6 },
                    { "error", r.error }, { "tile", tileOf(*r.point, catalog) }, { "source", r.point->source } });
            nlohmann::ordered_json out { { "fitted_efficiency", { { "fp32", fitFp32 }, { "tensor", fitTensor } } },
                { "checks", checks }, { "checks_within_15_percent", within }, { "points", points } };
            fmt::print("{}\n", out.dump(2));
            return 0;
        }
        fmt::print("GEMM model (tile and wave quantisation, split-K) against {} measured points\n", rows.size());
        fmt::print("Efficiency fitted to the calibration points: FP32 cores {:.3f}, tensor cores {:.3f}\n", fitFp32,
            fitTensor);
        fmt::print("\n{:<12} {:<10} {:<5} {:<38} {:>12} {:>13} {:>7}  {}\n", "role", "device", "math", "point",
            "measured us", "predicted us", "error", "tile");
        for (const auto& r : rows)
            fmt::print("{:<12} {:<10} {:<5} {:<38} {:>12.1f} {:>13.1f} {:>+6.1f}%  {}\n",
                r.point->calibration ? "calibration" : "check", r.point->device, toString(r.point->math), r.point->id,
                r.point->measuredSeconds * 1e6, r.predictedSeconds * 1e6, 100 * r.error, tileOf(*r.point, catalog));
        fmt::print("\nChecked points within 15%: {} of {}", within, checks);
        if (worst != nullptr)
            fmt::print(
                "; largest error {:+.1f}% ({} on {})", 100 * worst->error, worst->point->id, worst->point->device);
        fmt::print("\nSources:\n");
        for (const auto& [key, text] : measurements.sources)
            fmt::print("  {}: {}\n", key, text);
        return 0;
    }

} // namespace

void addGemmCheckCommand(CLI::App& app, Action& action)
{
    auto* cmd = app.add_subcommand("gemm-check",
        "The GPU cost model's GEMM times against measured GEMMs: efficiencies fitted to the calibration points, "
        "every point's error");
    auto o = std::make_shared<GemmCheckOptions>();
    cmd->add_option("--measurements", o->measurements, "GEMM measurement file (default: the built-in points)")
        ->check(CLI::ExistingFile);
    cmd->add_option("--catalog", o->catalog, "Device catalog JSON (default: the built-in one)")
        ->check(CLI::ExistingFile);
    cmd->add_flag("--json", o->json, "Print JSON");
    cmd->callback([&action, o] { action = [o] { return runGemmCheck(*o); }; });
}

} // namespace ps::app
