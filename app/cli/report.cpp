#include "cli/report.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

namespace ps::app {

std::string summaryText(const GraphSummary& s, const std::string& projectPath, int schemaVersion)
{
    std::string out;
    out += fmt::format("Project        {} (schema {})\n", projectPath, schemaVersion);
    out += fmt::format("Model          {} ({}), micro-batch {}\n", s.name, s.family, s.microBatch);
    out += fmt::format("Graph          {} nodes, {} tensors, {} layers\n", s.nodeCount, s.tensorCount, s.layerCount);
    out += fmt::format("Parameters     {} ({}; {} at fp32)\n", formatCount(static_cast<double>(s.parameterCount)),
        s.parameterCount, formatBytes(static_cast<double>(s.parameterBytes)));
    out += fmt::format("FLOPs/sample   forward {}, forward+backward {}\n", formatFlops(s.forwardFlopsPerSample),
        formatFlops(s.forwardFlopsPerSample + s.backwardFlopsPerSample));
    out += fmt::format("Memory/sample  {} saved for backward, {} of activations written\n",
        formatBytes(static_cast<double>(s.activationBytesPerSample)),
        formatBytes(static_cast<double>(s.outputBytesPerSample)));
    out += "Ops            ";
    for (std::size_t i = 0; i < s.opHistogram.size(); ++i)
        out += fmt::format("{}{} {}", i ? ", " : "", s.opHistogram[i].first, s.opHistogram[i].second);
    return out + "\n";
}

std::string inputDimsText(const std::vector<OnnxInputDim>& dims, const std::string& indent)
{
    std::string out;
    std::string current;
    for (const auto& d : dims) {
        if (d.input != current) {
            current = d.input;
            out += fmt::format("{}{}'{}':", out.empty() ? "" : "\n", indent, d.input);
        } else {
            out += ",";
        }
        const auto role = d.role == DimRole::Other ? std::string() : std::string(toString(d.role)) + " ";
        if (d.dynamic)
            out += fmt::format(
                " [{}] {}{} (dynamic{})", d.axis, role, d.size, d.param.empty() ? "" : " '" + d.param + "'");
        else if (d.size != d.exported)
            out +=
                fmt::format(" [{}] {}{} (fixed at {} in the file, re-specialised)", d.axis, role, d.size, d.exported);
        else
            out += fmt::format(" [{}] {}{} (fixed)", d.axis, role, d.size);
    }
    return out.empty() ? out : out + "\n";
}

std::string summaryJson(const GraphSummary& s, const std::string& projectPath, int schemaVersion)
{
    auto j = nlohmann::ordered_json::parse(summaryToJson(s));
    nlohmann::ordered_json out = { { "project", projectPath }, { "schema_version", schemaVersion } };
    out.update(j);
    return out.dump(2) + "\n";
}

} // namespace ps::app
