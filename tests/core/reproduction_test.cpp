// `pipestudio reproduce`'s sections: the paper's numbers come from the shipped JSON and sit beside
// ours with their ratio; our numbers come from the planner, not from the paper.
#include "cluster/device_catalog.h"
#include "markdown_rows.h"
#include "report/reproduction.h"
#include "scale/collectives.h"
#include "scale/scale_model.h"
#include "scale/scale_sim.h"
#include "util/error.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace ps;
using ps::test::rowCells;

TEST(Reproduction, PaperNumbersShipWithTheBuild)
{
    const auto j = nlohmann::json::parse(paperNumbersJson());
    EXPECT_EQ(j.at("dawnpiper").at("table1_sync").size(), 16U);
    EXPECT_EQ(j.at("dawnpiper").at("table2_async").size(), 10U);
    EXPECT_EQ(j.at("adagrouper").at("global_batch").get<int>(), 192);
    EXPECT_EQ(j.at("ftpipe").at("datasets").size(), 4U);
    EXPECT_EQ(j.at("patrickstar").at("table3_max_model_billions").size(), 4U);
}

TEST(Reproduction, DawnPiperQuickTablesPutThePapersCellsBesideOurs)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("dawnpiper", options);
    EXPECT_EQ(r.paper, "dawnpiper");
    // Table 1, 4 GPUs, BERT: DPiper-S with S+R is 160 in the paper; ZeRO-2 is 64.
    EXPECT_NE(r.markdown.find("| S+R | DPiper-S | "), std::string::npos) << r.markdown;
    const auto row = r.markdown.substr(r.markdown.find("| S+R | DPiper-S | "));
    const auto cells = row.substr(0, row.find('\n'));
    EXPECT_NE(cells.find("| 160 |"), std::string::npos) << cells;
    const auto ours = std::stod(cells.substr(std::string("| S+R | DPiper-S | ").size()));
    EXPECT_GT(ours, 0) << cells;
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "| %.2fx |", ours / 160);
    EXPECT_NE(cells.find(ratio), std::string::npos) << cells;
    // Swap and recompute never fit less than no memory optimization.
    const auto none = r.markdown.substr(r.markdown.find("| None | DPiper-S | "));
    EXPECT_GE(ours, std::stod(none.substr(std::string("| None | DPiper-S | ").size()))) << none.substr(0, 80);
    // The cells labelled with the paper's method run Algorithm 1 under the paper's schedule; the
    // portfolio and sync 1F1B appear only in rows of their own.
    EXPECT_EQ(rowCells(r.markdown, "| None | DPiper-S |").back(), "dawnpiper-paper, gpipe");
    EXPECT_EQ(rowCells(r.markdown, "| S+R | DPiper-S |").back(), "dawnpiper-paper, gpipe + swap/recompute plan");
    EXPECT_EQ(rowCells(r.markdown, "| None | DPiper-AS |").back(), "dawnpiper-paper, pipedream");
    EXPECT_EQ(rowCells(r.markdown, "| None | GPipe |").back(), "gpipe, gpipe");
    EXPECT_EQ(rowCells(r.markdown, "| R | GPipe |").back(), "gpipe, gpipe + checkpoints");
    EXPECT_EQ(rowCells(r.markdown, "| None | DPiper-S (Alg. 1, 1F1B) |").back(), "dawnpiper-paper, 1f1b");
    EXPECT_EQ(rowCells(r.markdown, "| None | DPiper-S (ours, 1F1B) |").back(), "dawnpiper, 1f1b");
    EXPECT_EQ(rowCells(r.markdown, "| S+R | DPiper-AS (ours) |").back(), "dawnpiper, pipedream + swap/recompute plan");
    // Fig. 8's stage balance, on the quick report's one model and stage count.
    EXPECT_NE(r.markdown.find("### Fig. 8: stage balance (bert, asynchronous, 4 GPUs)"), std::string::npos);
    const auto balance = rowCells(r.markdown, "| DPiper-AS (Alg. 1) |");
    ASSERT_EQ(balance.size(), 4U) << r.markdown;
    EXPECT_EQ(balance[1], "dawnpiper-paper, pipedream + swap/recompute plan");
    EXPECT_EQ(balance[2].back(), '%') << balance[2];
    EXPECT_GE(std::stod(balance[2]), 0.0);
    EXPECT_LT(std::stod(balance[2]), 100.0);
    // Fig. 8's spread against the micro-batch, up to the largest DPiper-AS fits (Table 2's S+R cell
    // above): the last row is that batch, at 100% of it, with Alg. 1's spread of the table above.
    const auto sweepAt = r.markdown.find("The spread against the micro-batch");
    ASSERT_NE(sweepAt, std::string::npos) << r.markdown;
    const auto sweep = r.markdown.substr(sweepAt, r.markdown.find("###", sweepAt) - sweepAt);
    const auto largestAs = std::stod(rowCells(r.markdown, "| S+R | DPiper-AS |")[2]);
    const auto atLargest = rowCells(sweep, "| " + std::to_string(std::lround(largestAs)) + " | 100% |");
    ASSERT_EQ(atLargest.size(), 5U) << sweep;
    EXPECT_EQ(atLargest[2], balance[2]) << "the table above runs at the largest batch here";
    EXPECT_NE(sweep.find("at the paper's share of the largest batch"), std::string::npos) << sweep;
    // The claims put the paper's method and the best column beside the paper.
    EXPECT_NE(r.markdown.find("| claim | ours, paper's method | ours, best | paper |"), std::string::npos);
    ASSERT_EQ(r.figures.size(), 3U);
    EXPECT_EQ(r.figures[0].file, "dawnpiper-sync.png");
    EXPECT_FALSE(r.figures[0].series.empty());
    EXPECT_NE(r.markdown.find("![DawnPiper Table 1"), std::string::npos);
    // Figs. 6-7: speed against batch up to the largest batch DPiper-S fits with S+R (Table 1's
    // cell above), which therefore runs there; one line per kind of pipeline.
    const auto sync = r.markdown.substr(r.markdown.find("**bert, 4 stages, sync**"));
    const auto last = rowCells(sync, "| " + std::to_string(std::lround(ours)) + " |");
    ASSERT_EQ(last.size(), 6U) << sync.substr(0, 600);
    EXPECT_GT(std::stod(last[3]), 0) << last[3]; // DPiper-S samples/s
    // At the smallest batch every plan fits: DawnPiper's ratios over GPipe and over the stand-in.
    const auto first = rowCells(sync, "| " + std::to_string(std::lround(ours / 4 / 4) * 4) + " |");
    ASSERT_EQ(first.size(), 6U) << sync.substr(0, 600);
    EXPECT_EQ(first[4].back(), 'x') << first[4];
    EXPECT_EQ(first[5].back(), 'x') << first[5];
    const auto& speed = r.figures[2];
    EXPECT_EQ(speed.file, "dawnpiper-speed-4.png");
    ASSERT_EQ(speed.series.size(), 2U);
    ASSERT_FALSE(speed.x.empty());
    EXPECT_DOUBLE_EQ(speed.x.back(), 1.0);
    EXPECT_TRUE(std::is_sorted(speed.x.begin(), speed.x.end()));
    for (const auto& series : speed.series)
        EXPECT_EQ(series.values.size(), speed.x.size()) << series.name;
    // The CNN workload: AmoebaNet-D at the paper's 28M, each cell beside the paper's AmoebaNet cell
    // and each method's batch over its table's baseline (1.00x for the baseline itself).
    EXPECT_NE(r.markdown.find("### The CNN workload: AmoebaNet-D (18, 120), the tables' AmoebaNet column"),
        std::string::npos);
    EXPECT_NE(r.markdown.find("28.0M parameters"), std::string::npos);
    const auto gpipe = rowCells(r.markdown, "| sync | 4 | None | GPipe |");
    ASSERT_EQ(gpipe.size(), 10U) << r.markdown;
    EXPECT_GT(std::stod(gpipe[4]), 0);
    EXPECT_EQ(gpipe[5], "280"); // the paper's cell
    EXPECT_EQ(gpipe[7], "1.00x");
    EXPECT_EQ(gpipe[8], "1.00x");
    const auto dawnpiper = rowCells(r.markdown, "| sync | 4 | S+R | DPiper-S |");
    ASSERT_EQ(dawnpiper.size(), 10U);
    EXPECT_GT(std::stod(dawnpiper[4]), std::stod(gpipe[4])) << "swap and recompute fit more than no optimization";
    EXPECT_EQ(dawnpiper[5], "1220");
    EXPECT_EQ(dawnpiper[8], "4.36x"); // 1220 / 280, the paper's AmoebaNet cells
    // The paper's cause, measured on ResNet-152 and AmoebaNet themselves: the memory GPipe's cuts
    // leave unused.
    // Without and with torchgpipe's checkpointed stages; on BERT the checkpoints leave more unused
    // (its embedding and head stages hold more parameters and states than the others).
    const auto waste = rowCells(r.markdown, "| ResNet-152, 4 GPUs |");
    ASSERT_EQ(waste.size(), 4U) << r.markdown;
    for (const std::size_t i : { 1U, 2U }) {
        EXPECT_EQ(waste[i].back(), '%');
        EXPECT_GT(std::stod(waste[i]), 0.0);
        EXPECT_LT(std::stod(waste[i]), 100.0);
    }
    EXPECT_EQ(waste[3], "40%");
    const auto amoebaWaste = rowCells(r.markdown, "| AmoebaNet-D (18, 120), 4 GPUs |");
    ASSERT_EQ(amoebaWaste.size(), 4U) << r.markdown;
    EXPECT_GT(std::stod(amoebaWaste[1]), 0.0);
    EXPECT_EQ(amoebaWaste[3], "34%");
    const auto bertWaste = rowCells(r.markdown, "| BERT (bert-large), 4 GPUs |");
    ASSERT_EQ(bertWaste.size(), 4U) << r.markdown;
    EXPECT_GT(std::stod(bertWaste[2]), std::stod(bertWaste[1]));
    EXPECT_EQ(bertWaste[3], "28%");
    // The measured CUDA context and allocator margins taken from every GPU: no cell fits more than
    // on the whole GPU, and the count of cells far from the paper's is stated for both.
    const auto marginsAt = r.markdown.find("fill the whole GPU above");
    ASSERT_NE(marginsAt, std::string::npos) << r.markdown;
    const auto margins = r.markdown.substr(marginsAt);
    for (const auto* method : { "| None | GPipe |", "| None | DPiper-S |", "| S+R | DPiper-S |", "| None | PipeDream |",
             "| S+R | DPiper-AS |" }) {
        const auto whole = rowCells(r.markdown, method);
        const auto less = rowCells(margins,
            std::string(std::string(method).find("AS") != std::string::npos
                        || std::string(method).find("PipeDream") != std::string::npos
                    ? "| async "
                    : "| sync ")
                + method);
        ASSERT_EQ(less.size(), 5U) << method << "\n" << margins;
        EXPECT_GT(std::stod(less[3]), 0) << method;
        EXPECT_LE(std::stod(less[3]), std::stod(whole[2])) << method;
        if (less[3] == whole[2]) {
            EXPECT_EQ(less[4], whole[4]) << method; // the same cell, the same ratio
        }
        EXPECT_EQ(less[4].back(), 'x') << method;
    }
    EXPECT_NE(margins.find(" with the measured margins."), std::string::npos);
}

