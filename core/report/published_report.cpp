// Published measurements as checks of the cost model (issue P15, deliverable 2): the cluster model
// calibrated on one named subset of a paper's measured throughputs and checked on the rest, both
// reported. Megatron-LM's Table 1 (Narayanan et al., SC'21: ten GPT models measured on 32 to 3,072
// A100s, TFLOP/s per GPU) runs as the Megatron section runs it (report/megatron_rows.h). One
// constant is fitted: the fraction of the A100's tensor-core peak its GEMMs reach
// (`gemm_efficiency.tensor` in the device catalog), by bisection until the calibration row's predicted
// throughput equals the measured one. Every other row is predicted with the catalog's constant and
// with the fitted one. A second publication's runs (Megatron-Turing NLG 530B, Smith et al. 2022: three
// data-parallel sizes under DeepSpeed's pipeline engine) are priced at each candidate micro-batch, since
// the publication does not state it (papers.json lists the candidates); their iteration times are
// split into per-slot and per-iteration parts by a least-squares line, measured beside predicted, and
// the micro-batch whose split agrees is named.
#include "cluster/device_catalog.h"
#include "report/megatron_rows.h"
#include "report/reproduction.h"
#include "scale/scale_sim.h"

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
            const auto e = simulateScale(model, config, node, device);
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
        c.figure.title = "Published measurements: predicted / measured TFLOP/s per GPU";
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
            const auto a = simulateScale(model, config, node, catalog);
            const auto b = simulateScale(model, config, node, fitted);
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
        md += "Measured throughputs from the papers, each with its source, held against the cost model: "
              "Megatron-LM's Table 1 ("
            + paper.at("source").get<std::string>()
            + "), and the three runs of Megatron-Turing NLG 530B below, which no constant was fitted to (their "
              "micro-batch, "
              "which the publication leaves open, is read from their scaling); the measured "
              "figures of its Figs. 7 and 11 (throughput against micro-batch size on one A100, "
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

    // A straight line through (x, y) by least squares.
    struct LineFit
    {
        double slope = 0;
        double intercept = 0;
    };
    LineFit fitLine(const std::vector<double>& x, const std::vector<double>& y)
    {
        const double n = static_cast<double>(x.size());
        double sx = 0;
        double sy = 0;
        double sxx = 0;
        double sxy = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            sx += x[i];
            sy += y[i];
            sxx += x[i] * x[i];
            sxy += x[i] * y[i];
        }
        const double det = n * sxx - sx * sx;
        if (x.size() < 2 || det == 0)
            return {};
        const double slope = (n * sxy - sx * sy) / det;
        return { slope, (sy - slope * sx) / n };
    }

    // A second publication's runs, none of them in the calibration: MT-NLG 530B (papers.json
    // "megatron_turing") at three data-parallel sizes, priced with the catalog's constants. The
    // publication does not state the micro-batch beside them, so every candidate is run; the runs'
    // scaling with the data-parallel size names one: a 1F1B iteration is m + p - 1 slots plus a part
    // that does not grow with m, and only the right micro-batch counts the slots so that the measured
    // times' part outside them agrees with the model's (the per-slot cost is the model's to get right).
    struct MicroBatchCandidate
    {
        std::int64_t microBatch = 1;
        std::vector<std::vector<std::string>> rows; // the runs' table at this micro-batch
        std::vector<double> ratios; // predicted / measured TFLOP/s per run, catalog constants
        std::vector<double> calibratedRatios; // the same with the fitted constant
        int within = 0; // runs within 15%
        bool valid = true; // every run fits and divides
        std::string reason;
        LineFit measured; // iteration seconds against slots m + p - 1
        LineFit predicted;
        double peakGiB = 0;
    };

    MicroBatchCandidate priceMtNlg(const nlohmann::json& set, std::int64_t microBatch, const DeviceSpec& catalog,
        const DeviceSpec& fitted, const ReproduceOptions& options)
    {
        const auto& node = findNode(set.at("node").get<std::string>());
        const auto model = megatronModel(set, set); // the set holds the shape, sequence and vocabulary
        MicroBatchCandidate c;
        c.microBatch = microBatch;
        std::vector<double> slots;
        std::vector<double> measuredSeconds;
        std::vector<double> predictedSeconds;
        for (const auto& run : set.at("runs")) {
            ScaleConfig config;
            config.tensor = set.at("tensor_parallel").get<int>();
            config.pipeline = set.at("pipeline_parallel").get<int>();
            config.data = run.at("gpus").get<int>() / (config.tensor * config.pipeline);
            config.microBatch = microBatch;
            config.globalBatch = set.at("global_batch").get<std::int64_t>();
            config.recompute = Recompute::Full;
            if (options.progress)
                options.progress("published: MT-NLG " + std::to_string(config.gpus()) + " at micro-batch "
                    + std::to_string(microBatch));
            const double seconds = run.at("iteration_seconds").get<double>();
            const double measured = run.at("tflops_per_gpu").get<double>();
            const auto a = simulateScale(model, config, node, catalog);
            const auto f = simulateScale(model, config, node, fitted);
            if (!a.valid || !f.valid || !a.fits) {
                const auto reason = !a.valid ? a.reason : !f.valid ? f.reason : a.reason; // a's: does not fit
                if (c.valid) // the first run's (the fewest GPUs: the most micro-batches in flight)
                    c.reason = reason;
                c.valid = false;
                c.rows.push_back({ std::to_string(config.gpus()), config.text(), fixed(seconds, 1), "-",
                    fixed(measured, 0), "-", reason });
                c.peakGiB = std::max(c.peakGiB, a.peakBytes / static_cast<double>(1ULL << 30));
                continue;
            }
            const double error = a.tflopsPerGpu / measured - 1;
            c.within += std::abs(error) <= 0.15 ? 1 : 0;
            c.ratios.push_back(a.tflopsPerGpu / measured);
            c.calibratedRatios.push_back(f.tflopsPerGpu / measured);
            c.peakGiB = std::max(c.peakGiB, a.peakBytes / static_cast<double>(1ULL << 30));
            c.rows.push_back({ std::to_string(config.gpus()), config.text(), fixed(seconds, 1),
                fixed(a.iterationSeconds, 1), fixed(measured, 0), fixed(a.tflopsPerGpu, 1), signedPercent(error) });
            slots.push_back(static_cast<double>(config.microBatches() + config.pipeline - 1));
            measuredSeconds.push_back(seconds);
            predictedSeconds.push_back(a.iterationSeconds);
        }
        c.valid = c.valid && slots.size() >= 2;
        c.measured = fitLine(slots, measuredSeconds);
        c.predicted = fitLine(slots, predictedSeconds);
        return c;
    }

    struct SecondSet
    {
        std::vector<MicroBatchCandidate> candidates;
        std::size_t identified = 0; // index into candidates
        bool any = false; // some candidate runs every run
        int count = 0;
    };

    SecondSet checkMtNlg(const nlohmann::json& set, const DeviceSpec& catalog, const DeviceSpec& fitted,
        CheckedRows& first, const ReproduceOptions& options)
    {
        SecondSet s;
        s.count = static_cast<int>(set.at("runs").size());
        double closest = kNaN;
        for (const auto& b : set.at("micro_batch_candidates")) {
            auto c = priceMtNlg(set, b.get<std::int64_t>(), catalog, fitted, options);
            const double gap = std::abs(c.measured.intercept - c.predicted.intercept);
            if (c.valid && !(gap >= closest)) {
                closest = gap;
                s.identified = s.candidates.size();
                s.any = true;
            }
            s.candidates.push_back(std::move(c));
        }
        if (!s.any)
            return s;
        const auto& chosen = s.candidates.at(s.identified);
        for (std::size_t i = 0; i < chosen.ratios.size(); ++i) {
            first.figure.categories.push_back("MT-NLG " + set.at("runs").at(i).at("gpus").dump());
            first.figure.series[0].values.push_back(chosen.ratios[i]);
            first.figure.series[1].values.push_back(chosen.calibratedRatios[i]);
        }
        return s;
    }

    std::string mtNlgMarkdown(const nlohmann::json& set, const SecondSet& s)
    {
        std::string md = "### A second publication, outside the calibration: Megatron-Turing NLG 530B\n\nSource: "
            + set.at("source").get<std::string>() + ". Setup: " + set.at("setup").get<std::string>()
            + ". Assumed where the measurement leaves it open: " + set.at("assumptions").get<std::string>();
        if (!s.any) {
            std::string why;
            for (const auto& c : s.candidates)
                why += (why.empty() ? "" : "; ") + std::to_string(c.microBatch) + ": " + c.reason;
            return md + ".\n\nNo candidate micro-batch runs every run (" + why + ").\n\n";
        }
        const auto& chosen = s.candidates.at(s.identified);
        const auto b = std::to_string(chosen.microBatch);
        md += std::string()
            + ". Predicted with the catalog's constants (the figure below shows the calibrated ones too), at "
              "micro-batch "
            + b + ", the one the runs' scaling names (the next table).\n\n";
        md += markdownTable({ "GPUs", "configuration", "measured s per iteration", "predicted s",
                                "measured TFLOP/s per GPU", "predicted TFLOP/s per GPU", "error" },
                  chosen.rows)
            + "\n";
        md += std::to_string(chosen.within) + " of " + std::to_string(s.count) + " runs within 15% at micro-batch " + b
            + ".\n\n";
        md += "The publication does not give the micro-batch beside these runs, and it sets how an iteration "
              "divides: 1F1B runs m + p - 1 slots of the slowest stage's forward and backward (m = global batch / "
              "(d x micro-batch) per pipeline), plus what does not grow with m (the gradient reduction after the "
              "flush, the optimizer step, the engine's own work). A line through the "
            + std::to_string(s.count)
            + " runs by least squares, with the slots counted at each micro-batch that fits, splits the measured "
              "times and the predicted ones alike:\n\n";
        std::vector<std::vector<std::string>> rows;
        for (const auto& c : s.candidates) {
            if (!c.valid) {
                rows.push_back({ std::to_string(c.microBatch), "-", "-", "-", "-", fixed(c.peakGiB, 1), c.reason });
                continue;
            }
            std::string errors;
            for (const auto& row : c.rows)
                errors += (errors.empty() ? "" : ", ") + row.back();
            rows.push_back({ std::to_string(c.microBatch), fixed(c.measured.slope, 3), fixed(c.predicted.slope, 3),
                fixed(c.measured.intercept, 1), fixed(c.predicted.intercept, 1), fixed(c.peakGiB, 1),
                errors + " (" + std::to_string(c.within) + " of " + std::to_string(s.count) + ")" });
        }
        md += markdownTable(
                  { "micro-batch", "measured s per slot", "predicted s per slot", "measured s per iteration besides",
                      "predicted s per iteration besides", "predicted peak GiB per GPU", "TFLOP/s error per run" },
                  rows)
            + "\n";
        md += "The micro-batch named is the one whose measured time outside the slots comes nearest the model's ("
            + fixed(chosen.measured.intercept, 1) + " s against " + fixed(chosen.predicted.intercept, 1)
            + " s at micro-batch " + b + "; the table gives the others).";
        if (chosen.measured.slope > 0 && chosen.predicted.slope > 0) {
            const double ratio = chosen.predicted.slope / chosen.measured.slope;
            md += " At micro-batch " + b + " the model prices a slot " + fixed(100 * std::abs(1 - ratio), 1) + "% "
                + (ratio <= 1 ? "shorter" : "longer") + " than these runs took.";
        }
        md += " The choice reads the " + std::to_string(s.count)
            + " measured times, so these runs are not wholly outside the fit: one discrete setting is taken from "
              "them, no constant. The same model on the same GPUs under Megatron-LM's own interleaved pipeline is "
              "Table 1's 529.6B row above.\n\n";
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
    const auto& second = all.at("megatron_turing");
    const auto mtNlg = checkMtNlg(second, catalog, fitted, checked, options);
    report.markdown = publishedMarkdown(paper, catalog, fitted, calibrationLabel, checked);
    report.markdown += mtNlgMarkdown(second, mtNlg);
    report.markdown += "![" + checked.figure.title + "](" + checked.figure.file + ")\n\n";
    report.figures.push_back(std::move(checked.figure));
    return report;
}

} // namespace ps::detail
