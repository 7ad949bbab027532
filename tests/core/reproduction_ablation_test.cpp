// The DawnPiper report's ablations (core/report/dawnpiper_ablations.h, dawnpiper_figures.h) run on
// their own: each table's cells and the sentence under it agree.
#include "cluster/device_catalog.h"
#include "markdown_rows.h"
#include "report/dawnpiper_ablations.h"
#include "report/dawnpiper_figures.h"
#include "report/reproduction.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

using namespace ps;
using ps::test::rowCells;

namespace {
// DawnPiper's paper numbers, GPU and link, as its report reads them.
struct DawnPiperSetup
{
    nlohmann::json all = nlohmann::json::parse(paperNumbersJson());
    const nlohmann::json& paper = all.at("dawnpiper");
    const DeviceSpec& device = DeviceCatalog::builtin().find(paper.at("device").get<std::string>());
    LinkSpec link { paper.at("link").at("kind").get<std::string>(), paper.at("link").at("bandwidth").get<double>(), 0 };
};
} // namespace

// The GPT-2 asynchronous headline against memory held back on every GPU: the whole-GPU row is
// Table 2's cells, and holding memory back never fits a larger batch.
TEST(Reproduction, DawnPiperAsyncHeadlineAgainstAMemoryReserve)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addAsyncReserve(d.paper, d.device, d.link, { 4 }, {}, md);
    std::vector<double> baseline;
    std::vector<double> dawn;
    for (const auto* reserve : { "| 0 GB |", "| 2 GB |", "| 4 GB |", "| 6 GB |" }) {
        const auto row = rowCells(md, reserve);
        ASSERT_EQ(row.size(), 4U) << md;
        baseline.push_back(std::stod(row[1]));
        dawn.push_back(std::stod(row[2]));
        EXPECT_NE(row[3].find("(paper 5.0)"), std::string::npos) << row[3];
    }
    for (std::size_t i = 1; i < baseline.size(); ++i) {
        EXPECT_LE(baseline[i], baseline[i - 1]);
        EXPECT_LE(dawn[i], dawn[i - 1]);
    }
    EXPECT_GT(dawn.back(), baseline.back());
}

// BERT's memory waste against the batch, GPipe's cuts and checkpoints, and PipeDream on 4 and on the
// paper's 8 GPUs: each a share of the largest stage peak. Checkpointing every stage (each stage
// keeps only its inputs) leaves the parameters and optimizer states, uneven across BERT's stages,
// to set the peaks: it raises the waste at every batch share, and the sentence gives each range.
TEST(Reproduction, DawnPiperBertMemoryWasteAgainstBatchCutsAndCheckpoints)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addBertMemoryWaste(d.paper, d.device, d.link, {}, md);
    const auto wastes = [&md](const std::string& pipeline) {
        std::vector<double> out;
        for (auto at = md.find("| " + pipeline + " |"); at != std::string::npos;
             at = md.find("| " + pipeline + " |", at + 1)) {
            const auto row = rowCells(md.substr(at), "| " + pipeline + " |");
            EXPECT_EQ(row.size(), 4U) << md;
            out.push_back(std::stod(row.at(2)));
            EXPECT_GE(out.back(), 0.0);
            EXPECT_LT(out.back(), 100.0);
        }
        return out;
    };
    const auto equal = wastes("GPipe, equal layers, 4 GPUs");
    const auto timed = wastes("GPipe, equal compute time, 4 GPUs");
    const auto checkpointed = wastes("GPipe, equal layers, checkpointed stages, 4 GPUs");
    ASSERT_EQ(equal.size(), 3U) << md;
    ASSERT_EQ(timed.size(), 3U) << md;
    ASSERT_EQ(checkpointed.size(), 3U) << md;
    for (std::size_t i = 0; i < 3; ++i)
        EXPECT_GT(checkpointed[i], equal[i]) << md;
    ASSERT_EQ(wastes("PipeDream, 4 GPUs").size(), 1U) << md;
    ASSERT_EQ(wastes("PipeDream, 8 GPUs (the paper's)").size(), 1U) << md;
    const auto span = [](const std::vector<double>& v) {
        return ps::detail::fixed(*std::min_element(v.begin(), v.end()), 1) + "-"
            + ps::detail::fixed(*std::max_element(v.begin(), v.end()), 1) + "%";
    };
    EXPECT_NE(md.find("Under equal-layer cuts ours is " + span(equal)), std::string::npos) << md;
    EXPECT_NE(md.find("compute time instead, " + span(timed)), std::string::npos) << md;
    EXPECT_NE(md.find("with every stage checkpointed, " + span(checkpointed)), std::string::npos) << md;
    EXPECT_NE(
        md.find("paper's 8 GPUs give " + ps::detail::fixed(wastes("PipeDream, 8 GPUs (the paper's)")[0], 1) + "%"),
        std::string::npos)
        << md;
    EXPECT_EQ(rowCells(md, "| GPipe, equal layers, 4 GPUs |")[3], "28% (Fig. 2)");
    EXPECT_EQ(rowCells(md, "| PipeDream, 8 GPUs (the paper's) |")[3], "over 40% (Fig. 3)");
}

