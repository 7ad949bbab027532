#include "report/dawnpiper_figures.h"

#include "cost/profile.h"
#include "cost/runtime_memory.h"
#include "plan/planner.h"
#include "report/dawnpiper_methods.h"
#include "zoo/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace ps::detail {
namespace {

    // One line of a figure: a baseline and DawnPiper under one kind of pipeline.
    struct Pair
    {
        bool sync = true;
        std::string baseline; // "GPipe" / "PipeDream"
        std::string dawnpiper; // "DPiper-S" / "DPiper-AS"
        std::string schedule; // gpipe / pipedream
        PlanAlgorithm baselineAlgorithm = PlanAlgorithm::GPipe;
    };

    const std::vector<Pair>& pairs()
    {
        static const std::vector<Pair> all {
            { true, "GPipe", "DPiper-S", "gpipe", PlanAlgorithm::GPipe },
            { false, "PipeDream", "DPiper-AS", "pipedream", PlanAlgorithm::PipeDream },
        };
        return all;
    }

    struct Speed
    {
        double samplesPerSecond = kNaN;
        std::string how; // "", "R" (checkpoints), "S+R" (the memory optimizer's swaps/recomputes)
    };

    // The plan's simulated samples per second, or NaN when it does not fit.
    Speed speedOf(const Graph& graph, const Profile& profile, const Cluster& cluster, const ScheduleSpec& spec,
        double microBatch, PlanAlgorithm algorithm, const PlannerLimits& limits)
    {
        const StageModel model(graph, profile, spec, cluster, microBatch, limits);
        PlannerOptions options;
        options.algorithm = algorithm;
        options.limits = limits;
        auto plan = findPlan(model, options);
        if (!plan.feasible)
            return {};
        const auto sim = simulatePlan(plan, graph, profile, cluster);
        if (sim.outOfMemory)
            return {};
        Speed s { sim.samplesPerSecond, "" };
        for (const auto& st : plan.memoryPlans()) {
            if (!st.swappedTensors.empty() || !st.recomputedTensors.empty())
                s.how = "S+R";
        }
        if (limits.checkpointStages)
            s.how = "R";
        return s;
    }

    // The baseline as the paper runs it: without memory optimization while it fits, then GPipe with
    // torchgpipe's checkpoints (PipeDream has none: past its largest batch it has no point).
    Speed baselineSpeed(const Pair& p, const Graph& graph, const Profile& profile, const Cluster& cluster,
        const ScheduleSpec& spec, double microBatch)
    {
        auto s = speedOf(graph, profile, cluster, spec, microBatch, p.baselineAlgorithm, { 0, false, false, false });
        if (std::isnan(s.samplesPerSecond) && p.sync)
            s = speedOf(graph, profile, cluster, spec, microBatch, p.baselineAlgorithm, { 0, false, false, true });
        return s;
    }

    std::string speedText(const Speed& s)
    {
        if (std::isnan(s.samplesPerSecond))
            return "does not fit";
        return fixed(s.samplesPerSecond, 1) + (s.how.empty() ? "" : " (" + s.how + ")");
    }

    // The batches of a sweep: fractions of the largest DawnPiper fits, whole micro-batches (sync
    // mini-batches are M = stages micro-batches).
    // Each batch with the fraction it stands for (the figures' x, the same for every model).
    std::vector<std::pair<double, double>> sweep(double largest, int perMicroBatch, bool quick)
    {
        const std::vector<double> fractions =
            quick ? std::vector<double> { 0.25, 0.5, 1.0 } : std::vector<double> { 0.125, 0.25, 0.5, 0.75, 1.0 };
        std::vector<std::pair<double, double>> out; // (micro-batch, fraction)
        for (double f : fractions) {
            const double b = std::max(1.0, std::floor(f * largest / perMicroBatch));
            if (out.empty() || out.back().first != b)
                out.emplace_back(b, f);
        }
        return out;
    }

} // namespace

namespace {

