// PatrickStar §9.2: the maximum model scale on 1-8 V100-32GB with 240 GB of host memory (Table 3)
// against PyTorch DDP and DeepSpeed, the single-GPU throughput of the large models (Figure 12),
// the 8-GPU throughput of the 12B model (§9.2.2) and the 120 GB host (§9.2.4), from the chunk
// replay of plan/chunk_plan.h through findMaxModelScale.
#include "cluster/device_catalog.h"
#include "plan/max_model.h"
#include "report/patrickstar_sweeps.h"
#include "report/reproduction.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <map>

namespace ps::detail {
namespace {

    MaxModelResult search(const nlohmann::ordered_json& paper, int gpus, double hostGb, bool initOnHost = false)
    {
        auto request = patrickstar::requestFor(paper, gpus, hostGb);
        request.options.initializeOnHost = initOnHost;
        return findMaxModelScale(request);
    }

    void addTable3(const nlohmann::ordered_json& paper, const std::vector<int>& gpuCounts, PaperReport& report,
        std::map<int, MaxModelResult>& results)
    {
        const double host = paper.at("host_memory_gb").get<double>();
        const double cap = paper.at("largest_in_ladder_billions").get<double>();
        std::vector<std::vector<std::string>> rows;
        ReportFigure f;
        f.file = "patrickstar-scale.png";
        f.title = "PatrickStar Table 3: largest model (B parameters) on V100-32GB, 240 GB host";
        f.yLabel = "billion parameters";
        std::vector<ReportFigure::Series> series;
        for (const auto system : kTrainingSystems) {
            series.push_back({ std::string(toString(system)) + " (ours)", {} });
            series.push_back({ std::string(toString(system)) + " (paper)", {} });
        }
        for (int gpus : gpuCounts) {
            results[gpus] = search(paper, gpus, host);
            const auto& r = results[gpus];
            nlohmann::ordered_json row;
            for (const auto& candidate : paper.at("table3_max_model_billions")) {
                if (candidate.at("gpus") == gpus)
                    row = candidate;
            }
            f.categories.push_back(std::to_string(gpus) + " GPU");
            for (std::size_t s = 0; s < kTrainingSystems.size(); ++s) {
                const auto system = kTrainingSystems[s];
                const double theirs = row.is_null() ? kNaN : row.at(std::string(toString(system))).get<double>();
                const double ours = patrickstar::billions(r, system);
                // The paper's ladder ends at its largest rung: a paper cell there means "that or more".
                const bool atLadderEnd = std::isfinite(theirs) && theirs >= cap;
                rows.push_back({ std::to_string(gpus), std::string(toString(system)),
                    patrickstar::largestText(r, system), fixed(ours, 1),
                    std::isfinite(theirs) ? fixed(theirs, 0) + (atLadderEnd ? " (ladder end)" : "") : "-",
                    ratioText(ours, theirs) });
                series[2 * s].values.push_back(ours);
                series[2 * s + 1].values.push_back(theirs);
            }
        }
        f.series = std::move(series);
        auto& md = report.markdown;
        md += "### Table 3: maximum model scale at 30 TFLOPS per GPU or more, 240 GB host memory\n\n";
        md += markdownTable({ "GPUs", "system", "largest (ours: rung, batch per GPU, TFLOPS per GPU)", "B ours",
                                "B paper", "ratio" },
                  rows)
            + "\n";
        md += "![" + f.title + "](" + f.file + ")\n\n";
        report.figures.push_back(std::move(f));
    }

