// Ada-Grouper §6: the pipeline-granularity test (Fig. 6: GPT-Medium, 8 workers, global batch 192,
// k = 1..6, relative to 1F1B) and the adaptive tuning under a preempted network (Fig. 10).
#include "cluster/cluster.h"
#include "cost/profile.h"
#include "plan/grouping.h"
#include "plan/stage_model.h"
#include "report/reproduction.h"
#include "zoo/model_config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace ps::detail {
namespace {

    // One row of Fig. 8's table: configuration `c` of Table 1 on `share` of the paper's link; the best
    // kFkB's gains over 1F1B and over 1F1B on Algorithm 1's cuts are appended to `gains`/`blindGains`.
    std::vector<std::string> weakScalingRow(const nlohmann::json& paper, const nlohmann::json& c, double share,
        const DeviceSpec& device, const CostModelOptions& cost, bool quick, std::vector<double>& gains,
        std::vector<double>& blindGains)
    {
        const auto& weak = paper.at("weak_scaling");
        const int workers = c.at("workers").get<int>();
        auto config = zooPreset("gpt2-medium");
        config.name = c.at("name").get<std::string>();
        config.layers = c.at("layers").get<std::int64_t>() / (quick ? 3 : 1);
        config.hidden = c.at("hidden").get<std::int64_t>();
        config.heads = c.at("heads").get<std::int64_t>();
        const auto graph = buildZooModel(config);
        const auto profile = estimateProfile(graph, device, cost);
        auto cluster = makeCluster(device, workers, 1);
        cluster.interNode = { paper.at("link").at("kind"), share * paper.at("link").at("bandwidth").get<double>(),
            5e-6 };
        GroupingRequest request;
        request.stages = workers;
        request.globalBatch = weak.at("global_batch").get<double>();
        request.maxK = paper.at("max_k").get<int>();
        const auto candidates = groupingCandidates(graph, profile, cluster, request);
        const auto one = std::find_if(candidates.begin(), candidates.end(), [](const auto& x) { return x.k == 1; });
        // 1F1B on the cuts DawnPiper's Algorithm 1 gives it, which leave the transfers out.
        auto blindRequest = request;
        blindRequest.maxK = 1;
        blindRequest.algorithm = PlanAlgorithm::DawnPiperPaper;
        const auto blind = groupingCandidates(graph, profile, cluster, blindRequest);
        std::vector<std::string> row { std::to_string(workers),
            config.name + " (" + std::to_string(config.layers) + " layers, hidden " + std::to_string(config.hidden)
                + ")",
            share == 1.0 ? cluster.interNode.kind : fixed(share, 2) + " x " + cluster.interNode.kind, "-", "-", "-",
            "-", "-" };
        if (one != candidates.end()) {
            const auto& top = candidates.front(); // fastest first
            const double ns1 = one->plan.simulation->iterationNs;
            const double nsTop = top.plan.simulation->iterationNs;
            row[3] = "b " + fixed(one->plan.microBatch, 0) + ", " + fixed(ns1 / 1e6, 0) + " ms";
            row[4] = "k " + std::to_string(top.k) + ", b " + fixed(top.plan.microBatch, 0) + ", "
                + fixed(nsTop / 1e6, 0) + " ms";
            row[5] = "+" + fixed(100 * (ns1 / nsTop - 1), 1) + "%";
            gains.push_back(ns1 / nsTop - 1);
            if (!blind.empty()) {
                const double nsBlind = blind.front().plan.simulation->iterationNs;
                row[6] = "b " + fixed(blind.front().plan.microBatch, 0) + ", " + fixed(nsBlind / 1e6, 0) + " ms";
                row[7] = (nsBlind >= nsTop ? "+" : "") + fixed(100 * (nsBlind / nsTop - 1), 1) + "%";
                blindGains.push_back(nsBlind / nsTop - 1);
            }
        }
        return row;
    }

