// DawnPiper §5.2, Tables 1 (synchronous) and 2 (asynchronous): the largest batch each method fits
// on 4 and 8 A100-40GB over PCIe 4.0, for BERT, GPT-2 and T5, with and without memory optimization.
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "plan/planner.h"
#include "plan/zero_baseline.h"
#include "report/reproduction.h"
#include "zoo/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>

namespace ps::detail {
namespace {

    // A method of the tables as PipeStudio runs it.
    struct Method
    {
        std::string table; // "table1_sync" or "table2_async"
        std::string mo; // the paper's "MO" column: None, R, S+R
        std::string paperName; // "DPiper-S"
        std::string schedule; // gpipe, 1f1b, pipedream; "zero-2"/"zero-3": data parallel
        PlanAlgorithm algorithm = PlanAlgorithm::DawnPiper;
        PlannerLimits limits;
        bool miniBatch = false; // the cell is M x micro-batch (sync) rather than a micro-batch
    };

    std::vector<Method> methods()
    {
        const PlannerLimits none { 0, false, false, false };
        const PlannerLimits sr { 0, true, true, false };
        const PlannerLimits checkpoint { 0, false, false, true };
        return {
            { "table1_sync", "None", "ZeRO-2", "zero-2", PlanAlgorithm::GPipe, none, true },
            { "table1_sync", "None", "ZeRO-3", "zero-3", PlanAlgorithm::GPipe, none, true },
            { "table1_sync", "None", "GPipe", "gpipe", PlanAlgorithm::GPipe, none, true },
            { "table1_sync", "None", "DPiper-S", "1f1b", PlanAlgorithm::DawnPiper, none, true },
            { "table1_sync", "R", "GPipe", "gpipe", PlanAlgorithm::GPipe, checkpoint, true },
            { "table1_sync", "S+R", "DPiper-S", "1f1b", PlanAlgorithm::DawnPiper, sr, true },
            { "table2_async", "None", "PipeDream", "pipedream", PlanAlgorithm::PipeDream, none, false },
            { "table2_async", "None", "DPiper-AS", "pipedream", PlanAlgorithm::DawnPiper, none, false },
            { "table2_async", "S+R", "DPiper-AS", "pipedream", PlanAlgorithm::DawnPiper, sr, false },
        };
    }

    struct Cell
    {
        double ours = 0;
        double paper = std::numeric_limits<double>::quiet_NaN();
    };

