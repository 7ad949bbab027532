// `pipestudio reproduce`: each paper's headline tables and figures re-created with PipeStudio's
// planner and simulator on the paper's models, devices, stages, schedules and batch definitions,
// the paper's numbers beside ours with the ratio. The paper's numbers are inputs, read from
// resources/reproduction/papers.json (compiled in); every assumption where a paper is silent is
// stated in the report. A report is Markdown plus figure specifications; the app renders the
// figures with its own plotting (gui/plots/figure_plot.h).
// Depends on: plan/, sim/, zoo/, cost/; no Qt.
#pragma once

#include "zoo/model_config.h"

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace ps {

// A bar chart over categories (x empty) or a line chart over x, one value per category/x per series.
struct ReportFigure
{
    std::string file; // "dawnpiper-sync.png", next to the report
    std::string title;
    std::string xLabel;
    std::string yLabel;
    std::vector<std::string> categories;
    std::vector<double> x;
    struct Series
    {
        std::string name;
        std::vector<double> values; // NaN: no value
    };
    std::vector<Series> series;
};

struct PaperReport
{
    std::string paper; // "dawnpiper"
    std::string markdown; // one section, figures referenced by file name
    std::vector<ReportFigure> figures;
};

struct ReproduceOptions
{
    bool quick = false; // fewer models and stage counts (tests, a first look)
    std::function<void(const std::string&)> progress; // one line per step of work
};

// The papers `reproduce` knows, in report order.
[[nodiscard]] const std::vector<std::string>& reproduciblePapers();
// One paper's section; throws ps::Error naming the paper when it is unknown.
[[nodiscard]] PaperReport reproducePaper(const std::string& paper, const ReproduceOptions& options);
// The whole report: a title, how it was made, then each paper's section.
[[nodiscard]] std::string reportMarkdown(const std::vector<PaperReport>& papers, const std::string& version);
// The papers' numbers as shipped (resources/reproduction/papers.json).
[[nodiscard]] std::string_view paperNumbersJson();

namespace detail {
    // A cell with no value (one side does not fit or was not run).
    inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

    PaperReport reproduceDawnPiper(const ReproduceOptions& options);
    PaperReport reproduceAdaGrouper(const ReproduceOptions& options);
    PaperReport reproduceFtpipe(const ReproduceOptions& options);
    PaperReport reproducePatrickStar(const ReproduceOptions& options);
    PaperReport reproduceMegatron(const ReproduceOptions& options);
    // Published measurements as checks: calibrated on a named subset, checked on the rest.
    PaperReport reproducePublished(const ReproduceOptions& options);
    std::string fixed(double value, int decimals); // "1.23"
    // "1.23x" or "-" when either side is missing.
    std::string ratioText(double ours, double paper);
    // A Markdown table.
    std::string markdownTable(
        const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows);
    // A paper's model from its papers.json entry: the zoo preset "zoo" with the sizes the entry
    // sets ("layers", "hidden", "seq"; e.g. DawnPiper's 28M AmoebaNet-D at 120 filters).
    ModelConfig paperModel(const nlohmann::json& entry);
} // namespace detail

} // namespace ps