    // Fig. 8: weak scaling over the Table 1 GPT configurations at global batch 64 in fp16: the best
    // kFkB's gain over 1F1B, each k at the largest micro-batch it fits (the memory-limit curve).
    void addWeakScaling(const nlohmann::json& paper, const DeviceSpec& device, bool quick, PaperReport& report)
    {
        const auto& weak = paper.at("weak_scaling");
        CostModelOptions cost;
        cost.setup.precision = parsePrecision(weak.at("precision").get<std::string>());
        std::vector<std::vector<std::string>> rows;
        // Each configuration on the nominal link; the largest also on slower links (the gain follows
        // the communication share of an iteration).
        std::vector<std::pair<nlohmann::json, double>> runs;
        std::vector<double> gains; // best kFkB over 1F1B, per row that runs
        std::vector<double> blindGains; // the same over 1F1B on Algorithm 1's cuts
        for (const auto& c : weak.at("configs")) {
            if (!quick || c.at("workers").get<int>() <= 2)
                runs.emplace_back(c, 1.0);
        }
        if (!runs.empty()) {
            const auto largest = runs.back().first;
            runs.emplace_back(largest, 0.25);
            runs.emplace_back(largest, 0.1);
        }
        for (const auto& [c, share] : runs)
            rows.push_back(weakScalingRow(paper, c, share, device, cost, quick, gains, blindGains));
        report.markdown += "### Fig. 8: weak scaling (GPT, global batch "
            + fixed(weak.at("global_batch").get<double>(), 0) + ", " + weak.at("precision").get<std::string>()
            + ")\n\n";
        report.markdown += "Source: " + weak.at("source").get<std::string>()
            + ". Sequence 1024 (the paper gives none); each k at the largest micro-batch it fits; one worker per "
              "machine as above. The paper: kFkB always beats 1F1B, most at 8 workers (the abstract's upper end, "
            + fixed(100 * weak.at("gain_high").get<double>(), 0) + "%, is presumably this figure's).\n\n";
        report.markdown += markdownTable({ "workers", "model", "link", "1F1B", "best kFkB", "gain",
                                             "1F1B on Algorithm 1's cuts", "best plan over it" },
                               rows)
            + "\n";
        const auto range = [](const std::vector<double>& v) {
            if (v.empty())
                return std::string("-");
            const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
            return fixed(100 * *lo, 1) + "% to " + fixed(100 * *hi, 1) + "%";
        };
        report.markdown += "The best kFkB gains " + range(gains)
            + " over a 1F1B planned with its boundaries' transfers charged to its stages (PipeStudio's planner; "
              "the last two rows run the largest configuration at a quarter and a tenth of the link's bandwidth). "
              "Against 1F1B on the cuts DawnPiper's Algorithm 1 gives it, which leave the transfers out, the best "
              "plan (any k, re-partitioned) is "
            + range(blindGains)
            + " faster: that column measures the cuts as much as the grouping. Where 1F1B's cuts send little, "
              "grouping has little to overlap however slow the link; the paper does not give its 1F1B baseline's "
              "cuts.\n\n";
    }

} // namespace

namespace {

    // Fig. 6: each k's iteration against 1F1B's on one partition and re-partitioned; the best k.
    struct Granularity
    {
        double bestGain = 0;
        int bestK = 1;
        double gainAt3 = 0;
        double bestBeyond3 = 0; // the best gain at k > 3
        double bestOwnGain = 0;
        int bestOwnK = 1;
    };