TEST(Reproduction, AdaGrouperQuickRanksKAgainst1F1BAndRunsTheController)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("adagrouper", options);
    EXPECT_NE(r.markdown.find("| 1 | "), std::string::npos) << r.markdown;
    EXPECT_NE(r.markdown.find("| 1.000 |"), std::string::npos) << "1F1B is the baseline: " << r.markdown;
    EXPECT_NE(r.markdown.find("+10% to +25%"), std::string::npos) << r.markdown;
    // The tables price the paper's fp16 (Table 1's caption); fp32 beside them: the same candidates,
    // 1F1B the baseline in both, the as-run column the granularity table's.
    EXPECT_NE(r.markdown.find("fp16 mixed-precision costs (Table 1's caption"), std::string::npos) << r.markdown;
    const auto fp32 = r.markdown.find("The same candidates on fp32");
    ASSERT_NE(fp32, std::string::npos) << r.markdown;
    const auto fp32k1 = rowCells(r.markdown.substr(fp32), "| 1 | ");
    ASSERT_EQ(fp32k1.size(), 4U) << r.markdown.substr(fp32);
    EXPECT_EQ(fp32k1[1], "1.000");
    EXPECT_EQ(fp32k1[2], "1.000");
    EXPECT_NE(r.markdown.find("In fp32 the best k is "), std::string::npos);
    // The paper's setting: whole-sample micro-batches (6/4 runs as 1) on one partition for every k;
    // re-partitioning each k is PipeStudio's own column.
    const auto k4 = rowCells(r.markdown, "| 4 | ");
    ASSERT_EQ(k4.size(), 7U) << r.markdown;
    EXPECT_EQ(k4[1], "1");
    EXPECT_EQ(k4[2], "192");
    // As run: kFkB with that k, on the cuts 1F1B's row runs (one partition for every k).
    const auto k1 = rowCells(r.markdown, "| 1 | 6 |");
    ASSERT_EQ(k1.size(), 7U) << r.markdown;
    EXPECT_EQ(k1[6].substr(0, 7), "kfkb:1,");
    EXPECT_EQ(k4[6].substr(0, 7), "kfkb:4,");
    EXPECT_EQ(k4[6].substr(k4[6].find("cuts")), k1[6].substr(k1[6].find("cuts"))) << "k 4 was re-partitioned";
    EXPECT_NE(r.markdown.find("| ours: re-partitioned, vs 1F1B |"), std::string::npos);
    EXPECT_NE(r.markdown.find("one partition for every k"), std::string::npos);
    // Fig. 8's weak scaling (quick: the first two configurations at a third of their layers): one
    // worker has nothing to overlap; two workers gain from kFkB.
    EXPECT_NE(r.markdown.find("### Fig. 8: weak scaling (GPT, global batch 64, fp16)"), std::string::npos);
    const auto single = rowCells(r.markdown, "| 1 | GPT-Medium");
    const auto pair = rowCells(r.markdown, "| 2 | GPT-Large");
    ASSERT_EQ(single.size(), 8U) << r.markdown;
    ASSERT_EQ(pair.size(), 8U) << r.markdown;
    EXPECT_LT(std::stod(single[5].substr(1)), 1.0) << single[5];
    EXPECT_GE(std::stod(pair[5].substr(1)), 0.0) << pair[5];
    // A slower link leaves more to overlap: the gain does not shrink, over either 1F1B.
    const auto slow = rowCells(r.markdown, "| 2 | GPT-Large (8 layers, hidden 1536) | 0.10 x ");
    ASSERT_EQ(slow.size(), 8U) << r.markdown;
    EXPECT_GE(std::stod(slow[5].substr(1)), std::stod(pair[5].substr(1)));
    EXPECT_GE(std::stod(slow[7]), std::stod(pair[7]));
    // 1F1B on Algorithm 1's transfer-blind cuts is never faster than the planner's 1F1B by more than
    // the model's noise, so the gain over it is at least the gain over the planner's.
    for (const auto& row : { pair, slow }) {
        EXPECT_GE(std::stod(row[7]) + 0.5, std::stod(row[5].substr(1))) << row[5] << " / " << row[7];
    }
    // The controller's switches are listed beside the paper's.
    EXPECT_NE(r.markdown.find("the paper's Fig. 10: k 5 -> 6 -> 6 -> 3 -> 4"), std::string::npos);
    ASSERT_EQ(r.figures.size(), 2U);
    const auto& timeline = r.figures[1];
    ASSERT_EQ(timeline.series.size(), 3U);
    EXPECT_EQ(timeline.x.size(), timeline.series[0].values.size());
    EXPECT_EQ(timeline.x.size(), 40U);
}