    // Fig. 12's one-GPU throughput with the host link at a fraction of its datasheet rate: the paper
    // puts its drop at 8-12B on chunks moving over PCIe, which the replay moves at the full rate.
    void addHostLinkSweep(const nlohmann::ordered_json& paper, PaperReport& report)
    {
        const auto& fig12 = paper.at("figure12_single_gpu_tflops");
        std::vector<std::string> header { "host link" };
        for (const auto& [label, value] : fig12.items())
            header.push_back(label + " ours (paper " + fixed(value.get<double>(), 0) + ")");
        std::vector<std::vector<std::string>> rows;
        std::vector<std::vector<double>> tflops; // by share, by rung
        const auto& device = DeviceCatalog::builtin().find(paper.at("device").get<std::string>());
        for (const double share : { 1.0, 0.5, 0.25 }) {
            auto request = patrickstar::requestFor(paper, 1, paper.at("host_memory_gb").get<double>());
            request.device.hostLink.bandwidth *= share;
            const auto r = findMaxModelScale(request);
            std::vector<std::string> row { fixed(request.device.hostLink.bandwidth / 1e9, 2) + " GB/s" };
            auto& values = tflops.emplace_back();
            for (const auto& [label, value] : fig12.items()) {
                const auto* e = patrickstar::rungEstimate(r, label, TrainingSystem::PatrickStar);
                values.push_back(e != nullptr && e->feasible ? e->tflopsPerGpu : kNaN);
                row.push_back(std::isfinite(values.back()) ? fixed(values.back(), 1) : "-");
            }
            rows.push_back(std::move(row));
        }
        // How much each end of the ladder loses at the slowest link, and the fall across the ladder.
        std::vector<double> theirs;
        for (const auto& [label, value] : fig12.items())
            theirs.push_back(value.get<double>());
        const auto& full = tflops.front();
        const auto& slow = tflops.back();
        const auto change = [](const std::vector<double>& v) {
            const double c = 100 * (v.back() / v.front() - 1);
            return (c >= 0 ? "+" : "") + fixed(c, 0) + "%";
        };
        report.markdown += "Fig. 12's rungs again with the " + device.hostLink.kind
            + " host link at a half and a quarter of its datasheet rate (pageable rather than pinned host "
              "memory, or a link shared with other traffic), each at its best batch per GPU:\n\n";
        report.markdown += markdownTable(header, rows) + "\n";
        if (theirs.size() >= 2 && std::isfinite(full.front()) && std::isfinite(full.back())
            && std::isfinite(slow.front()) && std::isfinite(slow.back()))
            report.markdown += "At a quarter of the rate the first rung loses "
                + fixed(100 * (1 - slow.front() / full.front()), 0) + "% and the last "
                + fixed(100 * (1 - slow.back() / full.back()), 0)
                + "%; from the first rung to the last ours changes by " + change(full) + " at the full rate and "
                + change(slow) + " at a quarter, the paper's by " + change(theirs)
                + (std::abs(slow.back() / slow.front() - 1) < 0.5 * std::abs(theirs.back() / theirs.front() - 1)
                        ? ". The slower link lowers the rungs by similar shares, so it does not by itself make the "
                          "paper's fall with model size.\n\n"
                        : ". At the slower link ours falls with model size as the paper's does.\n\n");
    }

    // The 0.8 shares of GPU and host memory PatrickStar's chunks may use (its reference code's ratios;
    // the paper leaves them open) against 0.7 and 0.9: the largest model at each GPU count.
    void addMemoryShareSweep(
        const nlohmann::ordered_json& paper, const std::vector<int>& gpuCounts, PaperReport& report)
    {
        std::vector<std::string> header { "share of GPU and host memory" };
        for (int gpus : gpuCounts)
            header.push_back(std::to_string(gpus) + " GPU" + (gpus > 1 ? "s" : ""));
        std::vector<std::vector<std::string>> rows;
        for (const double share : { 0.7, 0.8, 0.9 }) {
            std::vector<std::string> row { fixed(share, 1)
                + (share == ChunkPlanOptions {}.gpuMemoryFraction ? " (as run)" : "") };
            for (int gpus : gpuCounts) {
                auto request = patrickstar::requestFor(paper, gpus, paper.at("host_memory_gb").get<double>());
                request.options.gpuMemoryFraction = share;
                request.options.hostMemoryFraction = share;
                row.push_back(patrickstar::largestText(findMaxModelScale(request), TrainingSystem::PatrickStar));
            }
            rows.push_back(std::move(row));
        }
        report.markdown += "PatrickStar's largest model with its chunks allowed 0.7 and 0.9 of GPU and host memory "
                           "instead of the reference code's 0.8 (the paper gives no share):\n\n";
        report.markdown += markdownTable(header, rows) + "\n";
    }