    Granularity addGranularity(const std::vector<GroupingCandidate>& sorted,
        const std::vector<GroupingCandidate>& repartitioned, double base, PaperReport& report)
    {
        auto& md = report.markdown;
        Granularity g;
        std::vector<std::vector<std::string>> rows;
        ReportFigure gain;
        gain.file = "adagrouper-granularity.png";
        gain.title = "Ada-Grouper Fig. 6: kFkB relative to 1F1B";
        gain.xLabel = "k";
        gain.yLabel = "relative performance";
        ReportFigure::Series ours { "PipeStudio (simulated)", {} };
        ReportFigure::Series own { "PipeStudio, re-partitioned per k", {} };
        for (const auto& c : sorted) {
            const double ns = c.plan.simulation->iterationNs;
            const double relative = base / ns;
            const double b = c.plan.microBatch;
            const auto again =
                std::find_if(repartitioned.begin(), repartitioned.end(), [&](const auto& r) { return r.k == c.k; });
            const double ownRelative =
                again == repartitioned.end() ? std::nan("") : base / again->plan.simulation->iterationNs;
            own.values.push_back(ownRelative);
            if (!std::isnan(ownRelative) && ownRelative - 1 > g.bestOwnGain) {
                g.bestOwnGain = ownRelative - 1;
                g.bestOwnK = c.k;
            }
            rows.push_back({ std::to_string(c.k), fixed(b, std::abs(b - std::round(b)) < 1e-9 ? 0 : 2),
                std::to_string(c.plan.schedule.microBatches), fixed(ns / 1e6, 1), fixed(relative, 3),
                std::isnan(ownRelative) ? "-" : fixed(ownRelative, 3),
                scheduleName(c.plan.schedule) + ", cuts " + c.plan.partition.cutsText() });
            gain.x.push_back(c.k);
            ours.values.push_back(relative);
            if (relative - 1 > g.bestGain) {
                g.bestGain = relative - 1;
                g.bestK = c.k;
            }
            if (c.k == 3)
                g.gainAt3 = relative - 1;
            if (c.k > 3)
                g.bestBeyond3 = std::max(g.bestBeyond3, relative - 1);
        }
        gain.series.push_back(std::move(ours));
        gain.series.push_back(std::move(own));
        md += markdownTable({ "k", "micro-batch", "M", "iteration ms", "vs 1F1B", "ours: re-partitioned, vs 1F1B",
                                "as run (the paper's method)" },
                  rows)
            + "\n";
        md += "![" + gain.title + "](" + gain.file + ")\n\n";
        report.figures.push_back(std::move(gain));
        return g;
    }

    // The precision the tables above price (the paper's, fp16) against `other`: each k over 1F1B
    // again on `other`'s costs (bytes to send, GEMM speed), on 1F1B's partition at that precision.
    void addPrecisionSweep(const Graph& graph, const DeviceSpec& device, const Cluster& cluster,
        const GroupingRequest& request, const std::vector<GroupingCandidate>& asRun, double asRunBase, Precision ran,
        Precision other, PaperReport& report)
    {
        CostModelOptions costs;
        costs.setup.precision = other;
        const auto profile = estimateProfile(graph, device, costs);
        auto first = request;
        first.maxK = 1;
        first.partition.reset();
        const auto oneF1B = groupingCandidates(graph, profile, cluster, first);
        if (oneF1B.empty())
            return;
        auto same = request;
        same.partition = oneF1B.front().plan.partition;
        const auto candidates = groupingCandidates(graph, profile, cluster, same);
        const auto base = std::find_if(candidates.begin(), candidates.end(), [](const auto& c) { return c.k == 1; });
        if (base == candidates.end())
            return;
        std::vector<std::vector<std::string>> rows;
        int bestK = 1;
        double best = 1;
        int bestKRun = 1;
        double bestRun = 1;
        for (const auto& c : asRun) {
            if (asRunBase / c.plan.simulation->iterationNs > bestRun) {
                bestRun = asRunBase / c.plan.simulation->iterationNs;
                bestKRun = c.k;
            }
            const auto at =
                std::find_if(candidates.begin(), candidates.end(), [&](const auto& x) { return x.k == c.k; });
            const double relative = at == candidates.end()
                ? std::nan("")
                : base->plan.simulation->iterationNs / at->plan.simulation->iterationNs;
            if (!std::isnan(relative) && relative > best) {
                best = relative;
                bestK = c.k;
            }
            rows.push_back({ std::to_string(c.k), fixed(asRunBase / c.plan.simulation->iterationNs, 3),
                std::isnan(relative) ? "-" : fixed(relative, 3),
                at == candidates.end() ? "-" : fixed(at->plan.simulation->iterationNs / 1e6, 1) });
        }
        const std::string a(toString(ran));
        const std::string b(toString(other));
        report.markdown += "The tables above price " + a + ", the paper's precision. The same candidates on " + b
            + " costs (1F1B's partition at that precision):\n\n";
        report.markdown +=
            markdownTable({ "k", a + " vs 1F1B (as run)", b + " vs 1F1B", b + " iteration ms" }, rows) + "\n";
        report.markdown += "In " + b + " the best k is " + std::to_string(bestK) + " at " + fixed(100 * (best - 1), 1)
            + "% over 1F1B (" + a + ": k = " + std::to_string(bestKRun) + " at " + fixed(100 * (bestRun - 1), 1)
            + "%).\n\n";
    }

