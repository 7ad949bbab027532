#include "cluster/device_catalog.h"

#include "cluster/json_detail.h"
#include "util/enum_names.h"
#include "util/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace ps {

namespace detail {
    extern const std::string_view kBuiltinDeviceCatalog;

    nlohmann::ordered_json linkToJson(const LinkSpec& link)
    {
        return { { "kind", link.kind }, { "bandwidth", link.bandwidth }, { "latency", link.latencySeconds } };
    }

    LinkSpec linkFromJson(const nlohmann::json& j, const std::string& where)
    {
        if (!j.is_object())
            throw Error(where + ": a link must be an object with kind and bandwidth");
        return { j.value("kind", std::string("link")), j.value("bandwidth", 0.0), j.value("latency", 0.0) };
    }

    nlohmann::ordered_json deviceToJson(const DeviceSpec& d)
    {
        return { { "id", d.id }, { "name", d.name }, { "memory_bytes", d.memoryBytes },
            { "flops",
                { { "fp32", d.flopsFp32 }, { "tf32", d.flopsTf32 }, { "fp16", d.flopsFp16 },
                    { "bf16", d.flopsBf16 } } },
            { "memory_bandwidth", d.memoryBandwidth }, { "multiprocessors", d.multiprocessors },
            { "gemm_efficiency", { { "fp32", d.gemmEfficiencyFp32 }, { "tensor", d.gemmEfficiencyTensor } } },
            { "cache_bytes", d.cacheBytes }, { "cache_bandwidth", d.cacheBandwidth },
            { "kernel_overhead_ns", d.kernelOverheadNs }, { "host_link", linkToJson(d.hostLink) },
            { "peer_link", linkToJson(d.peerLink) }, { "measured", d.measured }, { "cores", d.cores } };
    }

    DeviceSpec deviceFromJson(const nlohmann::json& j, const std::string& where)
    {
        if (!j.is_object() || !j.contains("id"))
            throw Error(where + ": every device needs an \"id\"");
        DeviceSpec d;
        d.id = j.at("id").get<std::string>();
        const auto at = where + ", device '" + d.id + "'";
        d.name = j.value("name", d.id);
        d.memoryBytes = integerValue(j, "memory_bytes", std::int64_t { 0 }, at);
        const auto flops = j.value("flops", nlohmann::json::object());
        d.flopsFp32 = flops.value("fp32", 0.0);
        d.flopsTf32 = flops.value("tf32", d.flopsFp32);
        d.flopsFp16 = flops.value("fp16", d.flopsFp32);
        d.flopsBf16 = flops.value("bf16", d.flopsFp32);
        d.memoryBandwidth = j.value("memory_bandwidth", 0.0);
        d.multiprocessors = static_cast<int>(integerValue(j, "multiprocessors", std::int64_t { 0 }, at));
        const auto gemm = j.value("gemm_efficiency", nlohmann::json::object());
        d.gemmEfficiencyFp32 = gemm.value("fp32", 0.0);
        d.gemmEfficiencyTensor = gemm.value("tensor", 0.0);
        if (d.multiprocessors < 0 || d.gemmEfficiencyFp32 < 0 || d.gemmEfficiencyFp32 > 1 || d.gemmEfficiencyTensor < 0
            || d.gemmEfficiencyTensor > 1)
            throw Error(at + ": multiprocessors must be >= 0 and gemm_efficiency values within 0..1");
        d.cacheBytes = integerValue(j, "cache_bytes", std::int64_t { 0 }, at);
        d.cacheBandwidth = j.value("cache_bandwidth", 0.0);
        d.kernelOverheadNs = j.value("kernel_overhead_ns", 0.0);
        if (d.cacheBytes < 0 || d.cacheBandwidth < 0 || d.kernelOverheadNs < 0)
            throw Error(at + ": cache_bytes, cache_bandwidth and kernel_overhead_ns must be >= 0");
        d.hostLink = linkFromJson(j.value("host_link", nlohmann::json::object()), at);
        d.peerLink = linkFromJson(j.value("peer_link", nlohmann::json::object()), at);
        d.measured = j.value("measured", false);
        d.cores = static_cast<int>(integerValue(j, "cores", std::int64_t { 0 }, at));
        if (d.cores < 0)
            throw Error(at + ": cores must be >= 0");
        if (!d.measured && (d.memoryBytes <= 0 || d.flopsFp32 <= 0 || d.memoryBandwidth <= 0))
            throw Error(at + ": memory_bytes, flops.fp32 and memory_bandwidth must be positive");
        return d;
    }
} // namespace detail

double DeviceSpec::peakFlops(MathMode mode) const
{
    switch (mode) {
    case MathMode::Fp32:
        return flopsFp32;
    case MathMode::Tf32:
        return flopsTf32;
    case MathMode::Fp16:
        return flopsFp16;
    case MathMode::Bf16:
        return flopsBf16;
    }
    return flopsFp32;
}

