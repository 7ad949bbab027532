#include "cost/gemm_check.h"

#include "util/error.h"

#include <nlohmann/json.hpp>

namespace ps {

namespace detail {
    extern const std::string_view kGemmMeasurements;
}

namespace {

    GemmPoint pointFromJson(const nlohmann::json& j, const std::string& where)
    {
        GemmPoint p;
        p.id = j.at("id").get<std::string>();
        const auto at = where + ", point '" + p.id + "'";
        p.device = j.at("device").get<std::string>();
        p.math = parseMathMode(j.at("math").get<std::string>());
        for (const auto& g : j.at("gemms")) {
            if (!g.is_array() || g.size() != 4)
                throw Error(at + ": each GEMM is [batch, M, N, K]");
            GemmShape s { g[0].get<double>(), g[1].get<double>(), g[2].get<double>(), g[3].get<double>() };
            if (s.batch <= 0 || s.m <= 0 || s.n <= 0 || s.k <= 0)
                throw Error(at + ": GEMM sizes must be positive");
            p.gemms.push_back(s);
        }
        p.measuredSeconds = j.at("measured_us").get<double>() * 1e-6;
        if (p.gemms.empty() || p.measuredSeconds <= 0)
            throw Error(at + ": needs GEMMs and a positive measured_us");
        const auto role = j.at("role").get<std::string>();
        if (role != "calibration" && role != "check")
            throw Error(at + ": role is 'calibration' or 'check', not '" + role + "'");
        p.calibration = role == "calibration";
        p.source = j.value("source", std::string());
        return p;
    }

} // namespace

GemmMeasurements parseGemmMeasurements(std::string_view json, const std::string& source)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("points") || !j["points"].is_array())
        throw Error(source + ": not a GEMM measurement file (expected {\"points\": [...]})");
    GemmMeasurements m;
    try {
        if (j.contains("sources") && j["sources"].is_object()) {
            for (auto it = j["sources"].begin(); it != j["sources"].end(); ++it)
                m.sources.emplace_back(it.key(), it.value().get<std::string>());
        }
        for (const auto& p : j["points"])
            m.points.push_back(pointFromJson(p, source));
    } catch (const nlohmann::json::exception& e) {
        throw Error(source + ": " + e.what());
    }
    return m;
}

const GemmMeasurements& builtinGemmMeasurements()
{
    static const GemmMeasurements kPoints = parseGemmMeasurements(detail::kGemmMeasurements, "gemm_measurements.json");
    return kPoints;
}

bool onTensorCores(const GemmPoint& point, const DeviceCatalog& catalog)
{
    const auto& d = catalog.find(point.device);
    return point.math != MathMode::Fp32 && d.peakFlops(point.math) > d.flopsFp32;
}

double predictGemmPoint(const GemmPoint& point, const DeviceCatalog& catalog, double efficiency)
{
    auto device = gemmDevice(catalog.find(point.device), point.math);
    if (efficiency > 0)
        device.efficiency = efficiency;
    double seconds = 0;
    for (const auto& g : point.gemms)
        seconds += estimateGemm(g, device).seconds;
    return seconds;
}

double fitGemmEfficiency(const GemmMeasurements& m, const DeviceCatalog& catalog, bool tensor)
{
    double measured = 0;
    for (const auto& p : m.points) {
        if (p.calibration && onTensorCores(p, catalog) == tensor)
            measured += p.measuredSeconds;
    }
    if (measured <= 0)
        return 0;
    const auto predicted = [&](double e) {
        double s = 0;
        for (const auto& p : m.points) {
            if (p.calibration && onTensorCores(p, catalog) == tensor)
                s += predictGemmPoint(p, catalog, e);
        }
        return s;
    };
    // Predicted time falls as the efficiency rises: bisect.
    double lo = 0.01;
    double hi = 1.0;
    for (int i = 0; i < 60; ++i) {
        const double mid = 0.5 * (lo + hi);
        (predicted(mid) > measured ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
}

std::vector<GemmCheckRow> checkGemmModel(const GemmMeasurements& m, const DeviceCatalog& catalog)
{
    std::vector<GemmCheckRow> rows;
    for (const auto& p : m.points) {
        const double predicted = predictGemmPoint(p, catalog);
        rows.push_back({ &p, predicted, predicted / p.measuredSeconds - 1 });
    }
    return rows;
}

} // namespace ps
