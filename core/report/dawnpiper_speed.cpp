#include "report/dawnpiper_speed.h"

#include "cost/profile.h"
#include "plan/planner.h"
#include "zoo/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace ps::detail {
namespace {

    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

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
    std::vector<double> sweep(double largest, int perMicroBatch, bool quick)
    {
        const std::vector<double> fractions =
            quick ? std::vector<double> { 0.25, 0.5, 1.0 } : std::vector<double> { 0.125, 0.25, 0.5, 0.75, 1.0 };
        std::set<double> microBatches;
        for (double f : fractions)
            microBatches.insert(std::max(1.0, std::floor(f * largest / perMicroBatch)));
        return { microBatches.begin(), microBatches.end() };
    }

} // namespace

void addTrainingSpeed(const nlohmann::json& paper, const DeviceSpec& device, const LinkSpec& link,
    const std::vector<std::string>& models, const std::vector<int>& stageCounts, const LargestBatch& largest,
    const ReproduceOptions& options, PaperReport& report)
{
    const auto& claims = paper.at("claims");
    auto& md = report.markdown;
    md += "### Figs. 6 and 7: training speed against batch size\n\n"
          "Each baseline and DawnPiper's Algorithm 1 (`dawnpiper-paper`, its memory optimizer allowed to swap and "
          "recompute) planned at each batch, from an eighth (a quarter in a quick report) of the largest "
          "DawnPiper fits (Tables 1-2 above, with S+R) to that largest, and simulated with communication; samples "
          "per second. The baselines run "
          "without memory optimization while they fit; past that GPipe runs torchgpipe's per-stage checkpoints "
          "(R) and PipeDream, which has none, does not fit. Sync batches are mini-batches of M = stages "
          "micro-batches; async batches are micro-batches. The paper's text compares DawnPiper with vPipe, which "
          "is not modelled, so its ratios below are beside ours over GPipe and PipeDream, not like for like.\n\n";
    // gains[stages][model][sync] = per batch fraction, DawnPiper over the baseline (NaN: one side does not fit)
    std::map<int, std::map<std::string, std::map<bool, std::vector<std::pair<double, double>>>>> gains;
    for (int stages : stageCounts) {
        auto cluster = makeCluster(device, stages);
        cluster.intraNode = link;
        for (const auto& model : models) {
            if (stages == 8 && model == "bert") // Fig. 7: BERT is too small for 8 GPUs (§5.3)
                continue;
            const auto zoo = paper.at("models").at(model).at("zoo").get<std::string>();
            const auto graph = buildZooModel(zooPreset(zoo));
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
                for (double b : sweep(top, perMicroBatch, options.quick)) {
                    const auto base = baselineSpeed(p, graph, profile, cluster, spec, b);
                    const auto ours = speedOf(
                        graph, profile, cluster, spec, b, PlanAlgorithm::DawnPiperPaper, { 0, true, true, false });
                    const double gain = ours.samplesPerSecond / base.samplesPerSecond;
                    gains[stages][model][p.sync].emplace_back(b * perMicroBatch / top, gain);
                    rows.push_back({ fixed(b * perMicroBatch, 0), speedText(base), speedText(ours),
                        std::isnan(gain) ? "-" : fixed(gain, 2) + "x" });
                }
                md += "**" + model + ", " + std::to_string(stages) + " stages, " + (p.sync ? "sync" : "async") + "** ("
                    + zoo + ")\n\n";
                md += markdownTable({ p.sync ? "mini-batch" : "micro-batch", p.baseline + " samples/s",
                                        p.dawnpiper + " samples/s", p.dawnpiper + " / " + p.baseline },
                          rows)
                    + "\n";
            }
        }
    }
    // One figure per stage count: DawnPiper over its baseline against the batch's share of the
    // largest DawnPiper fits.
    for (const auto& [stages, byModel] : gains) {
        ReportFigure f;
        f.file = "dawnpiper-speed-" + std::to_string(stages) + ".png";
        f.title = std::string(stages == 4 ? "DawnPiper Fig. 6" : "DawnPiper Fig. 7") + " (" + std::to_string(stages)
            + " stages): DawnPiper over its baseline";
        f.xLabel = "batch / largest DawnPiper fits";
        f.yLabel = "speed ratio";
        std::set<double> xs;
        for (const auto& [model, byMode] : byModel)
            for (const auto& [sync, points] : byMode)
                for (const auto& [x, g] : points)
                    xs.insert(x);
        f.x.assign(xs.begin(), xs.end());
        for (const auto& [model, byMode] : byModel) {
            for (const auto& [sync, points] : byMode) {
                ReportFigure::Series s { model + (sync ? " DPiper-S / GPipe" : " DPiper-AS / PipeDream"), {} };
                for (double x : f.x) {
                    double v = kNaN;
                    for (const auto& [px, g] : points)
                        v = px == x ? g : v;
                    s.values.push_back(v);
                }
                f.series.push_back(std::move(s));
            }
        }
        md += "![" + f.title + "](" + f.file + ")\n\n";
        report.figures.push_back(std::move(f));
    }
    // The paper's claims beside ours: the largest gain, the mean over the sweep where both fit, and
    // the gain at the smallest batch.
    const auto stat = [&](int stages, const std::string& model, bool sync, const std::string& what) {
        if (!gains.contains(stages) || !gains.at(stages).contains(model) || !gains.at(stages).at(model).contains(sync))
            return kNaN;
        const auto& points = gains.at(stages).at(model).at(sync);
        double best = kNaN;
        double sum = 0;
        int n = 0;
        for (const auto& [x, g] : points) {
            if (std::isnan(g))
                continue;
            best = std::isnan(best) ? g : std::max(best, g);
            sum += g;
            ++n;
        }
        if (what == "max")
            return best;
        if (what == "first")
            return points.empty() ? kNaN : points.front().second;
        return n > 0 ? sum / n : kNaN;
    };
    std::vector<std::vector<std::string>> rows;
    const auto row = [&](const std::string& text, double ours, double theirs) {
        if (!std::isnan(ours))
            rows.push_back({ text, fixed(ours, 2) + "x", fixed(theirs, 2) + "x" });
    };
    row("T5, 4 stages, sync: largest gain (paper: over vPipe)", stat(4, "t5", true, "max"),
        claims.at("fig6_sync_t5_max_gain").get<double>());
    row("T5, 4 stages, async: largest gain (paper: over vPipe)", stat(4, "t5", false, "max"),
        claims.at("fig6_async_t5_max_gain").get<double>());
    for (const auto& [model, theirs] : claims.at("fig6_async_mean_gain_vs_vpipe").items())
        row(model + ", 4 stages, async: mean gain (paper: over vPipe as the batch grows)",
            stat(4, model, false, "mean"), theirs.get<double>());
    for (const auto& [model, theirs] : claims.at("fig7_async_mean_gain_vs_vpipe").items())
        row(model + ", 8 stages, async: mean gain where both fit (paper: over vPipe)", stat(8, model, false, "mean"),
            theirs.get<double>());
    for (const auto& model : models)
        row(model + ", 4 stages, sync: gain at the smallest batch (paper: about 10% on average)",
            stat(4, model, true, "first"), claims.at("fig6_small_batch_gain").get<double>());
    row("GPT-2, 8 stages, sync: mean gain where both fit (paper: comparable to GPipe)", stat(8, "gpt2", true, "mean"),
        claims.at("fig7_sync_gpt2_vs_gpipe").get<double>());
    md += markdownTable({ "claim", "ours (over GPipe / PipeDream)", "paper" }, rows) + "\n";
}

} // namespace ps::detail