    // Where the one partition cuts, measured: every k again on the cuts DawnPiper's Algorithm 1 gives
    // 1F1B, which balances compute and memory and leaves the transfers out (PipeStudio's planner
    // charges a 1F1B stage the round trip of its boundaries, exposedTransferNs). A 1F1B steady state
    // waits on each boundary's round trip, kFkB overlaps it with the rest of a group, so the gain over
    // 1F1B follows the bytes the cuts send; returns the best gain on those cuts (NaN when they do not run).
    double addCutAblation(const Graph& graph, const Profile& profile, const Cluster& cluster,
        const GroupingRequest& request, const std::vector<GroupingCandidate>& asRun, const GroupingCandidate& oneF1B,
        PaperReport& report)
    {
        auto blind = request;
        blind.maxK = 1;
        blind.partition.reset();
        blind.algorithm = PlanAlgorithm::DawnPiperPaper;
        const auto blindOne = groupingCandidates(graph, profile, cluster, blind);
        auto& md = report.markdown;
        if (blindOne.empty()) {
            md += "DawnPiper's Algorithm 1 finds no 1F1B partition that fits here.\n\n";
            return kNaN;
        }
        auto same = request;
        same.partition = blindOne.front().plan.partition;
        const auto candidates = groupingCandidates(graph, profile, cluster, same);
        const auto base = std::find_if(candidates.begin(), candidates.end(), [](const auto& c) { return c.k == 1; });
        const StageModel model(graph, profile, oneF1B.plan.schedule, cluster, oneF1B.plan.microBatch, request.limits);
        const auto most = [&](const Partition& p) {
            double bytes = 0;
            for (std::size_t s = 1; s < p.stageStarts.size(); ++s)
                bytes = std::max(bytes, model.cutBytes(p.stageStarts[s]));
            return bytes / (1 << 20);
        };
        md += "Where the one partition cuts: PipeStudio's planner charges a 1F1B stage the round trip of its "
              "boundaries (a 1F1B steady state waits on it; kFkB overlaps it with the rest of a group), so its cuts "
              "send at most "
            + fixed(most(oneF1B.plan.partition), 0)
            + " MiB of activations per micro-batch. DawnPiper's Algorithm 1 balances compute and memory only; its "
              "1F1B cuts ("
            + same.partition->cutsText() + ") send up to " + fixed(most(*same.partition), 0)
            + " MiB at the same micro-batch. The same candidates on those cuts:\n\n";
        if (base == candidates.end()) {
            md += "1F1B does not fit on those cuts.\n\n";
            return kNaN;
        }
        const double asRunBase = oneF1B.plan.simulation->iterationNs;
        const double blindBase = base->plan.simulation->iterationNs;
        std::vector<std::vector<std::string>> rows;
        double bestGain = 0;
        int bestK = 1;
        for (const auto& c : asRun) {
            const auto at =
                std::find_if(candidates.begin(), candidates.end(), [&](const auto& x) { return x.k == c.k; });
            const double ns = at == candidates.end() ? kNaN : at->plan.simulation->iterationNs;
            if (!std::isnan(ns) && blindBase / ns - 1 > bestGain) {
                bestGain = blindBase / ns - 1;
                bestK = c.k;
            }
            rows.push_back({ std::to_string(c.k), fixed(c.plan.simulation->iterationNs / 1e6, 1),
                fixed(asRunBase / c.plan.simulation->iterationNs, 3), std::isnan(ns) ? "-" : fixed(ns / 1e6, 1),
                std::isnan(ns) ? "-" : fixed(blindBase / ns, 3) });
        }
        md += markdownTable({ "k", "as run: iteration ms", "as run: vs 1F1B", "Algorithm 1's cuts: iteration ms",
                                "Algorithm 1's cuts: vs their 1F1B" },
                  rows)
            + "\n";
        md += "On Algorithm 1's cuts 1F1B takes " + fixed(blindBase / 1e6, 1)
            + " ms (as run: " + fixed(asRunBase / 1e6, 1) + " ms) and the best k is " + std::to_string(bestK) + " at +"
            + fixed(100 * bestGain, 1)
            + "% over it: the gain over 1F1B is set by the bytes the partition's cuts send, which the paper does not "
              "give (it compiles its own stages).\n\n";
        return bestGain;
    }

