// Published measurements as checks of the cost model (issue P15, deliverable 2): the cluster model
// calibrated on one named subset of a paper's measured throughputs and checked on the rest, both
// reported. Megatron-LM's Table 1 (Narayanan et al., SC'21: ten GPT models measured on 32 to 3,072
// A100s, TFLOP/s per GPU) is the one set of measured figures shipped today; its rows run as the
// Megatron section runs them (report/megatron_rows.h). One constant is fitted: the fraction of the
// A100's tensor-core peak its GEMMs reach (`gemm_efficiency.tensor` in the device catalog), by
// bisection until the calibration row's predicted throughput equals the measured one. Every other
// row is predicted with the catalog's constant and with the fitted one.
#include "cluster/device_catalog.h"
#include "report/megatron_rows.h"
#include "report/reproduction.h"

#include <cmath>

namespace ps::detail {

namespace {

    // The tensor-core GEMM efficiency at which `row` is predicted at `measured` TFLOP/s per GPU
    // (the prediction rises with it), within [0.05, 1]; NaN when the row cannot run.
    double fitTensorEfficiency(
        const GptShape& model, const ScaleConfig& config, const NodeSpec& node, DeviceSpec device, double measured)
    {
        double lo = 0.05;
        double hi = 1.0;
        for (int i = 0; i < 40; ++i) {
            device.gemmEfficiencyTensor = 0.5 * (lo + hi);
            const auto e = estimateScale(model, config, node, device);
            if (!e.valid)
                return kNaN;
            (e.tflopsPerGpu < measured ? lo : hi) = device.gemmEfficiencyTensor;
        }
        return 0.5 * (lo + hi);
    }

    std::string signedPercent(double error)
    {
        return (error >= 0 ? "+" : "") + fixed(100 * error, 1) + "%";
    }

} // namespace

namespace {

    // Every row of Table 1 priced with the catalog's GEMM efficiency and with the fitted one.
    struct CheckedRows
    {
        std::vector<std::vector<std::string>> rows;
        int checked = 0; // rows other than the calibration row
        int withinBefore = 0; // within 15%, catalog constants
        int withinAfter = 0; // within 15%, calibrated
        double worstAfter = 0;
        ReportFigure figure;
    };

    CheckedRows checkRows(const nlohmann::json& paper, const NodeSpec& node, const DeviceSpec& catalog,
        const DeviceSpec& fitted, const std::string& calibrationLabel, const ReproduceOptions& options)
    {
        const auto& table = paper.at("table1");
        CheckedRows c;
        c.figure.file = "published-megatron.png";
        c.figure.title = "Megatron-LM Table 1: predicted / measured TFLOP/s per GPU";
        c.figure.yLabel = "predicted / measured";
        ReportFigure::Series before { "catalog constants", {} };
        ReportFigure::Series after { "calibrated on " + calibrationLabel, {} };
        for (std::size_t i = 0; i < table.size(); ++i) {
            const auto& row = table[i];
            if (options.quick && i > 1 && i + 1 != table.size())
                continue;
            const auto label = fixed(row.at("params_billion").get<double>(), 1) + "B";
            if (options.progress)
                options.progress("published: Megatron-LM " + label);
            const auto model = megatronModel(paper, row);
            const auto config = megatronPaperConfig(row);
            const double measured = row.at("tflops_per_gpu").get<double>();
            const auto a = estimateScale(model, config, node, catalog);
            const auto b = estimateScale(model, config, node, fitted);
            const bool calibration = i == 0;
            if (!a.valid || !b.valid) {
                c.rows.push_back(
                    { label, std::to_string(config.gpus()), config.text(), calibration ? "calibration" : "check",
                        fixed(measured, 0), "-", "-", "invalid: " + (a.valid ? b.reason : a.reason) });
                continue;
            }
            const double errorBefore = a.tflopsPerGpu / measured - 1;
            const double errorAfter = b.tflopsPerGpu / measured - 1;
            if (!calibration) {
                ++c.checked;
                c.withinBefore += std::abs(errorBefore) <= 0.15 ? 1 : 0;
                c.withinAfter += std::abs(errorAfter) <= 0.15 ? 1 : 0;
                c.worstAfter = std::max(c.worstAfter, std::abs(errorAfter));
            }
            c.rows.push_back(
                { label, std::to_string(config.gpus()), config.text(), calibration ? "calibration" : "check",
                    fixed(measured, 0), fixed(a.tflopsPerGpu, 1) + " (" + signedPercent(errorBefore) + ")",
                    fixed(b.tflopsPerGpu, 1) + " (" + signedPercent(errorAfter) + ")", "" });
            c.figure.categories.push_back(label);
            before.values.push_back(a.tflopsPerGpu / measured);
            after.values.push_back(b.tflopsPerGpu / measured);
        }
        c.figure.series = { before, after };
        return c;
    }