    // A plan's stage time spread ((longest - shortest) / longest, memory optimization included) and
    // its stages' mean peak over the GPU's capacity, as table cells; "does not fit: ..." otherwise.
    std::pair<std::string, std::string> balanceCells(const Plan& plan, const DeviceSpec& device)
    {
        if (!plan.feasible || plan.stages.empty())
            return { "does not fit: " + plan.reason, "-" };
        double longest = 0;
        double shortest = std::numeric_limits<double>::infinity();
        double bytes = 0;
        for (const auto& st : plan.stages) {
            longest = std::max(longest, st.timeNs);
            shortest = std::min(shortest, st.timeNs);
            bytes += st.peakBytes;
        }
        const auto mean = bytes / static_cast<double>(plan.stages.size());
        return { fixed(100 * (longest - shortest) / longest, 1) + "%",
            fixed(100 * mean / static_cast<double>(device.memoryBytes), 1) + "%" };
    }

    Plan balancePlan(const Graph& graph, const Profile& profile, const Cluster& cluster, int stages, double b,
        PlanAlgorithm algorithm)
    {
        const PlannerLimits sr { 0, true, true, false };
        const auto spec = parseScheduleSpec("pipedream", stages, stages);
        const StageModel stageModel(graph, profile, spec, cluster, b, sr);
        PlannerOptions options;
        options.algorithm = algorithm;
        options.limits = sr;
        return findPlan(stageModel, options);
    }

    // The spread against the micro-batch, up to the largest that fits: the paper ran Fig. 8 at
    // `paperShare` of its own largest DPiper-AS batch (Table 2); the last samples before memory
    // runs out leave the planner no room to balance.
    std::string balanceSweep(const Graph& graph, const Profile& profile, const Cluster& cluster, int stages,
        double fitted, double paperShare, double paperSpread, const DeviceSpec& device)
    {
        std::set<double> batches;
        // The paper's share of its largest batch applied to ours (at most ours: a share above 1 means
        // the figure's batch is above the table's, as the quick report's model gives).
        const double shareBatch = std::clamp(std::round(paperShare * fitted), 1.0, fitted);
        batches.insert(shareBatch);
        for (const double share : { 0.75, 0.9 })
            batches.insert(std::max(1.0, std::round(share * fitted)));
        for (const double back : { 2.0, 1.0, 0.0 })
            batches.insert(std::max(1.0, fitted - back));
        std::vector<std::vector<std::string>> rows;
        std::map<double, std::pair<double, std::string>> spreads; // Alg. 1's spread and memory used, by micro-batch
        for (const double b : batches) {
            const auto plan = balancePlan(graph, profile, cluster, stages, b, PlanAlgorithm::DawnPiperPaper);
            const auto paper = balanceCells(plan, device);
            const auto ours =
                balanceCells(balancePlan(graph, profile, cluster, stages, b, PlanAlgorithm::DawnPiper), device);
            rows.push_back({ fixed(b, 0), fixed(100 * b / fitted, 0) + "%", paper.first, paper.second, ours.first });
            if (plan.feasible && !plan.stages.empty())
                spreads[b] = { std::stod(paper.first) / 100, paper.second };
        }
        std::string md = "The spread against the micro-batch (the paper ran at " + fixed(100 * paperShare, 0)
            + "% of its largest DPiper-AS batch, Table 2's S+R cell; ours fits " + fixed(fitted, 0) + "):\n\n"
            + markdownTable({ "micro-batch", "of the largest", "DPiper-AS (Alg. 1) spread", "its memory used",
                                "DPiper-AS (ours) spread" },
                rows)
            + "\n";
        const auto atShare = spreads.find(shareBatch);
        if (spreads.size() >= 2 && atShare != spreads.end() && spreads.rbegin()->first == fitted) {
            const auto below = std::prev(spreads.end(), 2);
            const auto& largest = spreads.rbegin()->second;
            md += "Alg. 1's spread is " + fixed(100 * atShare->second.first, 1)
                + "% at the paper's share of the largest batch, " + fixed(100 * below->second.first, 1) + "% at "
                + fixed(below->first, 0) + " samples and " + fixed(100 * largest.first, 1)
                + "% at the largest, where the stages use " + largest.second
                + " of the memory on average: the table above runs at the largest. At the paper's share ours is "
                + fixed(100 * atShare->second.first, 1) + "% against the paper's " + fixed(100 * paperSpread, 1)
                + "%; that difference is not measured here.\n\n";
        }
        return md;
    }

} // namespace