std::string_view toString(MathMode mode)
{
    switch (mode) {
    case MathMode::Fp32:
        return "fp32";
    case MathMode::Tf32:
        return "tf32";
    case MathMode::Fp16:
        return "fp16";
    case MathMode::Bf16:
        return "bf16";
    }
    return "fp32";
}

MathMode parseMathMode(std::string_view text)
{
    return parseByName("math mode", text, { MathMode::Fp32, MathMode::Tf32, MathMode::Fp16, MathMode::Bf16 });
}

const DeviceCatalog& DeviceCatalog::builtin()
{
    static const DeviceCatalog kCatalog = fromJson(detail::kBuiltinDeviceCatalog, "built-in device catalog");
    return kCatalog;
}

DeviceCatalog DeviceCatalog::fromJson(std::string_view json, const std::string& source)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("devices") || !j["devices"].is_array())
        throw Error(source + ": not a device catalog (expected {\"devices\": [...]})");
    DeviceCatalog catalog;
    try {
        // The catalog's GEMM efficiencies apply to each device that names none of its own.
        const auto gemm = j.value("gemm_efficiency", nlohmann::json::object());
        for (const char* pipe : { "fp32", "tensor" }) {
            const double e = gemm.value(pipe, 0.0);
            if (e < 0 || e > 1)
                throw Error(source + ": gemm_efficiency values must be within 0..1");
        }
        for (const auto& d : j["devices"]) {
            auto spec = detail::deviceFromJson(d, source);
            if (spec.gemmEfficiencyFp32 == 0)
                spec.gemmEfficiencyFp32 = gemm.value("fp32", 0.0);
            if (spec.gemmEfficiencyTensor == 0)
                spec.gemmEfficiencyTensor = gemm.value("tensor", 0.0);
            catalog.put(std::move(spec));
        }
    } catch (const nlohmann::json::exception& e) { // a field of the wrong type ("memory_bytes": "x")
        throw Error(source + ": " + e.what());
    }
    return catalog;
}

const DeviceSpec& DeviceCatalog::find(std::string_view id) const
{
    const auto it = std::find_if(m_devices.begin(), m_devices.end(), [id](const auto& d) { return d.id == id; });
    if (it != m_devices.end())
        return *it;
    std::string known;
    for (const auto& d : m_devices)
        known += (known.empty() ? "" : ", ") + d.id;
    throw Error("unknown device '" + std::string(id) + "' (catalog: " + known + ")");
}

namespace {

    // Lower-case letters and digits only: "GeForce RTX 2080 Ti" -> "geforcertx2080ti".
    std::string squeezed(std::string_view text)
    {
        std::string out;
        for (const char c : text) {
            if (std::isalnum(static_cast<unsigned char>(c)))
                out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
        }
        return out;
    }

    // An entry's model: its name without the vendor, the form factor and the memory size.
    std::string modelKey(std::string_view name)
    {
        std::string key;
        std::size_t at = 0;
        while (at < name.size()) {
            const auto end = std::min(name.find(' ', at), name.size());
            const auto word = squeezed(name.substr(at, end - at));
            at = end + 1;
            const bool memory = word.size() > 2 && word.ends_with("gb")
                && std::all_of(
                    word.begin(), word.end() - 2, [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
            if (word.empty() || word == "nvidia" || word.starts_with("sxm") || word == "pcie" || memory)
                continue;
            key += word;
        }
        return key;
    }

} // namespace

const DeviceSpec* DeviceCatalog::matchGpu(std::string_view gpuName, std::int64_t memoryBytes) const
{
    const auto name = squeezed(gpuName);
    const DeviceSpec* best = nullptr;
    std::size_t bestKey = 0;
    double bestGap = 0;
    for (const auto& d : m_devices) {
        if (d.measured || d.memoryBytes <= 0)
            continue; // the CPU placeholder
        const auto key = modelKey(d.name);
        if (key.empty() || name.find(key) == std::string::npos)
            continue;
        const double gap = std::abs(static_cast<double>(memoryBytes) / static_cast<double>(d.memoryBytes) - 1.0);
        if (gap > 0.15)
            continue;
        if (best == nullptr || key.size() > bestKey || (key.size() == bestKey && gap < bestGap)) {
            best = &d;
            bestKey = key.size();
            bestGap = gap;
        }
    }
    return best;
}

void DeviceCatalog::put(DeviceSpec spec)
{
    const auto it = std::find_if(m_devices.begin(), m_devices.end(), [&](const auto& d) { return d.id == spec.id; });
    if (it != m_devices.end())
        *it = std::move(spec);
    else
        m_devices.push_back(std::move(spec));
}

std::string deviceSpecToJson(const DeviceSpec& spec)
{
    return detail::deviceToJson(spec).dump();
}

DeviceSpec deviceSpecFromJson(std::string_view json, const std::string& source)
{
    const auto j = nlohmann::json::parse(json, nullptr, false);
    if (j.is_discarded())
        throw Error(source + ": not valid JSON");
    try {
        return detail::deviceFromJson(j, source);
    } catch (const nlohmann::json::exception& e) { // a field of the wrong type ("flops": {"fp32": "x"})
        throw Error(source + ": " + e.what());
    }
}

} // namespace ps