// Ada-Grouper's one partition (PipeStudio's planner, which charges a 1F1B stage its boundaries'
// round trip) against DawnPiper's Algorithm 1 cuts, which leave the transfers out: the as-run
// column is the granularity table's, Algorithm 1's cuts are dawnpiper-paper's for 1F1B and send
// more, its 1F1B is slower than the as-run one, and the best gain stated is the table's best.
TEST(Reproduction, AdaGrouperOnePartitionAgainstTransferBlindCuts)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("adagrouper", options);
    const auto at = r.markdown.find("Where the one partition cuts: ");
    ASSERT_NE(at, std::string::npos) << r.markdown;
    const auto section = r.markdown.substr(at);
    const double asRunMiB = std::stod(section.substr(section.find("send at most ") + 13));
    const double blindMiB = std::stod(section.substr(section.find(") send up to ") + 13));
    EXPECT_LT(asRunMiB, blindMiB) << section;
    const auto cutsAt = section.find("its 1F1B cuts (") + 15;
    const auto blindCuts = section.substr(cutsAt, section.find(')', cutsAt) - cutsAt);
    const auto k1 = rowCells(r.markdown, "| 1 | 6 |");
    ASSERT_EQ(k1.size(), 7U);
    const auto asRunCuts = k1[6].substr(k1[6].find("cuts ") + 5);
    EXPECT_NE(blindCuts, asRunCuts);
    const auto table = section.substr(section.find("| k | as run: iteration ms |"));
    const auto first = rowCells(table, "| 1 | ");
    ASSERT_EQ(first.size(), 5U) << table;
    EXPECT_EQ(first[1], k1[3]); // 1F1B's iteration, as the granularity table has it
    EXPECT_EQ(first[4], "1.000");
    EXPECT_GT(std::stod(first[3]), std::stod(first[1])) << "the transfer-blind 1F1B should be slower here";
    double best = 0;
    for (int k = 2; k <= 6; ++k) {
        const auto row = rowCells(table, "| " + std::to_string(k) + " | ");
        ASSERT_EQ(row.size(), 5U) << k;
        EXPECT_EQ(row[1], rowCells(r.markdown, "| " + std::to_string(k) + " | ")[3]) << k;
        best = std::max(best, std::stod(row[4]) - 1);
    }
    char stated[64];
    std::snprintf(stated, sizeof stated, "at +%.1f%% over it", 100 * best);
    EXPECT_NE(section.find(stated), std::string::npos) << stated << "\n" << section;
    EXPECT_NE(
        r.markdown.find("| best k over 1F1B, on Algorithm 1's transfer-blind 1F1B cuts | - | +"), std::string::npos);
}