void addStageBalance(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
    std::string& md)
{
    const auto& claims = paper.at("claims");
    const bool t5 = std::find(models.begin(), models.end(), "t5") != models.end();
    const auto model = t5 ? std::string("t5") : models.front();
    const int stages =
        std::find(stageCounts.begin(), stageCounts.end(), 8) != stageCounts.end() ? 8 : stageCounts.back();
    const double fitted = largest(false, model, stages);
    const double paperBatch = claims.at("fig8_t5_async_8_micro_batch").get<double>();
    const double b = std::min(paperBatch, fitted);
    if (b < 1)
        return;
    const auto graph = buildZooModel(paperModel(paper.at("models").at(model)));
    const auto profile = estimateProfile(graph, device, CostModelOptions {});
    auto cluster = makeCluster(device, stages);
    cluster.intraNode = link;
    std::vector<std::vector<std::string>> rows;
    for (const auto& [label, algorithm] : { std::pair { "DPiper-AS (Alg. 1)", PlanAlgorithm::DawnPiperPaper },
             std::pair { "DPiper-AS (ours)", PlanAlgorithm::DawnPiper },
             std::pair { "PipeDream's cuts (not vPipe)", PlanAlgorithm::PipeDream } }) {
        const auto [spread, used] = balanceCells(balancePlan(graph, profile, cluster, stages, b, algorithm), device);
        rows.push_back({ label, std::string(toString(algorithm)) + ", pipedream + swap/recompute plan", spread, used });
    }
    md += "### Fig. 8: stage balance (" + model + ", asynchronous, " + std::to_string(stages) + " GPUs)\n\n";
    md += "Micro-batch " + fixed(b, 0) + " (the paper's " + fixed(paperBatch, 0)
        + ", or the largest DPiper-AS fits with memory optimization above when smaller). Spread: (longest - "
          "shortest) / longest stage time, memory optimization included; memory: the stages' mean peak over "
          "the GPU's capacity. The paper: DawnPiper's spread "
        + fixed(100 * claims.at("fig8_dawnpiper_stage_time_spread").get<double>(), 1) + "%, vPipe's "
        + fixed(100 * claims.at("fig8_vpipe_stage_time_spread").get<double>(), 1)
        + "% (vPipe is not modelled), and DawnPiper's memory utilization "
        + fixed(100 * claims.at("fig8_memory_utilization_gain_vs_vpipe").get<double>(), 1) + "% above vPipe's.\n\n";
    md += markdownTable({ "plan", "as run", "stage time spread", "memory used" }, rows) + "\n";
    // The paper's largest DPiper-AS batch for this model on these GPUs (Table 2, S+R).
    double paperLargest = 0;
    for (const auto& row : paper.at("table2_async")) {
        if (row.at("gpus").get<int>() == stages && row.at("mo") == "S+R" && row.at("method") == "DPiper-AS")
            paperLargest = row.value(model, 0.0);
    }
    if (paperLargest > 0 && fitted >= 1)
        md += balanceSweep(graph, profile, cluster, stages, fitted, paperBatch / paperLargest,
            claims.at("fig8_dawnpiper_stage_time_spread").get<double>(), device);
}

