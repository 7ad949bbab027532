// Internal to core: conversions of catalog and cluster values to and from JSON.
#pragma once

#include "cluster/cluster.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <limits>

namespace ps::detail {

nlohmann::ordered_json linkToJson(const LinkSpec& link);
LinkSpec linkFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json deviceToJson(const DeviceSpec& d);
DeviceSpec deviceFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json traceToJson(const BandwidthTrace& trace);
// Throws ps::Error naming `where` for an empty or unsorted trace.
BandwidthTrace traceFromJson(const nlohmann::json& j, const std::string& where);

// j[key] as an integer, `fallback` when absent. nlohmann converts a JSON float to an integer with
// a plain cast, undefined outside the type's range ("memory_bytes": 1e99, found by tests/fuzz):
// such a value throws ps::Error naming `where` and the key.
template <typename T> T integerValue(const nlohmann::json& j, const char* key, T fallback, const std::string& where)
{
    const auto it = j.find(key);
    if (it == j.end())
        return fallback;
    if (it->is_number_float()) {
        const double v = it->get<double>();
        // Both bounds as doubles: max() rounds up to 2^63 (or 2^31 exactly), hence `<`.
        if (!(v >= static_cast<double>(std::numeric_limits<T>::min())
                && v < -static_cast<double>(std::numeric_limits<T>::min())))
            throw Error(where + ": \"" + key + "\" is out of range");
        return static_cast<T>(v);
    }
    return it->get<T>();
}

} // namespace ps::detail