    // Fig. 10: the controller under a preempted network against 1F1B; returns the adaptive gain.
    double addAdaptive(const nlohmann::json& claims, const Graph& graph, const Profile& profile,
        const Cluster& baseCluster, const std::vector<GroupingCandidate>& candidates, const GroupingCandidate& oneF1B,
        double base, bool quick, PaperReport& report)
    {
        auto& md = report.markdown;
        // Fig. 10: a preempted network (the paper gives no trace; ours: a tenth of the bandwidth for
        // half of every period), the controller re-estimating every `interval` iterations.
        auto cluster = baseCluster;
        const double periodSeconds = 40 * base * 1e-9;
        cluster.interTrace = BandwidthTrace { { { 0.0, 1.0 }, { periodSeconds / 2, 0.1 } }, periodSeconds };
        const int iterations = quick ? 40 : 120;
        const int interval = 5;
        const auto adaptive = adaptiveGrouping(graph, profile, cluster, candidates, iterations, interval);
        const auto fixedOne = fixedGrouping(graph, profile, cluster, oneF1B, iterations);
        ReportFigure timeline;
        timeline.file = "adagrouper-adaptive.png";
        timeline.title = "Ada-Grouper Fig. 10: k chosen under a preempted network";
        timeline.xLabel = "iteration";
        timeline.yLabel = "k / bandwidth share x 10";
        ReportFigure::Series k { "chosen k", {} };
        ReportFigure::Series share { "bandwidth share measured x 10", {} };
        ReportFigure::Series estimate { "controller's estimate x 10", {} };
        for (const auto& s : adaptive.steps) {
            timeline.x.push_back(s.iteration);
            k.values.push_back(s.k);
            share.values.push_back(10 * s.measuredFraction);
            estimate.values.push_back(10 * s.estimatedFraction);
        }
        timeline.series = { std::move(k), std::move(share), std::move(estimate) };
        const double adaptiveGain = fixedOne.totalSeconds / adaptive.totalSeconds - 1;
        // The (k, b) in force after each switch, against the paper's k at its evaluation times.
        std::string chosen;
        for (std::size_t i = 0; i < adaptive.steps.size(); ++i) {
            const auto& step = adaptive.steps[i];
            if (i == 0 || step.k != adaptive.steps[i - 1].k)
                chosen +=
                    (chosen.empty() ? "" : " -> ") + std::to_string(step.k) + " (b " + fixed(step.microBatch, 0) + ")";
        }
        std::string theirs;
        for (const auto& paperK : claims.at("adaptive_k_sequence"))
            theirs += (theirs.empty() ? "" : " -> ") + std::to_string(paperK.get<int>());
        md += "Preempted network: the links run at a tenth of their bandwidth for half of every "
            + fixed(periodSeconds, 1) + " s (the paper gives no trace); " + std::to_string(iterations)
            + " iterations. The controller measures the bandwidth share each iteration's transfers saw (their time at "
              "nominal bandwidth over the time they took), keeps a moving average (half weight to the newest), and "
              "every "
            + std::to_string(interval)
            + " iterations switches (k, b) to the fastest candidate at that estimate. The adaptive run took "
            + fixed(adaptive.totalSeconds, 1) + " s against 1F1B's " + fixed(fixedOne.totalSeconds, 1) + " s, with "
            + std::to_string(adaptive.switches()) + " switch(es): k " + chosen + "; the paper's Fig. 10: k " + theirs
            + " over four hours of a production network.\n\n";
        md += "![" + timeline.title + "](" + timeline.file + ")\n\n";
        report.figures.push_back(std::move(timeline));
        return adaptiveGain;
    }