    // Our cell: the largest batch in the paper's definition for this method, model and stage count.
    double ourBatch(const Method& m, const Graph& graph, const Profile& profile, const Cluster& cluster, int stages,
        double& searchSeconds)
    {
        if (m.schedule.starts_with("zero-")) { // data parallel: the whole model on each device
            const int stage = m.schedule == "zero-2" ? 2 : 3;
            return stages
                * zeroMaxMicroBatch(graph, profile, stages, stage, static_cast<double>(cluster.device.memoryBytes));
        }
        const auto spec = parseScheduleSpec(m.schedule, stages, stages); // sync: M = stages (§5.1)
        PlannerOptions options;
        options.algorithm = m.algorithm;
        options.limits = m.limits;
        const auto r = findMaxMicroBatch(graph, profile, spec, cluster, options, 1 << 12);
        if (m.algorithm == PlanAlgorithm::DawnPiper && r.microBatch > 0) { // §5.4: search under 1 s
            const StageModel model(graph, profile, spec, cluster, r.microBatch, m.limits);
            const auto start = std::chrono::steady_clock::now();
            [[maybe_unused]] const auto plan = findPlan(model, options);
            searchSeconds = std::max(
                searchSeconds, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        }
        return m.miniBatch ? r.microBatch * spec.microBatches : r.microBatch;
    }

    std::string cellText(double v)
    {
        return std::isfinite(v) ? fixed(v, 0) : "-";
    }

} // namespace

PaperReport reproduceDawnPiper(const ReproduceOptions& options)
{
    const auto all = nlohmann::json::parse(paperNumbersJson());
    const auto& paper = all.at("dawnpiper");
    const auto& device = DeviceCatalog::builtin().find(paper.at("device").get<std::string>());
    const LinkSpec link { paper.at("link").at("kind"), paper.at("link").at("bandwidth"), 0 };
    std::vector<std::string> models { "bert", "gpt2", "t5" };
    std::vector<int> stageCounts { 4, 8 };
    if (options.quick) {
        models = { "bert" };
        stageCounts = { 4 };
    }
    // cells[table][mo/method][model/stages]
    std::map<std::string, std::map<std::string, std::map<std::string, Cell>>> cells;
    std::map<std::string, std::string> setups;
    double searchSeconds = 0;
    for (const auto& model : models) {
        const auto zoo = paper.at("models").at(model).at("zoo").get<std::string>();
        if (options.progress)
            options.progress("dawnpiper: " + zoo);
        const auto config = zooPreset(zoo);
        const auto graph = buildZooModel(config);
        const auto profile = estimateProfile(graph, device, CostModelOptions {});
        setups[model] = zoo + " (" + paper.at("models").at(model).at("paper").get<std::string>() + "), sequence "
            + std::to_string(config.seq);
        for (int stages : stageCounts) {
            auto cluster = makeCluster(device, stages);
            cluster.intraNode = link;
            for (const auto& m : methods()) {
                auto& cell = cells[m.table][m.mo + " " + m.paperName][model + " " + std::to_string(stages)];
                cell.ours = ourBatch(m, graph, profile, cluster, stages, searchSeconds);
                for (const auto& row : paper.at(m.table)) {
                    if (row.at("gpus") == stages && row.at("mo") == m.mo && row.at("method") == m.paperName)
                        cell.paper = row.at(model).get<double>();
                }
            }
        }
    }
    PaperReport report;
    report.paper = "dawnpiper";
    auto& md = report.markdown;
    md = "## DawnPiper: maximum batch size (Tables 1 and 2)\n\n";
    md += "Source: " + paper.at("source").get<std::string>() + ". Devices: " + device.name + " (catalog `" + device.id
        + "`), one stage per GPU, linked by " + link.kind + ". Models:\n\n";
    for (const auto& model : models)
        md += "- " + setups[model] + "\n";
    md += "\nAssumptions where the paper is silent: fp32 weights, gradients and Adam states (the paper "
          "gives no precision); the zoo's sequence lengths above; synchronous cells are mini-batches "
          "(M x micro-batch with M = the stage count, as §5.1 sets it; the paper's cells are multiples "
          "of the GPU count); asynchronous cells are micro-batches (§5.4 calls 110 a micro-batch size); "
          "ZeRO cells are the global batch (devices x per-device batch); DPiper-S runs 1F1B, GPipe runs "
          "GPipe with torchgpipe's per-stage checkpointing for R; vPipe is not modelled.\n\n";
    for (const auto& [table, rows] : cells) {
        md += table == "table1_sync" ? "### Table 1, synchronous\n\n" : "### Table 2, asynchronous\n\n";
        std::vector<std::string> header { "MO", "method" };
        for (const auto& model : models) {
            for (int stages : stageCounts) {
                const auto col = model + " " + std::to_string(stages);
                header.insert(header.end(), { col + " ours", col + " paper", "ratio" });
            }
        }
        std::vector<std::vector<std::string>> out;
        for (const auto& m : methods()) { // in the paper's row order
            const auto name = m.mo + " " + m.paperName;
            if (m.table != table || !rows.contains(name))
                continue;
            const auto& byColumn = rows.at(name);
            const auto space = name.find(' ');
            std::vector<std::string> line { name.substr(0, space), name.substr(space + 1) };
            for (const auto& model : models) {
                for (int stages : stageCounts) {
                    const auto& c = byColumn.at(model + " " + std::to_string(stages));
                    line.insert(line.end(), { cellText(c.ours), cellText(c.paper), ratioText(c.ours, c.paper) });
                }
            }
            out.push_back(std::move(line));
        }
        md += markdownTable(header, out) + "\n";
        ReportFigure f;
        f.file = table == "table1_sync" ? "dawnpiper-sync.png" : "dawnpiper-async.png";
        f.title = table == "table1_sync" ? "DawnPiper Table 1 (synchronous): max batch"
                                         : "DawnPiper Table 2 "
                                           "(asynchronous): max "
                                           "batch";
        f.yLabel = "batch";
        for (const auto& model : models) {
            for (int stages : stageCounts)
                f.categories.push_back(model + " x" + std::to_string(stages));
        }
        for (const auto& [name, byColumn] : rows) {
            ReportFigure::Series ours { name + " (ours)", {} };
            ReportFigure::Series theirs { name + " (paper)", {} };
            for (const auto& category : f.categories) {
                const auto key = category.substr(0, category.find(' ')) + " " + category.substr(category.find('x') + 1);
                ours.values.push_back(byColumn.at(key).ours);
                theirs.values.push_back(byColumn.at(key).paper);
            }
            static const std::vector<std::string> plotted { "None DPiper-S", "R GPipe", "S+R DPiper-S",
                "None PipeDream", "S+R DPiper-AS" };
            if (std::find(plotted.begin(), plotted.end(), name) != plotted.end()) {
                f.series.push_back(std::move(ours));
                f.series.push_back(std::move(theirs));
            }
        }
        md += "![" + f.title + "](" + f.file + ")\n\n";
        report.figures.push_back(std::move(f));
    }
    md += "### Headline claims\n\n";
    std::vector<std::vector<std::string>> claims;
    const auto ratio = [&](const std::string& table, const std::string& a, const std::string& b,
                           const std::string& column) {
        const auto& rows = cells[table];
        if (!rows.contains(a) || !rows.contains(b) || !rows.at(a).contains(column))
            return std::numeric_limits<double>::quiet_NaN();
        return rows.at(a).at(column).ours / rows.at(b).at(column).ours;
    };
    const auto& claimed = paper.at("claims");
    if (stageCounts.size() == 2) {
        double sum = 0;
        int n = 0;
        for (const auto& model : models) {
            for (const auto* row : { "None DPiper-S", "S+R DPiper-S" }) {
                const auto& r = cells["table1_sync"][row];
                if (r.at(model + " 4").ours > 0) {
                    sum += r.at(model + " 8").ours / r.at(model + " 4").ours;
                    ++n;
                }
            }
        }
        claims.push_back({ "DPiper-S batch, 8 stages over 4 (mean)", fixed(sum / n, 2),
            fixed(claimed.at("doubling_stages_batch_ratio").get<double>(), 2) });
    }
    for (int stages : stageCounts) {
        if (std::find(models.begin(), models.end(), "gpt2") == models.end())
            break;
        const auto key = stages == 8 ? "async_gpt2_8_sr_vs_pipedream" : "async_gpt2_4_sr_vs_pipedream";
        claims.push_back({ "GPT-2 async, " + std::to_string(stages) + " GPUs: DPiper-AS S+R / PipeDream",
            fixed(ratio("table2_async", "S+R DPiper-AS", "None PipeDream", "gpt2 " + std::to_string(stages)), 2),
            fixed(claimed.at(key).get<double>(), 2) });
    }
    if (std::find(stageCounts.begin(), stageCounts.end(), 8) != stageCounts.end())
        claims.push_back({ "BERT sync, 8 GPUs, no MO: DPiper-S / GPipe",
            fixed(ratio("table1_sync", "None DPiper-S", "None GPipe", "bert 8"), 2),
            fixed(claimed.at("sync_bert_none_vs_gpipe_8").get<double>(), 2) });
    claims.push_back({ "Longest DawnPiper search (partition + memory plan) at a table's batch",
        fixed(searchSeconds, 3) + " s on this machine",
        "< " + fixed(claimed.at("search_seconds_below").get<double>(), 0) + " s" });
    md += markdownTable({ "claim", "ours", "paper" }, claims) + "\n";
    md += "Where a ratio is far from 1x, the modelling differences are: activation bytes come from the zoo "
          "graph at its sequence length in fp32 (the paper states neither; fp16 halves them); the "
          "memory model has no allocator fragmentation or CUDA context, which real runs lose; and "
          "DawnPiper's runtime may reuse buffers across micro-batches that PipeStudio counts separately.\n";
    // T5 is the outlier: the paper fits several times our batch on every row, baselines included,
    // so the difference is in the input, not in the methods.
    double t5Ratio = 0;
    int t5Cells = 0;
    for (const auto& [table, rows] : cells) {
        for (const auto& [name, byColumn] : rows) {
            for (const auto& [column, cell] : byColumn) {
                if (column.starts_with("t5 ") && cell.ours > 0 && cell.paper > 0) {
                    t5Ratio += cell.ours / cell.paper;
                    ++t5Cells;
                }
            }
        }
    }
    if (t5Cells > 0 && t5Ratio / t5Cells < 0.5)
        md += "\nT5 cells average " + fixed(t5Ratio / t5Cells, 2)
            + "x of the paper's on every row, the ZeRO and GPipe baselines as much as DawnPiper, so the gap "
              "is in the workload, not the planner: the paper does not give T5's input lengths, and ours "
              "(512 encoder and 512 decoder tokens) make a sample's activations several times larger than "
              "a task with short targets would (the decoder's self- and cross-attention scale with its "
              "length).\n";
    return report;
}

} // namespace ps::detail