// The S+R cells with one kind of memory action each: neither alone fits more than both, and the
// sentence counts the cells recomputation alone carries.
TEST(Reproduction, DawnPiperSplitsSwapAndRecompute)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addSwapRecomputeSplit(d.paper, d.device, d.link, { "bert" }, { 4 }, {}, md);
    int carried = 0;
    for (const auto* row : { "| bert | sync | 4 | DPiper-S |", "| bert | async | 4 | DPiper-AS |" }) {
        const auto cells = rowCells(md, row);
        ASSERT_EQ(cells.size(), 9U) << md;
        const double both = std::stod(cells[4]);
        EXPECT_GE(both, std::stod(cells[5])) << row;
        EXPECT_GE(both, std::stod(cells[6])) << row;
        carried += cells[6] == cells[4] ? 1 : 0;
    }
    EXPECT_EQ(rowCells(md, "| bert | sync | 4 | DPiper-S |")[7], "160");
    EXPECT_NE(md.find("gives the S+R cell in " + std::to_string(carried) + " of 2 cells"), std::string::npos) << md;
}

// The AmoebaNet column's cells against the image side the paper does not give: every method fits
// fewer samples on larger images, and the last row is the paper's cells.
TEST(Reproduction, DawnPiperAmoebaNetCellsAgainstTheImageSide)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addCnnImageSweep(d.paper, d.device, d.link, {}, md);
    const auto small = rowCells(md, "| 224 |");
    const auto large = rowCells(md, "| 320 |");
    ASSERT_EQ(small.size(), 8U) << md;
    ASSERT_EQ(large.size(), 8U) << md;
    const auto paper = rowCells(md, "| paper |");
    ASSERT_EQ(paper.size(), 8U);
    for (std::size_t i = 1; i < small.size(); ++i) {
        EXPECT_LT(std::stod(large[i]), std::stod(small[i])) << md;
        // Each cell's ratio is that cell over the paper's: "904 (2.19x)".
        const auto open = small[i].find('(');
        ASSERT_NE(open, std::string::npos) << small[i];
        EXPECT_NEAR(std::stod(small[i].substr(open + 1)), std::stod(small[i]) / std::stod(paper[i]), 0.01) << small[i];
    }
    EXPECT_EQ(paper[1], "412"); // ZeRO-2, 4 GPUs
    EXPECT_EQ(paper[7], "480"); // DPiper-AS S+R, 4 GPUs
}

// PipeDream's AmoebaNet cell with its dynamic program over operations and with equal cells per
// stage: the async ratio over each, beside the paper's (480 / 70 on 4 GPUs), and DawnPiper's own
// S+R gain in the sentence under it.
TEST(Reproduction, DawnPiperAmoebaNetPipeDreamAgainstItsCuts)
{
    const DawnPiperSetup d;
    std::string md;
    ps::detail::addCnnPipeDreamCuts(d.paper, d.device, d.link, { 4 }, {}, md);
    const auto row = rowCells(md, "| 4 |");
    ASSERT_EQ(row.size(), 7U) << md;
    EXPECT_EQ(row[3], "70");
    EXPECT_EQ(row[6], "6.86x");
    // The report's measured cause: PipeDream's cuts by cells fit fewer samples than its cuts by
    // operations, so DawnPiper's S+R ratio over them comes closer to the paper's; S+R beats both.
    EXPECT_LT(std::stod(row[2]), std::stod(row[1])) << md;
    EXPECT_GT(std::stod(row[4]), 1.0) << md;
    EXPECT_GT(std::stod(row[5]), std::stod(row[4])) << md;
    EXPECT_LT(std::stod(row[5]), std::stod(row[6])) << "above the paper's: the sentence would be wrong";
    EXPECT_NE(md.find("4 GPUs: ours "), std::string::npos) << md;
    EXPECT_NE(md.find("the paper's 3.20x"), std::string::npos) << md; // 480 / 150
}
