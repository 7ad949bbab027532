// PyTorch profiler traces (`prof.export_chrome_trace()`): Kineto's object form (traceEvents,
// schemaVersion, deviceProperties; categories cpu_op, user_annotation, cuda_runtime, kernel,
// gpu_memcpy, ...) and the legacy profiler's bare array of "X" events without categories.
#include "text.h"
#include "trace_model.h"
#include "util/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

namespace ps::profiler {
namespace {

    using Json = nlohmann::json;

    const std::set<std::string, std::less<>> kDeviceCategories { "kernel", "gpu_memcpy", "gpu_memset", "memcpy",
        "memset" };
    const std::set<std::string, std::less<>> kRuntimeCategories { "cuda_runtime", "cuda_driver", "runtime" };
    // GPU copies of annotations (would count ranges twice) and the profiler's own span.
    const std::set<std::string, std::less<>> kIgnoredCategories { "gpu_user_annotation", "trace" };

    // pid and tid are numbers in Kineto traces and strings ("CPU functions") in legacy ones.
    std::string idText(const Json& e, const char* key)
    {
        const auto it = e.find(key);
        if (it == e.end())
            return {};
        return it->is_string() ? it->get<std::string>() : it->dump();
    }

    double number(const Json& e, const char* key, double fallback)
    {
        const auto it = e.find(key);
        if (it == e.end())
            return fallback;
        if (it->is_number())
            return it->get<double>();
        if (it->is_string()) {
            try {
                return std::stod(it->get<std::string>());
            } catch (const std::exception&) {
                return fallback;
            }
        }
        return fallback;
    }

    // Kineto's "Input Dims" (record_shapes): one list of sizes per input, empty for a non-tensor.
    std::vector<Shape> inputDims(const Json& e)
    {
        std::vector<Shape> out;
        const auto args = e.find("args");
        if (args == e.end() || !args->is_object())
            return out;
        const auto dims = args->find("Input Dims");
        if (dims == args->end() || !dims->is_array())
            return out;
        for (const auto& input : *dims) {
            Shape shape;
            if (input.is_array()) {
                for (const auto& d : input) {
                    if (!d.is_number_integer()) {
                        shape.clear();
                        break;
                    }
                    shape.push_back(d.get<std::int64_t>());
                }
            }
            out.push_back(std::move(shape));
        }
        return out;
    }

    std::int64_t argInt(const Json& e, const char* key)
    {
        const auto args = e.find("args");
        if (args == e.end() || !args->is_object())
            return -1;
        // An id is a non-negative integer; anything else (a fraction, 1e85, nan) reads as absent.
        const double v = number(*args, key, -1);
        if (!(v >= 0 && v < 9.0e18) || v != std::floor(v))
            return -1;
        return static_cast<std::int64_t>(v);
    }

    struct ChromeLaunch
    {
        std::int64_t thread = -1;
        double atNs = 0;
    };

    struct DeviceEvent
    {
        std::string name;
        double durationNs = 0;
        std::int64_t correlation = -1;
        std::int64_t externalId = -1;
        double startNs = 0;
        std::int64_t device = -1; // args.device
    };

    class ChromeReader
    {
    public:
        explicit ChromeReader(const std::filesystem::path& path)
            : m_file("'" + path.string() + "'")
        {
        }

        TraceData read(const std::string& text)
        {
            Json root;
            try {
                root = Json::parse(text);
            } catch (const Json::exception& e) { // parse_error, or out_of_range for a number like 1e999
                throw Error(m_file + " is not valid JSON (" + std::string(e.what()) + ")");
            }
            m_data.format = "kineto-json";
            const Json* events = nullptr;
            if (root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array()) {
                events = &root["traceEvents"];
                const auto v = root.find("schemaVersion");
                m_data.schemaVersion =
                    v == root.end() ? "unversioned" : (v->is_string() ? v->get<std::string>() : v->dump());
            } else if (root.is_array()) {
                events = &root;
                m_data.schemaVersion = "legacy";
            } else {
                throw Error(m_file + " is JSON but not a Chrome or PyTorch profiler trace (no \"traceEvents\" array)");
            }
            for (const auto& e : *events) {
                if (e.is_object())
                    readEvent(e);
            }
            if (m_complete == 0)
                throw Error(m_file + " is JSON but has no trace events with \"ph\": \"X\" (not a profiler trace)");
            resolveLaunches();
            if (root.is_object())
                readGpu(root);
            return std::move(m_data);
        }

    private:
        std::int64_t threadOf(const Json& e, const std::string& tid)
        {
            const auto key = idText(e, "pid") + "/" + tid;
            const auto [it, added] = m_threads.emplace(key, static_cast<std::int64_t>(m_threads.size()));
            return it->second;
        }