TEST(Reproduction, UnknownPaperNamesTheKnownOnes)
{
    try {
        (void)reproducePaper("gshard", {});
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("dawnpiper, adagrouper, ftpipe, patrickstar, megatron"), std::string::npos)
            << e.what();
    }
}

TEST(Reproduction, ReportJoinsTheSectionsUnderOneTitle)
{
    const auto md = reportMarkdown({ { "a", "## A\n", {} }, { "b", "## B\n", {} } }, "pipestudio 9");
    EXPECT_EQ(md.rfind("# PipeStudio reproduces its papers", 0), 0U);
    EXPECT_LT(md.find("## A"), md.find("## B"));
    EXPECT_NE(md.find("pipestudio 9"), std::string::npos);
}

TEST(Reproduction, FtpipeQuickPutsMixedPipeAndTheAsyncPipelineBesideThePaper)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("ftpipe", options);
    EXPECT_EQ(r.paper, "ftpipe");
    // Table 2, BoolQ: mini-batch 20, GPipe at Table 4's 10 micro-batches; the paper's 1.08x and 2.13x.
    const auto t2 = rowCells(r.markdown, "| boolq | 20 |");
    ASSERT_EQ(t2.size(), 17U) << r.markdown;
    EXPECT_EQ(t2[2], "10");
    // The paper's method: Mixed-pipe at L = 2P = 16 blocks, so at most 16 stages (two per GPU).
    EXPECT_NE(r.markdown.find("Mixed-pipe runs at L = 2P blocks"), std::string::npos);
    EXPECT_LE(std::stoi(t2[5]), 16);
    EXPECT_LE(std::stoi(t2[10]), 16);
    EXPECT_GT(std::stod(t2[3]), 0) << "the Seq-pipe baseline fits";
    EXPECT_EQ(t2[7], "1.08");
    EXPECT_EQ(t2[12], "2.13");
    const double sync = std::stod(t2[6]);
    const double async = std::stod(t2[11]);
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.2fx", async / 2.13);
    EXPECT_NEAR(std::stod(t2[13]), std::stod(ratio), 0.011);
    // No flush: the asynchronous pipeline beats the synchronous one on Mixed-pipe partitions.
    EXPECT_GT(async, sync);
    ASSERT_EQ(r.figures.size(), 2U);
    EXPECT_EQ(r.figures[0].categories, std::vector<std::string> { "boolq" });
    EXPECT_EQ(r.figures[1].x, (std::vector<double> { 8, 16 }));
    EXPECT_NE(r.markdown.find("| best L (boolq, async) |"), std::string::npos);
    // Figure 9's sweep measures the communication ratio against L: at L = 2P it is Table 3's cell.
    const auto l16 = rowCells(r.markdown.substr(r.markdown.find("### Figure 9")), "| 16 | ");
    ASSERT_EQ(l16.size(), 4U) << r.markdown;
    const auto t3 = rowCells(r.markdown.substr(r.markdown.find("### Table 3 and")), "| boolq | ");
    ASSERT_EQ(t3.size(), 7U) << r.markdown;
    EXPECT_GT(std::stod(l16[3]), 0);
    EXPECT_EQ(l16[3], t3[4]);
    EXPECT_NE(r.markdown.find("moves with L alone from "), std::string::npos);
    EXPECT_NE(r.markdown.find("the paper's 2.60 is "), std::string::npos);
    // The optimizer-state sweep: its as-run row is Table 2's BoolQ row; each row runs.
    const auto asRun = rowCells(r.markdown, "| 8 B: weights, gradients (as run) |");
    ASSERT_EQ(asRun.size(), 4U) << r.markdown;
    EXPECT_EQ(asRun[2], t2[6]);
    EXPECT_EQ(asRun[3], t2[11]);
    const auto adam = rowCells(r.markdown, "| 16 B: and two moments (Adam) |");
    ASSERT_EQ(adam.size(), 4U) << r.markdown;
    EXPECT_GT(std::stod(adam[3]), 0.0);
    // The headline claims: Table 2's async speedup with the paper's method (the cell above), our
    // best (never below it), the paper's.
    const auto claim = rowCells(r.markdown, "| boolq: async Mixed-pipe over GPipe Seq-pipe |");
    ASSERT_EQ(claim.size(), 4U) << r.markdown;
    EXPECT_EQ(claim[1], t2[11]);
    EXPECT_EQ(claim[3], "2.13");
    // Table 3's Seq-pipe rows: the same partition under both pipelines, beside the paper's 2.04x.
    const auto squad = rowCells(r.markdown, "| squad |");
    ASSERT_EQ(squad.size(), 10U) << r.markdown;
    EXPECT_EQ(squad[8], "2.04");
    EXPECT_GT(std::stod(squad[4]), 0) << "GPipe fits the Seq-pipe partition";
    EXPECT_GT(std::stod(squad[7]), 1.0) << "no flush: async beats sync on one partition";
    // §5.3's communication ratio against L on every dataset run: at L = 2P it is Table 3's cell,
    // and the headline's sentence is the sweep's measurement, not a claim.
    const auto comm = rowCells(r.markdown.substr(r.markdown.find("### §5.3")), "| boolq |");
    ASSERT_EQ(comm.size(), 5U) << r.markdown; // dataset, L = 8, L = 16, paper, inside
    EXPECT_EQ(comm[2], t3[4]);
    EXPECT_EQ(comm[3], "2.60");
    const double low = std::min(std::stod(comm[1]), std::stod(comm[2]));
    const double high = std::max(std::stod(comm[1]), std::stod(comm[2]));
    EXPECT_EQ(comm[4], low <= 2.60 && 2.60 <= high ? "yes" : "no");
    // The headline's sentence states the ratio at the paper's L (Table 3's cell over the paper's).
    const auto sentence = r.markdown.find("The communication ratio at the paper's L = 2P (Table 3) is boolq ");
    ASSERT_NE(sentence, std::string::npos) << r.markdown.substr(r.markdown.find("Where ours differ"));
    const auto stated = std::stod(r.markdown.substr(r.markdown.find("boolq ", sentence) + 6));
    EXPECT_NEAR(stated, std::stod(t3[4]) / 2.60, 0.011);
    // At the paper's L, each coarsening's fastest plan's ratio: Table 3's plan is the fastest of them.
    const auto coarse = rowCells(r.markdown.substr(r.markdown.find("each of Mixed-pipe's coarsenings")), "| boolq |");
    ASSERT_EQ(coarse.size(), 5U) << r.markdown;
    EXPECT_EQ(coarse[4], "2.60");
    EXPECT_TRUE(coarse[1] == t3[4] || coarse[2] == t3[4] || coarse[3] == t3[4]) << t3[4];
    EXPECT_NE(
        r.markdown.find("At L = 2P, some coarsening comes within 1.5x of the paper's ratio on "), std::string::npos);
    // The baseline's two partitioners apart: Table 2's speedup is over the faster of them.
    const auto split = rowCells(r.markdown.substr(r.markdown.find("Seq-pipe baseline's partitioners")), "| boolq |");
    ASSERT_EQ(split.size(), 6U) << r.markdown;
    EXPECT_TRUE(split[3] == t2[11] || split[4] == t2[11]) << split[3] << " " << split[4] << " " << t2[11];
    // Table 3 compares the pipelines on one partition: the async plan's, or where sync cannot run it, the sync plan's.
    EXPECT_GT(std::stod(t3[1]), 0) << t3[1];
}