void addAsyncReserve(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<int>& stageCounts, const ReproduceOptions& options, std::string& md)
{
    const auto graph = buildZooModel(paperModel(paper.at("models").at("gpt2")));
    const auto profile = estimateProfile(graph, device, CostModelOptions {});
    const auto cellOf = [&](int stages, const std::string& mo, const std::string& method) {
        for (const auto& row : paper.at("table2_async")) {
            if (row.at("gpus").get<int>() == stages && row.at("mo") == mo && row.at("method") == method)
                return row.value("gpt2", kNaN);
        }
        return kNaN;
    };
    std::vector<std::vector<std::string>> rows;
    std::map<int, std::string> atPaperCell; // per GPU count: the first reserve where PipeDream's cell is the paper's
    double firstMatchGb = kNaN; // the smallest reserve where that happens on any GPU count
    for (const double reserveGb : { 0.0, 2.0, 4.0, 6.0 }) {
        if (options.progress)
            options.progress("dawnpiper: GPT-2 async with " + fixed(reserveGb, 0) + " GB reserved");
        auto gpu = device;
        gpu.memoryBytes -= static_cast<std::int64_t>(reserveGb * 1e9);
        std::vector<std::string> row { fixed(reserveGb, 0) + " GB" };
        for (const int stages : stageCounts) {
            auto cluster = makeCluster(gpu, stages);
            cluster.intraNode = link;
            double baseline = 0;
            double dawn = 0;
            std::map<PlanAlgorithm, double> unused;
            for (const auto& m : dawnMethods()) {
                if (m.table == "table2_async" && m.key() == "None PipeDream")
                    baseline = dawnBatch(m, graph, profile, cluster, stages, unused);
                if (m.table == "table2_async" && m.key() == "S+R DPiper-AS")
                    dawn = dawnBatch(m, graph, profile, cluster, stages, unused);
            }
            const double paperBaseline = cellOf(stages, "None", "PipeDream");
            const double paperRatio = cellOf(stages, "S+R", "DPiper-AS") / paperBaseline;
            if (baseline > 0 && baseline == paperBaseline && !std::isfinite(firstMatchGb))
                firstMatchGb = reserveGb;
            if (baseline > 0 && baseline == paperBaseline && !atPaperCell.contains(stages))
                atPaperCell[stages] = std::to_string(stages) + " GPUs from " + fixed(reserveGb, 0) + " GB held back ("
                    + fixed(dawn / baseline, 1) + " against the paper's " + fixed(paperRatio, 1) + ")";
            row.insert(row.end(),
                { batchCellText(baseline), batchCellText(dawn),
                    baseline > 0 ? fixed(dawn / baseline, 1) + " (paper " + fixed(paperRatio, 1) + ")" : "-" });
        }
        rows.push_back(std::move(row));
    }
    std::vector<std::string> header { "reserved per GPU" };
    for (const int stages : stageCounts) {
        const auto g = std::to_string(stages) + " GPUs";
        header.insert(header.end(), { "PipeDream, " + g, "DPiper-AS S+R, " + g, "ratio, " + g });
    }
    md += "\nThe GPT-2 asynchronous headline against memory held back from the tensors on every GPU (Table 2's "
          "None PipeDream and S+R DPiper-AS cells, the paper's methods): the baseline's micro-batch of two or three "
          "samples is where the ratio moves.\n\n"
        + markdownTable(header, rows) + "\n";
    if (!atPaperCell.empty()) {
        std::string where;
        for (const auto& [stages, text] : atPaperCell)
            where += (where.empty() ? "" : "; ") + text;
        const RuntimeMemory measured;
        const double margin =
            static_cast<double>(device.memoryBytes) - measured.usableBytes(static_cast<double>(device.memoryBytes));
        md += "PipeDream's cell is the paper's on " + where
            + ": one sample of the baseline's micro-batch moves the headline that far. The margin measured for a "
              "PyTorch process (the table before this one) is "
            + fixed(margin / 1e9, 1) + " GB, "
            + (margin < firstMatchGb * 1e9 ? "less than the " + fixed(firstMatchGb, 0)
                        + " GB that gives the paper's cell: what else held the paper's baseline to its cell is not "
                          "measured here.\n"
                                           : "at least the " + fixed(firstMatchGb, 0)
                        + " GB that gives the paper's cell: the measured margin accounts for it.\n");
    }
}

namespace {

    // DawnPiper's gain at one batch of the speed sweep.
    struct Point
    {
        double x = 0; // the batch's nominal share of the largest DawnPiper fits
        double overBaseline = kNaN; // DawnPiper / the baseline (NaN: one side does not fit)
        double overStandIn = kNaN; // DawnPiper / the baseline's cuts with swap and recompute
    };
    using SpeedGains =
        std::map<int, std::map<std::string, std::map<bool, std::vector<Point>>>>; // [stages][model][sync]