    // The headline claims, and why the gain stops or not beyond k = 3.
    void addAdaGrouperClaims(const nlohmann::json& claims, const Graph& graph, const Profile& profile,
        const std::vector<GroupingCandidate>& sorted, const GroupingCandidate& oneF1B, const Granularity& g,
        double blindGain, double adaptiveGain, PaperReport& report)
    {
        auto& md = report.markdown;
        md += "### Headline claims\n\n";
        md += markdownTable({ "claim", "ours, paper's method", "ours, best", "paper" },
                  { { "best k over 1F1B (stable network)",
                        "k=" + std::to_string(g.bestK) + ": +" + fixed(100 * g.bestGain, 1) + "%",
                        g.bestOwnGain > g.bestGain
                            ? "k=" + std::to_string(g.bestOwnK) + ": +" + fixed(100 * g.bestOwnGain, 1)
                                + "% (re-partitioned)"
                            : "k=" + std::to_string(g.bestK) + ": +" + fixed(100 * g.bestGain, 1) + "% (one partition)",
                        "+" + fixed(100 * claims.at("gain_over_1f1b_low").get<double>(), 0) + "% to +"
                            + fixed(100 * claims.at("gain_over_1f1b_high").get<double>(), 0) + "%" },
                      { "best k over 1F1B, on Algorithm 1's transfer-blind 1F1B cuts", "-",
                          std::isnan(blindGain) ? "-" : "+" + fixed(100 * blindGain, 1) + "%",
                          "+" + fixed(100 * claims.at("gain_over_1f1b_low").get<double>(), 0) + "% to +"
                              + fixed(100 * claims.at("gain_over_1f1b_high").get<double>(), 0) + "%" },
                      { "gain left beyond k = 3", fixed(100 * std::max(0.0, g.bestBeyond3 - g.gainAt3), 1) + " points",
                          "-", "no deterministic further improvement for k >= 3" },
                      { "adaptive k over 1F1B, preempted network", "+" + fixed(100 * adaptiveGain, 1) + "%", "-",
                          "over +" + fixed(100 * claims.at("adaptive_gain_over_1f1b").get<double>(), 0) + "%" } })
            + "\n";
        // Why the gain stops or not beyond k = 3: what a sample costs to compute at the smallest
        // micro-batch against the group batch, on the cost model's size-dependent kernel efficiency.
        const auto perSampleNs = [&](double b) {
            double ns = 0;
            for (const auto& c : computeStageCosts(graph, profile, oneF1B.plan.partition, b))
                ns += c.forwardNs + c.backwardNs;
            return ns / b;
        };
        const double smallest = sorted.back().plan.microBatch;
        const double dearer = perSampleNs(smallest) / perSampleNs(oneF1B.plan.microBatch) - 1;
        md += "kFkB gains by overlapping a group's sends with the next group's compute, so the gain grows with the "
              "communication share of an iteration (here "
            + std::string(toString(profile.setup.precision))
            + " activations over the catalog link), and it is paid for in smaller micro-batches: on the cost model's "
              "size-dependent kernel efficiency a sample costs "
            + fixed(100 * dearer, 1) + "% more compute at micro-batch " + fixed(smallest, 0) + " than at "
            + fixed(oneF1B.plan.microBatch, 0) + ". ";
        md += g.bestBeyond3 - g.gainAt3 <= 0.01
            ? "On the one partition that cost offsets the further overlap from k = 3 on (the best k is "
                + std::to_string(g.bestK) + "), as the paper finds; re-partitioned per k, the gain is the column "
                + "beside it."
            : std::string("That cost does not yet offset the further overlap, so the gain keeps growing past k = 3; "
                          "the paper's slower kernels at small micro-batches (fp16 on V100S, below the catalog "
                          "V100's efficiency curve) would stop it earlier.");
        md += " The paper's shared production network also slows 1F1B's exposed transfers more than a "
              "constant-bandwidth link does.\n";
    }

} // namespace

