// Internal to core: conversions of catalog and cluster values to and from JSON.
#pragma once

#include "cluster/cluster.h"

#include <nlohmann/json.hpp>

namespace ps::detail {

nlohmann::ordered_json linkToJson(const LinkSpec& link);
LinkSpec linkFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json deviceToJson(const DeviceSpec& d);
DeviceSpec deviceFromJson(const nlohmann::json& j, const std::string& where);
nlohmann::ordered_json traceToJson(const BandwidthTrace& trace);
// Throws ps::Error naming `where` for an empty or unsorted trace.
BandwidthTrace traceFromJson(const nlohmann::json& j, const std::string& where);

} // namespace ps::detail