    // Each method's speed at each batch of the sweep, one table per (stages, model, sync), into `md`;
    // returns DawnPiper's gains.
    SpeedGains sweepSpeeds(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
        const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
        const ReproduceOptions& options, std::string& md)
    {
        SpeedGains gains;
        const PlannerLimits sr { 0, true, true, false };
        for (int stages : stageCounts) {
            auto cluster = makeCluster(device, stages);
            cluster.intraNode = link;
            for (const auto& model : models) {
                if (stages == 8 && model == "bert") // Fig. 7: BERT is too small for 8 GPUs (§5.3)
                    continue;
                const auto zoo = paper.at("models").at(model).at("zoo").get<std::string>();
                const auto graph = buildZooModel(paperModel(paper.at("models").at(model)));
                const auto profile = estimateProfile(graph, device, CostModelOptions {});
                for (const auto& p : pairs()) {
                    const double top = largest(p.sync, model, stages);
                    if (!(top >= 1))
                        continue;
                    if (options.progress)
                        options.progress("dawnpiper: training speed, " + model + " on " + std::to_string(stages) + ", "
                            + (p.sync ? "sync" : "async"));
                    const auto spec = parseScheduleSpec(p.schedule, stages, stages);
                    const int perMicroBatch = p.sync ? spec.microBatches : 1;
                    std::vector<std::vector<std::string>> rows;
                    for (const auto& [b, fraction] : sweep(top, perMicroBatch, options.quick)) {
                        const auto base = baselineSpeed(p, graph, profile, cluster, spec, b);
                        const auto standIn = speedOf(graph, profile, cluster, spec, b, p.baselineAlgorithm, sr);
                        const auto ours = speedOf(graph, profile, cluster, spec, b, PlanAlgorithm::DawnPiperPaper, sr);
                        const Point point { fraction, ours.samplesPerSecond / base.samplesPerSecond,
                            ours.samplesPerSecond / standIn.samplesPerSecond };
                        gains[stages][model][p.sync].push_back(point);
                        const auto ratio = [](double g) {
                            return std::isnan(g) ? std::string("-") : fixed(g, 2) + "x";
                        };
                        rows.push_back({ fixed(b * perMicroBatch, 0), speedText(base), speedText(standIn),
                            speedText(ours), ratio(point.overBaseline), ratio(point.overStandIn) });
                    }
                    md += "**" + model + ", " + std::to_string(stages) + " stages, " + (p.sync ? "sync" : "async")
                        + "** (" + zoo + ")\n\n";
                    md +=
                        markdownTable({ p.sync ? "mini-batch" : "micro-batch", p.baseline, p.baseline + "'s cuts + S+R",
                                          p.dawnpiper, "over " + p.baseline, "over the stand-in" },
                            rows)
                        + "\n";
                }
            }
        }
        return gains;
    }

    // One figure per stage count: DawnPiper over the stand-in against the batch's share of the
    // largest DawnPiper fits.
    void addSpeedFigures(const SpeedGains& gains, PaperReport& report)
    {
        auto& md = report.markdown;
        for (const auto& [stages, byModel] : gains) {
            ReportFigure f;
            f.file = "dawnpiper-speed-" + std::to_string(stages) + ".png";
            f.title = std::string(stages == 4 ? "DawnPiper Fig. 6" : "DawnPiper Fig. 7") + " (" + std::to_string(stages)
                + " stages): DawnPiper over its baseline's cuts with swap/recompute";
            f.xLabel = "batch / largest DawnPiper fits";
            f.yLabel = "speed ratio";
            std::set<double> xs;
            for (const auto& [model, byMode] : byModel)
                for (const auto& [sync, points] : byMode)
                    for (const auto& point : points)
                        xs.insert(point.x);
            f.x.assign(xs.begin(), xs.end());
            for (const auto& [model, byMode] : byModel) {
                for (const auto& [sync, points] : byMode) {
                    ReportFigure::Series s { model + (sync ? " sync" : " async"), {} };
                    for (double x : f.x) {
                        double v = kNaN;
                        for (const auto& point : points)
                            v = point.x == x ? point.overStandIn : v;
                        s.values.push_back(v);
                    }
                    f.series.push_back(std::move(s));
                }
            }
            md += "![" + f.title + "](" + f.file + ")\n\n";
            report.figures.push_back(std::move(f));
        }
    }