    std::string publishedMarkdown(const nlohmann::json& paper, const DeviceSpec& catalog, const DeviceSpec& fitted,
        const std::string& calibrationLabel, const CheckedRows& c)
    {
        const auto& calibrationRow = paper.at("table1").at(0);
        std::string md = "## Published measurements as checks: calibrate on one subset, check on the rest\n\n";
        md += "Measured throughputs from the papers, each with its source, held against the cost model. The one set "
              "shipped today is Megatron-LM's Table 1 ("
            + paper.at("source").get<std::string>()
            + "); the measured figures of its Figs. 7 and 11 (throughput against micro-batch size on one A100, "
              "weak scaling of pipeline parallelism) are not in `resources/reproduction/papers.json` yet, and the "
              "seed papers report absolute throughput only for PatrickStar (its section above). Each row runs as "
              "the Megatron section runs it (the paper's t, p, GPUs and global batch; micro-batch, virtual stages and "
              "gradient-reduction overlap as NVIDIA's artifact scripts for Table 1 set them; full recomputation).\n\n";
        md += "**Calibration subset:** the " + calibrationLabel + " row (" + calibrationRow.at("gpus").dump()
            + " GPUs, no tensor or pipeline parallelism: its time is the GEMMs' and the data-parallel "
              "all-reduce's). **Fitted:** the fraction of the "
            + catalog.name
            + "'s tensor-core peak its GEMMs reach, by bisection until that row's prediction equals its "
              "measurement: "
            + fixed(fitted.gemmEfficiencyTensor, 3) + " (catalog: " + fixed(catalog.gemmEfficiencyTensor, 3)
            + (std::abs(fitted.gemmEfficiencyTensor - catalog.gemmEfficiencyTensor) < 0.001
                    ? "; the catalog's A100 entries hold this fit, which resources/catalog/devices.json names as "
                      "their source"
                    : "")
            + "). **Checked:** every other row, with the catalog's constant and with the fitted one.\n\n";
        md += markdownTable({ "model", "GPUs", "configuration", "role", "measured TFLOP/s per GPU",
                                "predicted, catalog constants", "predicted, calibrated", "note" },
                  c.rows)
            + "\n";
        md += std::to_string(c.withinAfter) + " of " + std::to_string(c.checked)
            + " checked rows within 15% of the measured throughput after calibration (" + std::to_string(c.withinBefore)
            + " of " + std::to_string(c.checked) + " with the catalog's constants); the worst checked row is off by "
            + fixed(100 * c.worstAfter, 1)
            + "%. The goal is every checked row within 15%. One fitted constant moves every row alike, so what is "
              "left is the model's scaling with size and parallelism (collectives and memory-bound kernels at "
              "datasheet rates, nothing of a real step's other overheads).\n\n";
        return md;
    }

} // namespace

PaperReport reproducePublished(const ReproduceOptions& options)
{
    const auto all = nlohmann::json::parse(paperNumbersJson());
    const auto& paper = all.at("megatron");
    const auto& table = paper.at("table1");
    const auto& node = findNode(paper.at("node").get<std::string>());
    const auto& catalog = DeviceCatalog::builtin().find(node.deviceId);
    PaperReport report;
    report.paper = "published";
    // The calibration subset: Table 1's first row, the one without tensor or pipeline parallelism,
    // whose time is the GEMMs' and the data-parallel all-reduce's alone.
    const auto& calibrationRow = table.at(0);
    const auto calibrationLabel = fixed(calibrationRow.at("params_billion").get<double>(), 1) + "B";
    if (options.progress)
        options.progress("published: calibrating on Megatron-LM " + calibrationLabel);
    auto fitted = catalog;
    fitted.gemmEfficiencyTensor = fitTensorEfficiency(megatronModel(paper, calibrationRow),
        megatronPaperConfig(calibrationRow), node, catalog, calibrationRow.at("tflops_per_gpu").get<double>());
    auto checked = checkRows(paper, node, catalog, fitted, calibrationLabel, options);
    report.markdown = publishedMarkdown(paper, catalog, fitted, calibrationLabel, checked);
    report.markdown += "![" + checked.figure.title + "](" + checked.figure.file + ")\n\n";
    report.figures.push_back(std::move(checked.figure));
    return report;
}

} // namespace ps::detail