TEST(Reproduction, PatrickStarQuickFindsTheLargestModelPerSystemOnOneGpu)
{
    ReproduceOptions options;
    options.quick = true;
    const auto r = reproducePaper("patrickstar", options);
    const auto ddp = rowCells(r.markdown, "| 1 | pytorch-ddp |");
    const auto ps = rowCells(r.markdown, "| 1 | patrickstar |");
    ASSERT_EQ(ddp.size(), 6U) << r.markdown;
    ASSERT_EQ(ps.size(), 6U) << r.markdown;
    EXPECT_EQ(ddp[4], "1"); // the paper's Table 3
    EXPECT_EQ(ps[4], "12 (ladder end)");
    // Chunks on GPU and host train a larger model than DDP's everything-on-the-GPU; the search
    // reports the largest size it found, not the paper's last rung.
    EXPECT_GT(std::stod(ps[3]), std::stod(ddp[3]));
    EXPECT_NEAR(std::stod(ps[5]), std::stod(ps[3]) / 12, 0.011) << ps[5];
    // The headline claims: PatrickStar's lead over DeepSpeed on one GPU, ours beside the paper's 12 / 4.
    const auto lead = rowCells(r.markdown, "| PatrickStar's largest over DeepSpeed's on 1 GPU |");
    ASSERT_EQ(lead.size(), 4U) << r.markdown;
    EXPECT_GT(std::stod(lead[1]), 1.0);
    EXPECT_EQ(lead[3], "3.00");
    // Table 4: the speedup over one GPU beside the paper's, from the same searches.
    const auto table4 = r.markdown.find("### Table 4");
    ASSERT_NE(table4, std::string::npos) << r.markdown;
    const auto scaling = rowCells(r.markdown.substr(table4), "| 2 | ");
    ASSERT_EQ(scaling.size(), 8U) << r.markdown;
    EXPECT_NE(scaling[1].find("(2.04)"), std::string::npos) << scaling[1];
    EXPECT_GT(std::stod(scaling[1]), 1.0);
    EXPECT_LT(std::stod(scaling[1]), 2.5);
    ASSERT_EQ(r.figures.size(), 1U);
    EXPECT_EQ(r.figures[0].series.size(), 6U);
    EXPECT_NE(r.markdown.find("| 1 GPU, 12B (Fig. 12) |"), std::string::npos);
    // The memory shares swept: the as-run row is Table 3's cell, and a larger share never fits less.
    const auto asRun = rowCells(r.markdown, "| 0.8 (as run) |");
    const auto more = rowCells(r.markdown, "| 0.9 |");
    ASSERT_GE(asRun.size(), 2U) << r.markdown;
    ASSERT_EQ(more.size(), asRun.size());
    EXPECT_EQ(asRun[1], ps[2]);
    EXPECT_GE(std::stod(more[1].substr(more[1].find('(') + 1)), std::stod(asRun[1].substr(asRun[1].find('(') + 1)));
    // Fig. 12's rungs at a half and a quarter of the host link: the full-rate row is the table's
    // one-GPU throughput, and a slower link never speeds a rung up.
    const auto full = rowCells(r.markdown, "| 15.75 GB/s |");
    const auto quarter = rowCells(r.markdown, "| 3.94 GB/s |");
    ASSERT_EQ(full.size(), 5U) << r.markdown;
    ASSERT_EQ(quarter.size(), 5U);
    EXPECT_EQ(full[4], rowCells(r.markdown, "| 1 GPU, 12B (Fig. 12) |")[1]);
    for (std::size_t i = 1; i < full.size(); ++i)
        EXPECT_LT(std::stod(quarter[i]), std::stod(full[i])) << i;
    EXPECT_NE(r.markdown.find("the paper's by -39%"), std::string::npos);
    // Fig. 12 at each batch: the table's one-GPU 12B throughput is the best of the batches.
    const auto batchesAt = r.markdown.find("Fig. 12's rungs at each batch per GPU");
    ASSERT_NE(batchesAt, std::string::npos) << r.markdown;
    const auto batches = r.markdown.substr(batchesAt);
    double best = 0;
    for (const auto* b : { "| 4 |", "| 8 |", "| 16 |", "| 32 |", "| 64 |" }) {
        const auto row = rowCells(batches, b);
        ASSERT_EQ(row.size(), 5U) << batches.substr(0, 800);
        if (row[4] != "does not fit")
            best = std::max(best, std::stod(row[4]));
    }
    EXPECT_NEAR(best, std::stod(rowCells(r.markdown, "| 1 GPU, 12B (Fig. 12) |")[1]), 0.051);
    // Fig. 13: PatrickStar's total throughput per GPU count with its speedup over DeepSpeed; two
    // GPUs run at most twice one GPU's total.
    const auto fig13At = r.markdown.find("### Fig. 13");
    ASSERT_NE(fig13At, std::string::npos) << r.markdown;
    const auto fig13 = r.markdown.substr(fig13At);
    const auto one = rowCells(fig13, "| 1 | ");
    const auto two = rowCells(fig13, "| 2 | ");
    ASSERT_GE(one.size(), 8U) << fig13.substr(0, 800);
    ASSERT_EQ(two.size(), one.size());
    EXPECT_NE(one[1].find("x DS)"), std::string::npos) << one[1];
    EXPECT_GT(std::stod(two[1]), std::stod(one[1]));
    EXPECT_LE(std::stod(two[1]), 2.5 * std::stod(one[1]));
    EXPECT_NE(fig13.find("the paper 0.90x to 1.49x, faster in 12 of 14"), std::string::npos);
    // DeepSpeed's buffers swept: the as-run row is Table 3's ZeRO-Offload cell, and more memory held
    // outside the model never fits a larger one.
    const auto zero = rowCells(r.markdown, "| 1 | zero-offload |");
    const auto none = rowCells(fig13, "| none (as run) |");
    const auto four = rowCells(fig13, "| 4 GB |");
    ASSERT_EQ(none.size(), 4U) << fig13; // label, 1 GPU, 2 GPUs, matches
    ASSERT_EQ(four.size(), 4U);
    EXPECT_EQ(zero[2].substr(0, zero[2].find(' ')), none[1]);
    EXPECT_NE(r.markdown.find("DeepSpeed's own GPU buffers, the paper's explanation"), std::string::npos);
}