    // The paper's claims beside ours: the largest gain, the mean over the sweep where both fit, and
    // the gain at the smallest batch; over the stand-in where the paper's baseline is vPipe.
    void addSpeedClaims(
        const nlohmann::json& paper, const std::vector<std::string>& models, const SpeedGains& gains, std::string& md)
    {
        const auto& claims = paper.at("claims");
        const auto stat = [&](int stages, const std::string& model, bool sync, const std::string& what, bool standIn) {
            if (!gains.contains(stages) || !gains.at(stages).contains(model)
                || !gains.at(stages).at(model).contains(sync))
                return kNaN;
            const auto& points = gains.at(stages).at(model).at(sync);
            double best = kNaN;
            double sum = 0;
            int n = 0;
            for (const auto& point : points) {
                const double g = standIn ? point.overStandIn : point.overBaseline;
                if (std::isnan(g))
                    continue;
                best = std::isnan(best) ? g : std::max(best, g);
                sum += g;
                ++n;
            }
            if (what == "max")
                return best;
            if (what == "first")
                return points.empty() ? kNaN : (standIn ? points.front().overStandIn : points.front().overBaseline);
            return n > 0 ? sum / n : kNaN;
        };
        std::vector<std::vector<std::string>> rows;
        const auto row = [&](const std::string& text, const std::string& over, double ours, double theirs) {
            if (!std::isnan(ours))
                rows.push_back({ text, over, fixed(ours, 2) + "x", fixed(theirs, 2) + "x" });
        };
        row("T5, 4 stages, sync: largest gain over vPipe", "stand-in", stat(4, "t5", true, "max", true),
            claims.at("fig6_sync_t5_max_gain").get<double>());
        row("T5, 4 stages, async: largest gain over vPipe", "stand-in", stat(4, "t5", false, "max", true),
            claims.at("fig6_async_t5_max_gain").get<double>());
        for (const auto& [model, theirs] : claims.at("fig6_async_mean_gain_vs_vpipe").items())
            row(model + ", 4 stages, async: mean gain over vPipe", "stand-in", stat(4, model, false, "mean", true),
                theirs.get<double>());
        for (const auto& [model, theirs] : claims.at("fig7_async_mean_gain_vs_vpipe").items())
            row(model + ", 8 stages, async: mean gain over vPipe", "stand-in", stat(8, model, false, "mean", true),
                theirs.get<double>());
        for (const auto& model : models)
            row(model + ", 4 stages, sync: gain at the smallest batch (paper: about 10%, over all methods)", "GPipe",
                stat(4, model, true, "first", false), claims.at("fig6_small_batch_gain").get<double>());
        row("GPT-2, 8 stages, sync: mean gain (paper: comparable to GPipe)", "GPipe",
            stat(8, "gpt2", true, "mean", false), claims.at("fig7_sync_gpt2_vs_gpipe").get<double>());
        md += markdownTable({ "claim", "ours over", "ours", "paper" }, rows)
            + "\nMeans are over the sweep's batches where both plans fit.\n\n";
    }

} // namespace

void addTrainingSpeed(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
    const ReproduceOptions& options, PaperReport& report)
{
    auto& md = report.markdown;
    md += "### Figs. 6 and 7: training speed against batch size\n\n"
          "Each method planned at each batch, from an eighth (a quarter in a quick report) of the largest DawnPiper "
          "fits (Tables 1-2 above, with S+R) to that largest, and simulated with communication; samples per "
          "second. DawnPiper runs Algorithm 1 (`dawnpiper-paper`) with its memory optimizer allowed to swap and "
          "recompute. The baselines run as in the tables: without memory optimization while they fit, then GPipe "
          "with torchgpipe's per-stage checkpoints (R), while PipeDream, which has none, no longer fits. The "
          "paper's text compares with vPipe, which is not modelled; its stand-in here is the baseline's own cuts "
          "(GPipe's equal layers, PipeDream's compute-balanced DP) with the same swap/recompute planner as "
          "DawnPiper (vPipe, too, plans swap and recompute over a compute-balanced partition), so DawnPiper / "
          "stand-in isolates the partition, the part of the gain the paper attributes to DawnPiper. Sync batches "
          "are mini-batches of M = stages micro-batches; async batches are micro-batches.\n\n";
    const auto gains = sweepSpeeds(paper, device, link, models, stageCounts, largest, options, md);
    md += "Cells are samples per second; (R): checkpoints, (S+R): the plan swaps or recomputes.\n\n";
    addSpeedFigures(gains, report);
    addSpeedClaims(paper, models, gains, md);
}

} // namespace ps::detail