PaperReport reproduceAdaGrouper(const ReproduceOptions& options)
{
    const auto all = nlohmann::json::parse(paperNumbersJson());
    const auto& paper = all.at("adagrouper");
    const auto& claims = paper.at("claims");
    const auto& device = DeviceCatalog::builtin().find(paper.at("device").get<std::string>());
    const auto zoo = paper.at("model").at("zoo").get<std::string>();
    if (options.progress)
        options.progress("adagrouper: " + zoo);
    auto config = zooPreset(zoo);
    if (options.quick)
        config.layers = 8;
    const auto graph = buildZooModel(config);
    // The paper's precision (Table 1: float16): mixed-precision costs, tensor-core GEMMs.
    CostModelOptions costs;
    costs.setup.precision = parsePrecision(paper.at("precision").get<std::string>());
    const auto profile = estimateProfile(graph, device, costs);
    const int stages = options.quick ? 4 : paper.at("stages").get<int>();
    // One GPU per worker machine (§6 "1 GPU per worker"): every stage boundary crosses the network.
    auto cluster = makeCluster(device, stages, 1);
    cluster.interNode = { paper.at("link").at("kind"), paper.at("link").at("bandwidth"), 5e-6 };
    GroupingRequest request;
    request.stages = stages;
    request.globalBatch = paper.at("global_batch").get<double>();
    request.maxK = paper.at("max_k").get<int>();
    request.groupBatch = paper.at("group_batch").get<double>(); // §6: micro-batch 6/k
    request.wholeMicroBatches = true; // a micro-batch holds whole samples: 6/4 = 1.5 runs as 1
    // The paper compiles the stages once and varies (k, b) only: DawnPiper partitions 1F1B at the
    // group batch, and every k runs those cuts. Re-partitioning each k is PipeStudio's own column.
    auto first = request;
    first.maxK = 1;
    const auto oneF1BPlan = groupingCandidates(graph, profile, cluster, first);
    auto repartitioned = groupingCandidates(graph, profile, cluster, request);
    if (!oneF1BPlan.empty())
        request.partition = oneF1BPlan.front().plan.partition;
    const auto candidates = groupingCandidates(graph, profile, cluster, request);
    PaperReport report;
    report.paper = "adagrouper";
    auto& md = report.markdown;
    md = "## Ada-Grouper: kFkB against 1F1B (Figs. 6 and 10)\n\n";
    md += "Source: " + paper.at("source").get<std::string>() + ". Model: " + zoo + " ("
        + paper.at("model").at("paper").get<std::string>() + "), sequence " + std::to_string(config.seq) + ", "
        + std::to_string(config.layers) + " layers; " + std::to_string(stages) + " workers of one " + device.name
        + " each, linked by " + cluster.interNode.kind + "; global batch " + fixed(request.globalBatch, 0) + ".\n\n";
    md += "Assumptions where the paper is silent: the catalog's V100 SXM2 32GB stands in for its V100S-PCIE; the "
          "sequence length above. Setup from the paper: "
        + paper.at("precision").get<std::string>() + " mixed-precision costs ("
        + paper.at("precision_source").get<std::string>()
        + "; fp32 is priced beside it below); its granularity setting, micro-batch 6/k (k groups in flight hold "
          "about what one "
          "6-sample micro-batch would) in whole samples (6/4 and 6/5 run as 1), M = 192/b; one partition for "
          "every k (DawnPiper's for 1F1B at b = 6), as the paper compiles its stages once; the adaptive run "
          "switches between these candidates. PipeStudio's own column re-partitions each k.\n\n";
    const auto oneF1B = std::find_if(candidates.begin(), candidates.end(), [](const auto& c) { return c.k == 1; });
    if (candidates.empty() || oneF1B == candidates.end()) {
        md += "No candidate fits (not even 1F1B): nothing to compare.\n";
        return report;
    }
    const double base = oneF1B->plan.simulation->iterationNs;
    auto sorted = candidates;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.k < b.k; });
    const auto g = addGranularity(sorted, repartitioned, base, report);
    if (options.progress)
        options.progress("adagrouper: fp32");
    addPrecisionSweep(graph, device, cluster, request, sorted, base, costs.setup.precision, Precision::Fp32, report);
    if (options.progress)
        options.progress("adagrouper: Algorithm 1's transfer-blind cuts");
    const double blindGain = addCutAblation(graph, profile, cluster, request, sorted, *oneF1B, report);
    const double adaptiveGain =
        addAdaptive(claims, graph, profile, cluster, candidates, *oneF1B, base, options.quick, report);
    if (options.progress)
        options.progress("adagrouper: weak scaling");
    addWeakScaling(paper, device, options.quick, report);
    addAdaGrouperClaims(claims, graph, profile, sorted, *oneF1B, g, blindGain, adaptiveGain, report);
    return report;
}

} // namespace ps::detail