    void addThroughput(
        const nlohmann::ordered_json& paper, const std::map<int, MaxModelResult>& results, PaperReport& report)
    {
        std::vector<std::vector<std::string>> rows;
        if (results.contains(1)) {
            for (const auto& [label, value] : paper.at("figure12_single_gpu_tflops").items()) {
                const auto* e = patrickstar::rungEstimate(results.at(1), label, TrainingSystem::PatrickStar);
                const double ours = e != nullptr && e->feasible ? e->tflopsPerGpu : kNaN;
                rows.push_back({ "1 GPU, " + label + " (Fig. 12)", std::isfinite(ours) ? fixed(ours, 1) : "-",
                    fixed(value.get<double>(), 0), ratioText(ours, value.get<double>()) });
            }
        }
        if (results.contains(8)) {
            const auto* e = patrickstar::rungEstimate(results.at(8), "12B", TrainingSystem::PatrickStar);
            const double ours = e != nullptr && e->feasible ? 8 * e->tflopsPerGpu : kNaN;
            const double theirs = paper.at("eight_gpu_12b_total_tflops").get<double>();
            rows.push_back({ "8 GPUs, 12B, all GPUs (§9.2.2)", std::isfinite(ours) ? fixed(ours, 0) : "-",
                fixed(theirs, 0), ratioText(ours, theirs) });
        }
        report.markdown += "### Throughput of PatrickStar (TFLOPS)\n\n";
        report.markdown += markdownTable({ "case", "ours", "paper", "ratio" }, rows) + "\n";
        if (results.contains(1)) {
            addHostLinkSweep(paper, report);
            patrickstar::addBatchSweep(paper, report);
        }
    }

    // Table 4: PatrickStar's throughput on g GPUs over its own on one, per model of the ladder,
    // each GPU count at its own best batch (§9.1).
    void addScalability(
        const nlohmann::ordered_json& paper, const std::map<int, MaxModelResult>& results, PaperReport& report)
    {
        if (!results.contains(1))
            return;
        const auto& table = paper.at("table4_speedup_over_one_gpu");
        std::vector<std::string> header { "GPUs" };
        for (const auto& [label, value] : table.begin().value().items())
            header.push_back(label + " ours (paper)");
        std::vector<std::vector<std::string>> rows;
        double worst = 1;
        for (const auto& [gpus, byModel] : table.items()) {
            const int g = std::stoi(gpus);
            if (!results.contains(g))
                continue;
            std::vector<std::string> row { gpus };
            for (const auto& [label, theirs] : byModel.items()) {
                const auto* one = patrickstar::rungEstimate(results.at(1), label, TrainingSystem::PatrickStar);
                const auto* many = patrickstar::rungEstimate(results.at(g), label, TrainingSystem::PatrickStar);
                if (one == nullptr || many == nullptr || !one->feasible || !many->feasible || one->tflopsPerGpu <= 0) {
                    row.push_back("- (" + fixed(theirs.get<double>(), 2) + ")");
                    continue;
                }
                const double ours = g * many->tflopsPerGpu / one->tflopsPerGpu;
                worst = std::max(worst, std::max(ours / theirs.get<double>(), theirs.get<double>() / ours));
                row.push_back(fixed(ours, 2) + " (" + fixed(theirs.get<double>(), 2) + ")");
            }
            rows.push_back(std::move(row));
        }
        if (rows.empty())
            return;
        report.markdown += "### Table 4: PatrickStar's speedup over its own one-GPU throughput\n\n";
        report.markdown += markdownTable(header, rows) + "\n";
        report.markdown += "Largest disagreement: " + fixed(worst, 2) + "x.";
        // A speedup divides by the one-GPU throughput: where the paper's one-GPU run is slow (Fig. 12),
        // its speedup is large.
        const auto& fig12 = paper.at("figure12_single_gpu_tflops");
        const auto* twelve = patrickstar::rungEstimate(results.at(1), "12B", TrainingSystem::PatrickStar);
        if (fig12.contains("12B") && twelve != nullptr && twelve->feasible)
            report.markdown += " The paper's superlinear 12B cells divide by its one-GPU 12B throughput, "
                + fixed(fig12.at("12B").get<double>(), 0) + " TFLOPS against our " + fixed(twelve->tflopsPerGpu, 1)
                + " (Fig. 12 above): the paper's one-GPU run moves chunks over PCIe that several GPUs keep on the "
                  "GPUs, more than the replay's one-GPU run does.";
        report.markdown += "\n\n";
    }