        void readEvent(const Json& e)
        {
            const auto ph = e.value("ph", std::string());
            const auto name =
                e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : std::string();
            if (ph == "M" && name == "thread_name") {
                const auto args = e.find("args");
                if (args != e.end() && args->is_object() && args->contains("name") && (*args)["name"].is_string())
                    m_data.threadNames[threadOf(e, idText(e, "tid"))] = (*args)["name"].get<std::string>();
                return;
            }
            if (ph != "X")
                return;
            ++m_complete;
            const auto cat =
                e.contains("cat") && e["cat"].is_string() ? toLower(e["cat"].get<std::string>()) : std::string();
            if (kIgnoredCategories.contains(cat))
                return;
            const double startNs = number(e, "ts", 0) * 1000.0;
            const double durationNs = std::max(0.0, number(e, "dur", 0) * 1000.0);
            if (kDeviceCategories.contains(cat)) {
                m_device.push_back({ name, durationNs, argInt(e, "correlation"), argInt(e, "External id"), startNs,
                    argInt(e, "device") });
                return;
            }
            const auto thread = threadOf(e, idText(e, "tid"));
            TraceSpan span;
            span.name = name;
            span.thread = thread;
            span.startNs = startNs;
            span.endNs = startNs + durationNs;
            span.sequence = argInt(e, "Sequence number");
            // Framework operators: Kineto's cpu_op, or a legacy event named like one.
            span.op = cat == "cpu_op" || (cat.empty() && name.find("::") != std::string::npos);
            span.python = cat == "python_function";
            if (span.op)
                span.inputDims = inputDims(e);
            m_data.spans.push_back(std::move(span));
            if (kRuntimeCategories.contains(cat)) {
                if (const auto c = argInt(e, "correlation"); c >= 0)
                    m_byCorrelation.emplace(c, ChromeLaunch { thread, startNs });
            } else if (const auto x = argInt(e, "External id"); x >= 0) {
                m_byExternalId.emplace(x, ChromeLaunch { thread, startNs });
            }
        }

        // The deviceProperties entry of the device that ran most of the kernels' time (where the
        // kernels name none, the first entry).
        void readGpu(const Json& root)
        {
            const auto properties = root.find("deviceProperties");
            if (properties == root.end() || !properties->is_array() || m_device.empty())
                return;
            std::map<std::int64_t, double> busy;
            for (const auto& d : m_device)
                busy[d.device] += d.durationNs;
            const auto most = std::max_element(
                busy.begin(), busy.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
            for (const auto& p : *properties) {
                if (!p.is_object() || !p.contains("name") || !p["name"].is_string())
                    continue;
                const auto id = p.contains("id") && p["id"].is_number_integer() ? p["id"].get<std::int64_t>() : -1;
                if (most->first >= 0 && id != most->first)
                    continue;
                m_data.gpu.name = p["name"].get<std::string>();
                m_data.gpu.memoryBytes = p.contains("totalGlobalMem") && p["totalGlobalMem"].is_number_integer()
                    ? p["totalGlobalMem"].get<std::int64_t>()
                    : 0;
                return;
            }
        }

        // A kernel's launch: the runtime call with its correlation id, else the op with its
        // External id.
        void resolveLaunches()
        {
            for (const auto& d : m_device) {
                ChromeLaunch at;
                if (const auto it = m_byCorrelation.find(d.correlation);
                    d.correlation >= 0 && it != m_byCorrelation.end())
                    at = it->second;
                else if (const auto x = m_byExternalId.find(d.externalId);
                         d.externalId >= 0 && x != m_byExternalId.end())
                    at = x->second;
                m_data.work.push_back({ d.name, d.durationNs, at.thread, at.atNs, d.startNs });
            }
        }

        std::string m_file;
        TraceData m_data;
        std::int64_t m_complete = 0;
        std::unordered_map<std::string, std::int64_t> m_threads;
        std::vector<DeviceEvent> m_device;
        std::unordered_map<std::int64_t, ChromeLaunch> m_byCorrelation;
        std::unordered_map<std::int64_t, ChromeLaunch> m_byExternalId;
    };

} // namespace

TraceData readChromeTraceJson(const std::filesystem::path& path, const std::string& text)
{
    try {
        return ChromeReader(path).read(text);
    } catch (const Json::exception& e) {
        // A field of the wrong type ("ph": 1) where the reader asks for a string or a number.
        throw Error("'" + path.string() + "' is not a trace this build reads (" + std::string(e.what()) + ")");
    }
}

} // namespace ps::profiler