    void addLowHost(const nlohmann::ordered_json& paper, PaperReport& report)
    {
        const auto& low = paper.at("low_host_memory");
        const auto r = search(paper, low.at("gpus").get<int>(), low.at("host_memory_gb").get<double>());
        const auto hostFirst = search(paper, low.at("gpus").get<int>(), low.at("host_memory_gb").get<double>(), true);
        const double ps = patrickstar::billions(r, TrainingSystem::PatrickStar);
        const double psHostFirst = patrickstar::billions(hostFirst, TrainingSystem::PatrickStar);
        const double zero = patrickstar::billions(r, TrainingSystem::ZeroOffload);
        const auto paperPs = fixed(low.at("patrickstar").get<double>(), 0) + "B at "
            + fixed(low.at("patrickstar_tflops").get<double>(), 2) + " TF";
        report.markdown += "### §9.2.4: " + std::to_string(low.at("gpus").get<int>()) + " GPUs, "
            + fixed(low.at("host_memory_gb").get<double>(), 0) + " GB host memory\n\n";
        report.markdown += markdownTable({ "system", "largest ours", "paper", "ratio" },
                               { { "patrickstar", patrickstar::largestText(r, TrainingSystem::PatrickStar), paperPs,
                                     ratioText(ps, low.at("patrickstar").get<double>()) },
                                   { "patrickstar, model built in host memory first (reference code)",
                                       patrickstar::largestText(hostFirst, TrainingSystem::PatrickStar), paperPs,
                                       ratioText(psHostFirst, low.at("patrickstar").get<double>()) },
                                   { "zero-offload (paper: DeepSpeed with MP)",
                                       patrickstar::largestText(r, TrainingSystem::ZeroOffload),
                                       fixed(low.at("deepspeed").get<double>(), 0) + "B at "
                                           + fixed(low.at("deepspeed_tflops").get<double>(), 2) + " TF",
                                       ratioText(zero, low.at("deepspeed").get<double>()) } })
            + "\n";
        const double paperB = low.at("patrickstar").get<double>();
        if (psHostFirst <= paperB && paperB <= ps)
            report.markdown += "The paper's figure lies between the two PatrickStar rows: the paper describes chunks "
                               "that live only where the replay puts them (all GPUs' room plus the host), while its "
                               "reference code first builds every chunk in host memory, which a 120 GB host "
                               "limits to a smaller model.\n\n";
    }

} // namespace

PaperReport reproducePatrickStar(const ReproduceOptions& options)
{
    const auto all = nlohmann::ordered_json::parse(paperNumbersJson()); // Figure 12 in the paper's order
    const auto& paper = all.at("patrickstar");
    const std::vector<int> gpuCounts = options.quick ? std::vector<int> { 1, 2 } : std::vector<int> { 1, 2, 4, 8 };
    PaperReport report;
    report.paper = "patrickstar";
    auto& md = report.markdown;
    md = "## PatrickStar: maximum model scale with chunk-based memory (Table 3, Figure 12, §9.2.4)\n\n";
    md += "Source: " + paper.at("source").get<std::string>() + ". GPT-like models of the paper's Table 2 (16 "
        + "heads, sequence " + std::to_string(paper.at("seq").get<int>())
        + "; larger rungs with hidden 4096 are added so the search is not capped), data parallel on "
        + DeviceCatalog::builtin().find(paper.at("device").get<std::string>()).name
        + ", batch per GPU the best of 4, 8, 16, 32 and 64 (§9.1); a model counts when it fits at 30 TFLOPS per "
          "GPU or more (Table 3's bar).\n\n";
    md += "Assumptions where the paper is silent: mixed-precision ADAM (14 B/param in chunks); activation "
          "checkpointing per transformer block for all systems (§9.1); embeddings on the CPU for "
          "PatrickStar (§8.2); 0.8 of GPU and host memory for PatrickStar's chunks (its reference code's "
          "ratios); \"DeepSpeed\" is ZeRO-3 with CPU offload (fp16 parameters and gradients sharded over the "
          "GPUs, fp32 states on the host); PyTorch DDP keeps 16 B/param on every GPU; the chunk size is "
          "searched (the paper gives none); GB = 10^9 bytes; CPU ADAM at 50 GB/s of host memory traffic; "
          "TFLOPS count forward, backward and the recomputed forward; every system's GPU loses "
        + fixed(ChunkPlanOptions {}.contextBytes / 1e9, 2) + " GB to the CUDA context and library handles and "
        + fixed(100 * (ChunkPlanOptions {}.allocatorOverhead - 1), 0)
        + "% to the caching allocator, as measured for PyTorch 2.11 on an H100 "
          "(tests/data/measured/h100_torch_memory.json; the paper's V100 runs are not measured).\n\n";
    std::map<int, MaxModelResult> results;
    if (options.progress)
        options.progress("patrickstar: maximum model scale");
    addTable3(paper, gpuCounts, report, results);
    addMemoryShareSweep(paper, gpuCounts, report);
    addThroughput(paper, results, report);
    addScalability(paper, results, report);
    patrickstar::addFigure13(paper, results, report);
    const auto zeroBuffers = patrickstar::addZeroBufferSweep(paper, gpuCounts, report);
    if (!options.quick) {
        addLowHost(paper, report);
        patrickstar::addLowHostShares(paper, report);
    }
    // Headline claims: PatrickStar's largest model on one GPU and its lead over DeepSpeed there,
    // and 8 GPUs' total throughput on 12B. PipeStudio runs only the paper's method here (the chunk
    // replay), so its best is the same cell.
    if (results.contains(1)) {
        std::vector<std::vector<std::string>> claims;
        const auto& row1 = paper.at("table3_max_model_billions").at(0);
        const double ps = patrickstar::billions(results.at(1), TrainingSystem::PatrickStar);
        const double zero = patrickstar::billions(results.at(1), TrainingSystem::ZeroOffload);
        const auto both = [&](const std::string& v) { return std::vector<std::string> { v, v }; };
        const auto claim = [&](const std::string& text, const std::string& ours, const std::string& theirs) {
            auto row = std::vector<std::string> { text };
            const auto cells = both(ours);
            row.insert(row.end(), cells.begin(), cells.end());
            row.push_back(theirs);
            claims.push_back(std::move(row));
        };
        claim("largest model on 1 GPU, billions (paper: its ladder ends at 12)",
            patrickstar::largestText(results.at(1), TrainingSystem::PatrickStar),
            fixed(row1.at("patrickstar").get<double>(), 0));
        claim("PatrickStar's largest over DeepSpeed's on 1 GPU", zero > 0 ? fixed(ps / zero, 2) : "-",
            fixed(row1.at("patrickstar").get<double>() / row1.at("zero-offload").get<double>(), 2));
        if (results.contains(8)) {
            const auto* e = patrickstar::rungEstimate(results.at(8), "12B", TrainingSystem::PatrickStar);
            claim("8 GPUs, 12B, total TFLOPS", e != nullptr && e->feasible ? fixed(8 * e->tflopsPerGpu, 0) : "-",
                fixed(paper.at("eight_gpu_12b_total_tflops").get<double>(), 0));
        }
        md += "### Headline claims\n\n*Paper's method*: PatrickStar's chunk replay, the only method run for its "
              "rows, so *best* repeats it.\n\n";
        md += markdownTable({ "claim", "ours, paper's method", "ours, best", "paper" }, claims) + "\n";
    }
    md += "Where ours differ from the paper by more than 25%: the paper's ladder ends at 12B, so a paper cell "
          "marked \"ladder end\" means \"12B or more\" and a ratio above 1 there is no disagreement; ours is "
          "the largest size the search found, without a cap. "
        + zeroBuffers
        + " Throughput: the paper puts its drop at 8-12B on fp16 parameter chunks moving over PCIe during forward "
          "and backward; the host-link sweep and the table of each batch above measure how much of the paper's "
          "fall a slower link and a smaller batch explain.\n";
    return report;
}

} // namespace ps::detail
